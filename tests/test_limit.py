"""The limit a plan can approach (dreamshard.evaluation.limit): below every measured plan and every table-wise
placement of small simulated tasks, exact where the optimum is known, and shown per contender in every report."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from dreamshard.cli.app import invoke
from dreamshard.documents import save_inventory
from dreamshard.evaluation import compare_sharders, comparison_markdown, comparison_table
from dreamshard.evaluation.limit import contender_gap, even_compute, plan_limit
from dreamshard.evaluation.render_limit import limit_line
from dreamshard.inventory.synth import synth_inventory
from dreamshard.profiling import make_oracle
from dreamshard.sharders import HEURISTICS
from dreamshard.values import Costs, DeviceCost, Inventory, Table, Topology


def _tables(n: int, seed: int) -> Inventory:
    """Hand-set tables of very different sizes: a working set far beyond the simulator's cache for some."""
    rows = (10, 3_000, 200_000, 5_000_000, 40_000, 700)
    dims = (4, 16, 64, 128, 32, 8)
    pooling = (0.0, 1.0, 20.0, 150.0, 3.0, 60.0)
    return Inventory(
        name="hand",
        tables=tuple(
            Table(
                name=f"t{i}",
                num_embeddings=rows[(i + seed) % 6],
                embedding_dim=dims[(i * 5 + seed) % 6],
                pooling_factor=pooling[(i * 7 + seed) % 6],
            )
            for i in range(n)
        ),
    )


TASKS = [
    (synth_inventory(5, 3, name="x"), 2, 512),
    (synth_inventory(6, 11, name="x"), 3, 2048),
    (synth_inventory(4, 7, name="x"), 2, 8192),
    (_tables(5, 0), 2, 1024),
    (_tables(6, 2), 3, 128),
    (_tables(3, 1), 3, 8192),  # fewer tables than devices: a table-wise plan leaves a device empty
]


@pytest.mark.parametrize(("inv", "devices", "batch"), TASKS)
def test_the_limit_is_below_every_table_wise_placement(inv: Inventory, devices: int, batch: int) -> None:
    """Exhaustively on the simulator: the limit made from the heuristics' plans is below every table-wise placement
    of the tables, measured or not (the launch overhead is paid once per device, fusion is not additive)."""
    topo = Topology(num_devices=devices, memory_per_device_gb=1000.0, batch_size=batch)
    oracle = make_oracle("simulator")
    cmp = compare_sharders(inv, topo, [*HEURISTICS], oracle, rounds=1)
    assert cmp.limit is not None
    names = [t.name for t in inv.tables]
    costs = [
        oracle.measure(inv, dict(zip(names, devs, strict=True)), topo).overall_ms
        for devs in itertools.product(range(devices), repeat=len(names))
    ]
    assert cmp.limit.total_ms <= min(costs) * (1 + 1e-9), (cmp.limit, min(costs))
    assert all(r.ratio_to_limit >= 1.0 - 1e-9 for r in cmp.results)


def _twins(devices: int) -> Inventory:
    """2 x devices identical tables (too large to replicate cheaply: their all-to-all is the least exchange)."""
    t = Table(name="t", num_embeddings=400_000, embedding_dim=64, pooling_factor=8.0)
    return Inventory(name="twins", tables=tuple(t.model_copy(update={"name": f"t{i}"}) for i in range(2 * devices)))


@pytest.mark.parametrize("devices", [2, 4])
def test_a_balanced_plan_of_identical_tables_is_at_the_limits_compute(devices: int) -> None:
    """Two identical tables a device (round robin): nothing is unbalanced and no plan fuses them better, so its gap
    is only the exchange above the least any plan pays; its compute is the limit's: the fixed cost once a device."""
    inv = _twins(devices)
    topo = Topology(num_devices=devices, memory_per_device_gb=1000.0, batch_size=2048)
    cmp = compare_sharders(inv, topo, ["round_robin", "size_greedy", "random"], make_oracle("simulator"), rounds=1)
    lim = cmp.limit
    assert lim is not None and lim.fixed_ms > 0
    rr = cmp.result("round_robin")
    gap = cmp.gap(rr)
    assert gap is not None
    assert gap.imbalance_ms == pytest.approx(0.0, abs=1e-9) and gap.noise_ms == pytest.approx(0.0, abs=1e-9)
    assert gap.fusion_ms == pytest.approx(0.0, abs=1e-9)
    assert rr.overall_ms == pytest.approx(lim.even_ms + gap.exchange_ms)
    # the fixed cost is one device's, not one table's: the tables alone pay it once each
    assert lim.compute_ms == pytest.approx(rr.fused_compute_ms / devices)


def test_every_contender_gap_adds_up_and_no_part_is_negative() -> None:
    inv = synth_inventory(14, 5, name="x")
    topo = Topology(num_devices=4, memory_per_device_gb=1000.0, batch_size=1024)
    cmp = compare_sharders(inv, topo, [*HEURISTICS], make_oracle("simulator"), rounds=1)
    assert cmp.limit is not None
    for r in cmp.results:
        gap = cmp.gap(r)
        assert gap is not None
        assert min(gap.noise_ms, gap.imbalance_ms, gap.fusion_ms) >= -1e-9, (r.sharder, gap)
        parts = gap.noise_ms + gap.imbalance_ms + gap.fusion_ms + gap.exchange_ms
        assert cmp.limit.even_ms + parts == pytest.approx(r.overall_ms)


def test_even_compute_charges_the_fixed_cost_once_a_device() -> None:
    """Hand-set: 4 devices each 2.0 ms of compute of which 0.5 ms fixed; the same on 2 of 4 devices."""
    assert even_compute(8.0, 4, 0.5, 4) == pytest.approx(2.0)
    assert even_compute(4.0, 2, 0.5, 4) == pytest.approx(0.5 + 3.0 / 4)  # shared by all 4 devices
    assert even_compute(0.6, 2, 0.5, 4) == pytest.approx(0.3)  # below the fixed cost: never above its own mean
    assert even_compute(0.0, 0, 0.5, 4) == 0.0


def test_a_plan_on_fewer_devices_is_charged_the_fixed_cost_of_the_others() -> None:
    """The limit takes the measured plan whose compute spread over all devices is least; the gap of a plan that
    leaves devices empty shows it as fusion (the compute its devices carry above the limit's)."""
    from dreamshard.evaluation.bounds import LowerBound

    lb = LowerBound(
        max_single_ms=1.0, sum_single_ms=0.0, compute_ms=0.0, comm_ms=0.25, total_ms=0.0, fixed_ms=0.5, variable_ms=5.0
    )
    lim = plan_limit(lb, [("spread", 8.0, 4), ("packed", 4.5, 2)], 4)
    assert lim is not None and lim.fused_by == "packed"
    assert lim.compute_ms == pytest.approx(0.5 + 3.5 / 4)
    assert lim.fusion_ratio == pytest.approx(3.5 / 5.0)
    assert lim.total_ms == pytest.approx(max(1.0, lim.compute_ms + 0.25))
    costs = Costs.from_devices(
        [DeviceCost.from_list([1.0, 0.25, 0.25, 1.5]), DeviceCost.from_list([1.0, 0.0, 0.0, 1.0]), DeviceCost.zero()]
    )
    gap = contender_gap(lim, overall_ms=3.5, costs=costs, fused_ms=4.5, used=2)
    assert gap.noise_ms == pytest.approx(0.5)  # the median round's slowest device above the slowest median
    assert gap.fusion_ms == pytest.approx(2.25 - lim.compute_ms)
    assert gap.exchange_ms == pytest.approx(0.5 / 2 - 0.25)
    assert gap.imbalance_ms == pytest.approx(3.0 - 2.25 - 0.25)
    assert plan_limit(lb, [], 4) is None


def test_every_report_shows_each_contenders_x_limit(tmp_path: Path) -> None:
    inv = synth_inventory(10, 0, name="x")
    topo = Topology(num_devices=2, memory_per_device_gb=1000.0, batch_size=512)
    cmp = compare_sharders(inv, topo, ["dim_greedy", "round_robin"], make_oracle("simulator"), rounds=1)
    md = comparison_markdown(cmp)
    assert "ratio to limit" in md and limit_line(cmp) in md
    for r in cmp.results:
        assert r.ratio_to_limit >= 1.0
        assert f"| {r.ratio_to_lower_bound:.3f} | {r.ratio_to_limit:.3f} |" in md
        assert cmp.summary()["sharders"][r.sharder]["ratio_to_limit"] == r.ratio_to_limit
    table = comparison_table(cmp)
    assert "x limit" in [c.header for c in table.columns]
    # the CLI's table and --json
    path = tmp_path / "inv.yaml"
    save_inventory(inv, path)
    code, out, err = invoke(
        ["compare", "-i", str(path), "-d", "2", "--sharders", "dim_greedy,round_robin", "--backend", "simulator"]
        + ["--rounds", "1", "--json"]
    )
    assert code == 0, err
    doc = json.loads(out)
    assert doc["limit"]["total_ms"] > 0
    assert all(r["ratio_to_limit"] >= 1.0 for r in doc["results"])


def test_the_gates_comparison_measures_no_limit() -> None:
    inv = synth_inventory(6, 0, name="x")
    topo = Topology(num_devices=2, memory_per_device_gb=1000.0, batch_size=512)
    cmp = compare_sharders(inv, topo, ["dim_greedy"], make_oracle("simulator"), rounds=1, with_lower_bound=False)
    assert cmp.limit is None and cmp.results[0].ratio_to_limit == 0.0
    assert "limit not measured" in comparison_markdown(cmp)
