"""compare/evaluate logic with a deterministic fake oracle (the real backends have their own tests)."""

from __future__ import annotations

import json
from collections.abc import Mapping

import pytest

from dreamshard.errors import InputFileError, PlanError, UnknownSharderError
from dreamshard.evaluation import (
    compare_sharders,
    comparison_markdown,
    device_table_markdown,
    evaluate_plan,
    load_comparison,
    lower_bound,
    plot_comparison,
)
from dreamshard.profiling import Oracle
from dreamshard.sharders import HEURISTICS, get_sharder
from dreamshard.values import BackendInfo, CommModel, Costs, DeviceCost, Inventory, Measurement, Table, Topology


class FakeOracle:
    """Cost of a device = sum over its tables of dim * pooling / 100 (additive, noise-free)."""

    info = BackendInfo(
        name="fake",
        operator="analytic",
        device="cpu",
        num_threads=1,
        batch_size=0,
        warmup=0,
        repeats=1,
        is_simulated=True,
    )

    corpus = None
    corpus_as = Oracle.corpus_as  # compare_sharders measures its contenders with no corpus

    def __init__(self) -> None:
        self.calls: list[str] = []

    def _dev(self, tables: list[Table]) -> DeviceCost:
        c = sum(t.embedding_dim * t.pooling_factor for t in tables) / 100.0
        return DeviceCost(fwd_compute=c, fwd_comm=0.0, bwd_comm=0.0, bwd_compute=2 * c)

    def measure(
        self,
        inventory: Inventory,
        placement: Mapping[str, int],
        topology: Topology,
        *,
        kind: str = "placement",
        task: str = "",
        **_: object,
    ) -> Measurement:
        if kind == "placement":
            self.calls.append(task)
        by = inventory.by_name()
        per = [self._dev([by[n] for n, d in placement.items() if d == i]) for i in range(topology.num_devices)]
        return Measurement(
            kind=kind,
            task=task,
            inventory_name=inventory.name,
            inventory_fingerprint=inventory.fingerprint(),
            topology=topology,
            placement=dict(placement),
            costs=Costs.from_devices(per),
            backend=self.info,
        )


def _inv() -> Inventory:
    tables = [
        Table(
            name=f"t{i}",
            num_embeddings=1000 * (i + 1),
            embedding_dim=16 * (1 + i % 4),
            pooling_factor=float(1 + (i * 7) % 13),
        )
        for i in range(12)
    ]
    return Inventory(name="inv", tables=tuple(tables))


TOPO = Topology(num_devices=3, memory_per_device_gb=1.0, batch_size=128)


def _single(inv: Inventory, name: str, topo: Topology, compute: float, comm: CommModel | None) -> Measurement:
    from dreamshard.profiling.comm import device_comm_bytes

    c = (
        comm.cost_ms(device_comm_bytes(topo.batch_size, [inv.by_name()[name].embedding_dim], topo.num_devices))
        if comm
        else 0.0
    )
    per = [DeviceCost(fwd_compute=compute / 2, fwd_comm=c, bwd_comm=c, bwd_compute=compute / 2)] + [
        DeviceCost.zero() for _ in range(topo.num_devices - 1)
    ]
    return Measurement(
        kind="single",
        inventory_name=inv.name,
        inventory_fingerprint=inv.fingerprint(),
        topology=topo,
        placement={name: 0},
        costs=Costs.from_devices(per),
        backend=FakeOracle.info,
        comm_model=comm,
    )


def test_lower_bound_counts_the_all_to_all_latency_once_per_device() -> None:
    """Hand-set figures: 3 tables of dim 10, batch 1000, 2 devices, alpha 1 ms, beta 1 ms/MB.

    Pooled bytes leaving a device for all tables: 1000 * 36 * 4 * 1/2 = 72 kB; an even share is 36 kB ->
    all-to-all 1 + 0.036 ms per direction. Compute 4 + 4 + 10 = 18 -> 9 ms per device.
    """
    inv = Inventory(
        name="lb",
        tables=tuple(Table(name=n, num_embeddings=10, embedding_dim=12, pooling_factor=1.0) for n in ("a", "b", "c")),
    )
    topo = Topology(num_devices=2, memory_per_device_gb=1.0, batch_size=1000)
    comm = CommModel(alpha_ms=1.0, beta_ms_per_mb=1.0, backend="gloo", world_size=2)
    singles = {n: _single(inv, n, topo, c, comm) for n, c in (("a", 4.0), ("b", 4.0), ("c", 10.0))}
    lb = lower_bound(inv, singles, topo)
    assert lb.compute_ms == pytest.approx(9.0)
    assert lb.comm_ms == pytest.approx(2 * (1.0 + 0.036))
    assert lb.max_single_ms == pytest.approx(10.0 + 2 * (1.0 + 0.024))  # table c alone, its own all-to-all
    assert lb.total_ms == pytest.approx(max(lb.max_single_ms, 9.0 + 2.072))
    # The old reference, sum of singles / D, counted alpha once per table: 3 alphas on 2 devices.
    assert lb.sum_single_ms / 2 > lb.compute_ms + lb.comm_ms
    # One big table dominates: the bound is that table alone.
    singles["c"] = _single(inv, "c", topo, 40.0, comm)
    assert lower_bound(inv, singles, topo).total_ms == pytest.approx(40.0 + 2.048)
    # One device: no all-to-all at all.
    one = topo.model_copy(update={"num_devices": 1})
    singles1 = {n: _single(inv, n, one, c, None) for n, c in (("a", 4.0), ("b", 4.0), ("c", 10.0))}
    assert lower_bound(inv, singles1, one).total_ms == pytest.approx(18.0)


def test_compare_interleaves_and_ranks() -> None:
    oracle = FakeOracle()
    cmp = compare_sharders(_inv(), TOPO, list(HEURISTICS), oracle, rounds=2)
    # every contender measured once per round, interleaved: round 1 covers all before round 2 starts
    assert len(oracle.calls) == 2 * len(HEURISTICS)
    assert sorted(oracle.calls[: len(HEURISTICS)]) == sorted(HEURISTICS)
    best = cmp.result(cmp.best)
    assert best.ratio_to_best == 1.0
    assert all(r.ratio_to_best >= 1.0 for r in cmp.results)
    # lookup_greedy optimises exactly the fake cost, so nothing beats it by more than LPT's 4/3 factor
    assert cmp.result("lookup_greedy").ratio_to_best <= 4 / 3
    # the fake cost is additive, so LB really is a lower bound here
    assert all(r.ratio_to_lower_bound >= 1.0 - 1e-9 for r in cmp.results)
    assert all(r.spread == 0.0 for r in cmp.results)  # noise-free oracle
    md = comparison_markdown(cmp)
    assert "lookup_greedy" in md and "LB" in md and "simulated" in md
    assert set(cmp.baselines()) == set(HEURISTICS)
    json.loads(cmp.model_dump_json())


def test_compare_rejects_unknown_sharder_before_any_work() -> None:
    oracle = FakeOracle()
    with pytest.raises(UnknownSharderError, match="unknown sharder 'bogus'"):
        compare_sharders(_inv(), TOPO, ["dim_greedy", "bogus"], oracle)
    assert oracle.calls == []


def test_evaluate_fills_measured_and_checks_fingerprint() -> None:
    inv = _inv()
    plan = get_sharder("lookup_greedy").shard(inv, TOPO)
    measured = evaluate_plan(inv, plan, FakeOracle())
    assert measured.measured is not None
    assert measured.measured.overall_ms == max(d.total for d in measured.measured.per_device)
    table = device_table_markdown(measured)
    rows = [line for line in table.splitlines() if line[:4] in {"| 0 ", "| 1 ", "| 2 "}]
    assert len(rows) == TOPO.num_devices
    assert sum("**" in r for r in rows) == 1  # exactly one bottleneck device marked
    other = Inventory(name="inv", tables=inv.tables[:-1])
    with pytest.raises(PlanError, match="different fingerprint"):
        evaluate_plan(other, plan, FakeOracle())


def test_plot_writes_png(tmp_path) -> None:
    cmp = compare_sharders(_inv(), TOPO, ["round_robin", "lookup_greedy"], FakeOracle(), rounds=1)
    out = plot_comparison(cmp, tmp_path / "cmp.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_best_baseline_is_written_and_old_comparisons_still_load(tmp_path) -> None:
    cmp = compare_sharders(_inv(), TOPO, ["round_robin", "lookup_greedy"], FakeOracle(), rounds=1)
    assert cmp.best_baseline == min(cmp.baselines(), key=cmp.baselines().__getitem__)
    data = json.loads(cmp.model_dump_json())
    assert data["best_baseline"] == cmp.best_baseline and "best_heuristic" not in data
    assert cmp.summary()["best_baseline"] == cmp.best_baseline
    assert f"Best baseline: `{cmp.best_baseline}`" in comparison_markdown(cmp)
    # a comparison file written before the rename (field best_heuristic) reads the same
    old = {k: v for k, v in data.items() if k != "best_baseline"} | {"best_heuristic": cmp.best_baseline}
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    assert load_comparison(path) == cmp
    path.write_text(json.dumps(old | {"best_baseline": cmp.best_baseline}))
    with pytest.raises(InputFileError, match="best_heuristic"):
        load_comparison(path)
