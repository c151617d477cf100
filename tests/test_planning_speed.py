"""Planning made faster without changing a plan (bench/scale.py times it): seeded plans keep their placements, the
greedy heuristics' heap finds the device the scan over legal devices found, and the planning cost's member spread is
torch's. The digests below are of the plans before the speed-ups (heuristics' linear scans, torch's std)."""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Mapping

import pytest
import torch

from dreamshard.errors import InfeasiblePlacementError
from dreamshard.inventory.synth import synth_inventory
from dreamshard.learning.planning_cost import member_std
from dreamshard.placement.room import Room
from dreamshard.sharders import HEURISTICS, get_sharder
from dreamshard.sharders.heuristics import GreedySharder, lookup_cost, size_cost
from dreamshard.values import Inventory, Plan, Table, TableConstraints, Topology


def digest(plan: Plan) -> str:
    doc = plan.model_dump(mode="json")
    shape = {k: doc[k] for k in ("placement", "column_shards", "row_shards", "data_parallel")}
    return hashlib.sha256(json.dumps(shape, sort_keys=True).encode()).hexdigest()[:16]


@pytest.mark.parametrize(
    ("tables", "seed", "devices", "memory_gb", "expected"),
    [
        (60, 4, 4, 4.0, "1d78a7890f17cddf"),
        (120, 3, 8, 2.0, "c6bf72bbe999b5ed"),
        (40, 9, 16, 4.0, "e5dd9b68ec159d19"),
    ],
)
def test_the_search_plans_what_it_planned_before(
    tables: int, seed: int, devices: int, memory_gb: float, expected: str
) -> None:
    inv = synth_inventory(tables, seed, name="x")
    topo = Topology(num_devices=devices, memory_per_device_gb=memory_gb, batch_size=2048)
    assert digest(get_sharder("dreamshard", seed=seed).shard(inv, topo)) == expected


HEURISTIC_DIGESTS = {
    "random": "091e03f46592238a",
    "round_robin": "1ff5970e2b6a41c9",
    "dim_greedy": "4e4091690d62effa",
    "size_greedy": "ac73ccb348db96b5",
    "lookup_greedy": "2d69977bfc99572a",
    "size_lookup_greedy": "573aaf86bda2f203",
}


@pytest.mark.parametrize("name", HEURISTICS)
def test_every_heuristic_places_as_before_on_tight_memory(name: str) -> None:
    """120 tables on 16 devices of 0.9 GB: devices fill up, so the heap skips full ones."""
    inv = synth_inventory(120, 7, name="x")
    topo = Topology(num_devices=16, memory_per_device_gb=0.9, batch_size=2048)
    assert digest(get_sharder(name).shard(inv, topo)) == HEURISTIC_DIGESTS[name]


def _scan_greedy(units: Inventory, topology: Topology, cost: GreedySharder) -> dict[str, int]:
    """The greedy as it was: every unit onto the least (load, device) of its legal devices, a full scan each."""
    room = Room(units, topology, {})
    load = [0.0] * topology.num_devices
    out: dict[str, int] = {}
    for t in sorted(units.tables, key=lambda t: (-cost.cost(t), t.name)):
        legal = room.legal(t.name)
        if not legal:
            raise InfeasiblePlacementError(t.name, 0.0, 0.0, "scan")
        d = min(legal, key=lambda i: (load[i], i))
        load[d] += cost.cost(t)
        room.add(d, t.name)
        out[t.name] = d
    return out


def _inventory(seed: int, n: int, devices: int) -> Inventory:
    """Tables of random sizes (ties in the proxy cost included), a third pinned to a few devices."""
    rng = random.Random(seed)
    tables = []
    for i in range(n):
        pin = tuple(sorted(rng.sample(range(devices), rng.randint(1, 3)))) if rng.random() < 0.3 else None
        tables.append(
            Table(
                name=f"t{i:03d}",
                num_embeddings=rng.choice([1_000, 50_000, 200_000, 600_000]),
                embedding_dim=rng.choice([8, 16, 64]),
                pooling_factor=rng.choice([0.0, 1.0, 4.0]),
                constraints=TableConstraints(devices=pin) if pin else None,
            )
        )
    return Inventory(name="pins", tables=tuple(tables))


@pytest.mark.parametrize("seed", range(6))
def test_the_heap_finds_the_least_loaded_legal_device_as_the_scan_did(seed: int) -> None:
    devices = 12
    inv = _inventory(seed, 80, devices)
    for memory_gb in (4.0, 0.3):  # roomy, then tight (devices fill up; some seeds cannot place every table)
        topo = Topology(num_devices=devices, memory_per_device_gb=memory_gb, batch_size=512)
        for cost in (GreedySharder("size", size_cost), GreedySharder("lookup", lookup_cost)):
            try:
                expected: Mapping[str, int] | None = _scan_greedy(inv, topo, cost)
            except InfeasiblePlacementError:
                expected = None
            if expected is None:
                with pytest.raises(InfeasiblePlacementError):
                    cost.place_units(inv, topo, {})
            else:
                assert cost.place_units(inv, topo, {}) == expected


@torch.no_grad()
def test_the_member_spread_is_torchs() -> None:
    """Planning's spread (no gradients: two passes in float64) equals torch's figure by figure (a float32 two-pass
    differs in about a fifth of them)."""
    gen = torch.Generator().manual_seed(0)
    for scale, offset in ((1e-3, 2.0), (1.0, 2.0), (1e3, 37.0), (1e-2, 1e4)):
        x = torch.randn(3, 1024, 4, generator=gen) * scale + offset * scale
        assert torch.equal(member_std(x), x.std(0, unbiased=False))
    y = torch.randn(3, 5, dtype=torch.float64, generator=gen)
    assert torch.equal(member_std(y), y.std(0, unbiased=False))
