"""`min_shards` counts distinct devices, checked on the table's shards together (never one shard as the table):
a plan that honours it measures and evaluates; two shards on one device break it; every sharder spreads them."""

from __future__ import annotations

from pathlib import Path

import pytest

from dreamshard.cli.app import invoke
from dreamshard.documents import save_inventory, save_plan
from dreamshard.errors import PlanError
from dreamshard.inventory.synth import synth_inventory
from dreamshard.placement.expand import expand_plan
from dreamshard.placement.spread import spread_shards
from dreamshard.placement.validate import check_placement
from dreamshard.profiling.oracle import Oracle
from dreamshard.profiling.simulator import SimulatorBackend
from dreamshard.sharders import get_sharder
from dreamshard.values import ColumnShard, Inventory, Table, TableConstraints, Topology

TOPO = Topology(num_devices=4, memory_per_device_gb=16.0)


def inventory(min_shards: int = 2) -> Inventory:
    tables = [
        Table(
            name="query",
            num_embeddings=10000,
            embedding_dim=64,
            pooling_factor=4.0,
            constraints=TableConstraints(min_shards=min_shards),
        ),
        *(Table(name=f"t{i}", num_embeddings=5000, embedding_dim=16, pooling_factor=2.0) for i in range(5)),
    ]
    return Inventory(name="ms", tables=tuple(tables))


def shards(*devices: int) -> tuple[ColumnShard, ...]:
    width = 64 // len(devices)
    return tuple(ColumnShard(start=i * width, end=(i + 1) * width, device=d) for i, d in enumerate(devices))


def test_a_plan_that_honours_min_shards_is_measured_shard_by_shard() -> None:
    inv = inventory()
    placement = {f"t{i}": i % 4 for i in range(5)}
    check_placement(inv, placement, TOPO, {"query": shards(0, 1)})
    oracle = Oracle(SimulatorBackend(), warmup=0, repeats=1)
    plan = get_sharder("dim_greedy").shard(inv, TOPO)
    units, unit_placement = expand_plan(inv, plan)
    assert oracle.measure(units, unit_placement, TOPO).costs.overall_ms > 0  # was: "query@0:32 ... into 1 shard"


def test_two_shards_on_one_device_do_not_meet_min_shards_2() -> None:
    inv = inventory()
    placement = {f"t{i}": i % 4 for i in range(5)}
    with pytest.raises(PlanError, match="min_shards 2: the plan cuts it into 2 shards on 1 device"):
        check_placement(inv, placement, TOPO, {"query": shards(3, 3)})
    with pytest.raises(PlanError, match="min_shards 4: the plan cuts it into 4 shards on 3 devices"):
        check_placement(inventory(4), placement, TOPO, {"query": shards(0, 1, 2, 2)})


@pytest.mark.parametrize(
    "sharder", ["dim_greedy", "size_greedy", "round_robin", "random", "dreamshard_lpt", "dreamshard", "dreamshard_rl"]
)
def test_every_sharder_spreads_the_shards(sharder: str) -> None:
    inv = inventory(4)
    plan = get_sharder(sharder).shard(inv, TOPO)
    cut = plan.column_shards.get("query") or plan.row_shards.get("query")
    assert cut is not None and len({s.device for s in cut}) >= 4
    check_placement(inv, plan.placement, TOPO, plan.column_shards, row_shards=plan.row_shards)


def test_spread_moves_the_fewest_shards_to_the_least_used_devices() -> None:
    inv = inventory(2)
    units = Inventory(name="u", tables=tuple(expand_plan(inv, _plan(inv, (2, 2)))[0].tables))
    placement = expand_plan(inv, _plan(inv, (2, 2)))[1]
    moved = spread_shards(units, placement, TOPO)
    assert {moved["query@0:32"], moved["query@32:64"]} >= {2} and moved["query@0:32"] != moved["query@32:64"]
    assert sum(moved[k] != v for k, v in placement.items()) == 1
    assert spread_shards(units, placement, TOPO, fixed={"query@0:32", "query@32:64"}) == placement


def test_evaluate_accepts_a_plan_honouring_min_shards(tmp_path: Path) -> None:
    inv = inventory()
    save_inventory(inv, tmp_path / "inv.yaml")
    save_plan(get_sharder("dim_greedy").shard(inv, TOPO), tmp_path / "plan.json")
    code, _, err = invoke(
        ["evaluate", "-i", str(tmp_path / "inv.yaml"), "-p", str(tmp_path / "plan.json"), "--backend", "simulator"]
    )
    assert code == 0, err


def _plan(inv: Inventory, devices: tuple[int, ...]):  # type: ignore[no-untyped-def]
    plan = get_sharder("dim_greedy").shard(inv, TOPO)
    return plan.model_copy(update={"column_shards": {"query": shards(*devices)}})


def test_synthetic_inventories_are_unaffected() -> None:
    inv = synth_inventory(8, seed=1, name="s")
    plan = get_sharder("dim_greedy").shard(inv, TOPO)
    units, placement = expand_plan(inv, plan)
    assert spread_shards(units, placement, TOPO) == placement


def test_refinement_never_proposes_two_shards_of_a_min_shards_table_together() -> None:
    from dreamshard.measured.refine import _Room

    inv = inventory(2)
    plan = _plan(inv, (0, 1))
    units, placement = expand_plan(inv, plan)
    room = _Room.of(units, TOPO)
    on: dict[int, list[str]] = {d: [u for u, e in placement.items() if e == d] for d in range(4)}
    assert not room.keeps(on, 0, 1, "query@0:32", None)  # onto its sibling's device
    assert room.keeps(on, 0, 2, "query@0:32", None)  # onto a free device
    on[2].append("query@32:64")  # a sibling on device 2 too: a swap that brings query@0:32 there is refused
    other = next(u for u in on[2] if not u.startswith("query"))
    assert not room.keeps(on, 0, 2, "query@0:32", other)
    assert room.keeps(on, 0, 1, "query@0:32", "query@32:64")  # the two shards trading places stay apart
