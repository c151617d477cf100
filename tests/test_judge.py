"""The judge under bench/ (docs/benchmarks/judge.md): its byte accounting, an end-to-end run on tiny plans, its
interleaving, and its independence: the library never imports it, and it imports none of the planner's measuring
code."""

from __future__ import annotations

import ast
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from dreamshard.values import Costs, DeviceCost, Feature, Inventory, Plan, RowShard, Table, Topology

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
sys.path.insert(0, str(BENCH))

import judge  # noqa: E402
import judge_bytes  # noqa: E402
import judge_indices  # noqa: E402
from judge_results import PlanJudgement, PlanRound, prediction_error  # noqa: E402

#: The library's measuring code: the judge must not use it.
PLANNER_MODULES = ("dreamshard.profiling", "dreamshard.learning", "dreamshard.evaluation", "dreamshard.measured")


def _inventory() -> Inventory:
    return Inventory(
        name="judge-tiny",
        tables=(
            Table(name="a", num_embeddings=1000, embedding_dim=16, pooling_factor=2.0),
            Table(
                name="s",
                num_embeddings=300,
                embedding_dim=8,
                features=(Feature(name="s1", pooling_factor=1.0), Feature(name="s2", pooling_factor=2.0)),
            ),
            Table(name="q", num_embeddings=2000, embedding_dim=8, pooling_factor=3.0, pooled=False),
            Table(
                name="b",
                num_embeddings=5000,
                embedding_dim=32,
                pooling_factor=4.5,
                access_histogram=(0.5, 0.2, 0.1, 0.1, 0.05, 0.05) + (0.0,) * 11,
            ),
        ),
    )


def _sharded_inventory() -> Inventory:
    extra = (
        Table(name="r", num_embeddings=1000, embedding_dim=16, pooling_factor=2.0),
        Table(name="qs", num_embeddings=100, embedding_dim=4, pooling_factor=4.0, pooled=False),
        Table(name="dp", num_embeddings=100, embedding_dim=8, pooling_factor=1.0),
    )
    return Inventory(name="judge-sharded", tables=(*_inventory().tables, *extra))


def _plan(inv: Inventory, plan_id: str, placement: dict[str, int], **fields: object) -> Plan:
    topo = Topology(num_devices=2, memory_per_device_gb=1.0, batch_size=64)
    return Plan(
        plan_id=plan_id,
        inventory_name=inv.name,
        inventory_fingerprint=inv.fingerprint(),
        topology=topo,
        sharder=plan_id,
        placement=placement,
        memory_per_device_gb=(0.0, 0.0),
        **fields,
    )


def _sharded_plan() -> Plan:
    rows = {
        "r": (RowShard(start=0, end=500, device=0), RowShard(start=500, end=1000, device=1)),
        "qs": (RowShard(start=0, end=50, device=0), RowShard(start=50, end=100, device=1)),
    }
    placement = {"a": 0, "s": 0, "q": 0, "b": 1}
    return _plan(_sharded_inventory(), "sharded", placement, row_shards=rows, data_parallel=("dp",))


# ----------------------------------------------------------------------------------------- byte accounting


def test_bytes_by_hand() -> None:
    """Batch 64 on 2 devices, (N-1)/N = 1/2, 4 bytes an element. Device 0 sends in its all-to-all a (16 per sample),
    s (dim 8 x 2 features = 16), q (sequence: dim 8 x 3 lookups = 24) and its qs row shard (4 x 2 lookups = 8):
    64 x 64 x 4 / 2 = 8192; device 1 b (32) and its qs shard (8): 64 x 40 x 2 = 5120. The row-sharded pooled r
    (dim 16, 2 devices): 64 x 16 x 4 / 2 = 2048 each; the replicated dp (100 x 8): 100 x 8 x 4 x 2 x 1/2 = 3200."""
    got = judge_bytes.plan_bytes(_sharded_inventory(), _sharded_plan())
    assert got == [
        judge_bytes.DeviceBytes(all_to_all=8192.0, reduce_scatter=2048.0, all_reduce=3200.0),
        judge_bytes.DeviceBytes(all_to_all=5120.0, reduce_scatter=2048.0, all_reduce=3200.0),
    ]
    assert got[0].forward == 8192 + 2048 and got[0].backward == 8192 + 2048 + 3200


def test_bytes_formulas_and_one_device() -> None:
    assert judge_bytes.all_to_all_bytes(2048, [64, 32], 8) == 2048 * 96 * 4 * 7 / 8
    assert judge_bytes.reduce_scatter_bytes(2048, 64, 4) == 2048 * 64 * 4 * 3 / 4
    assert judge_bytes.all_reduce_bytes(1000, 16, 4) == 1000 * 16 * 4 * 2 * 3 / 4
    assert judge_bytes.all_to_all_bytes(2048, [64], 1) == 0.0
    assert judge_bytes.all_reduce_bytes(1000, 16, 1) == 0.0


def test_bytes_agree_with_the_planners_accounting() -> None:
    """A cross-check only: the judge computes its bytes itself, the test compares with dreamshard.profiling.comm."""
    from dreamshard.profiling import comm

    inv, plan = _sharded_inventory(), _sharded_plan()
    for units, got in zip(judge_bytes.device_units(inv, plan), judge_bytes.plan_bytes(inv, plan), strict=True):
        kinds = [judge_bytes.parse_unit(t.name).kind for t in units]
        a2a = [
            t.output_elements_per_sample
            for t, k in zip(units, kinds, strict=True)
            if k in ("table", "column") or not t.pooled
        ]
        rows = [t.output_dim for t, k in zip(units, kinds, strict=True) if k == "row" and t.pooled]
        reps = [(t.num_embeddings, t.embedding_dim) for t, k in zip(units, kinds, strict=True) if k == "replica"]
        assert got.all_to_all == pytest.approx(comm.device_comm_bytes(64, a2a, 2))
        assert got.reduce_scatter == pytest.approx(comm.reduce_scatter_bytes(64, rows, 2))
        assert got.all_reduce == pytest.approx(comm.all_reduce_bytes(reps, 2))


# ----------------------------------------------------------------------------------------- lookups and operators


def test_rows_are_capped_and_ids_stay_inside() -> None:
    huge = {"name": "h", "num_embeddings": 10**9, "embedding_dim": 64, "pooling_factor": 2.0}
    small = {"name": "s", "num_embeddings": 10, "embedding_dim": 4, "pooling_factor": 1.5}
    rows = judge_indices.kept_rows([huge, small])
    assert rows == [judge_indices.TABLE_CAP_BYTES // (64 * 4), 10]
    idx, off = judge_indices.batch_inputs([huge, small], rows, 32, np.random.default_rng(0))
    assert len(off) == 2 * 32 + 1 and off[-1] == len(idx)
    assert idx[: off[32]].max() < rows[0] and idx[off[32] :].max() < 10
    assert all(np.diff(off[32:]) >= 1) and all(np.diff(off[32:]) <= 2)  # floor(1.5) or one more


def test_a_table_looks_up_the_same_ids_in_every_plan_of_a_round() -> None:
    """Common random numbers: with one generator per table (`table_rng`), a table's ids in a round do not depend on
    which tables share its device nor on their order; another round draws others."""
    a = {"name": "a", "num_embeddings": 5000, "embedding_dim": 8, "pooling_factor": 3.0}
    b = {"name": "b", "num_embeddings": 7000, "embedding_dim": 8, "pooling_factor": 2.0}

    def ids_of_b(tables: list[dict[str, object]], seed: int) -> np.ndarray:
        rows = [int(t["num_embeddings"]) for t in tables]  # type: ignore[call-overload]
        idx, off = judge_indices.batch_inputs(tables, rows, 64, [judge_indices.table_rng(seed, t) for t in tables])
        at = [t["name"] for t in tables].index("b")
        return idx[off[64 * at] : off[64 * (at + 1)]]

    assert np.array_equal(ids_of_b([a, b], seed=7), ids_of_b([b], seed=7))
    assert np.array_equal(ids_of_b([b, a], seed=7), ids_of_b([a, b], seed=7))
    assert not np.array_equal(ids_of_b([b], seed=judge.round_seed(0, 1)), ids_of_b([b], seed=judge.round_seed(0, 2)))


def test_the_pace_fit_recovers_a_linear_collective_and_spans_the_exchanges() -> None:
    """fit_pace: least squares over the sizes timed on the ranks (here a stand-in whose times are 0.4 ms + 2e-6 ms
    per byte, noisy by one repeat), alpha and beta recovered; pace_sizes spans the round's exchanges, log-spaced."""
    import judge_comm

    class Ranks:
        def time_exchange(self, nbytes: float, messages: int, reduce: bool, warmup: int, repeats: int) -> list[float]:
            return [0.4 + 2e-6 * nbytes, 0.4 + 2e-6 * nbytes, 50.0][:repeats]

    sizes = judge_comm.pace_sizes([10_000.0, 2_000_000.0, 300_000.0])
    assert sizes[0] == 10_000.0 and sizes[-1] == pytest.approx(2_000_000.0) and len(sizes) == judge_comm.PACE_POINTS
    alpha, beta = judge_comm.fit_pace(Ranks(), sizes, 3, False, 0, 3)  # type: ignore[arg-type]
    assert alpha == pytest.approx(0.4) and beta == pytest.approx(2e-6)


def test_per_device_medians_take_the_slowest_devices_median_over_rounds() -> None:
    """A round's figure is its slowest device; by per-device medians, one device's bad round does not move it."""
    j = _judged([[[1, 0, 0, 1], [1, 0, 0, 1]], [[4, 0, 0, 4], [1, 0, 0, 1]], [[1, 0, 0, 1], [2, 0, 0, 1]]])
    assert j.device_samples_ms == [[2.0, 8.0, 2.0], [2.0, 2.0, 3.0]]
    assert j.samples_ms == [2.0, 8.0, 3.0] and j.overall_ms == 3.0
    assert j.device_median_ms == 2.0
    assert j.device_min_ms == 2.0  # device 0's fastest round 2, device 1's 2
    k = _judged([[[3, 0, 0, 1], [1, 0, 0, 1]], [[1, 0, 0, 1], [1, 0, 0, 4]]])
    assert k.device_samples_ms == [[4.0, 2.0], [2.0, 5.0]] and k.device_min_ms == 2.0 and k.samples_ms == [4.0, 5.0]


@pytest.mark.parametrize("bin_", [0, 1, 3])
def test_a_histogram_batch_holds_the_distinct_rows_it_describes(bin_: int) -> None:
    """Every distinct row is looked up exactly its bin's count: a histogram of rows read once gives 2048 distinct
    rows in 2048 lookups (drawn with replacement, about 1290 were), rows read twice 1024, rows read 5-8 times U about
    count / 6.5, each inside its bin."""
    hist = [0.0] * 17
    hist[bin_] = 1.0
    ids = judge_indices.histogram_ids(hist, 10**6, 2048, np.random.default_rng(3))
    _, per_row = np.unique(ids, return_counts=True)
    want = round(2048 / judge_indices.BIN_COUNTS[bin_])
    assert len(ids) == 2048 and abs(len(per_row) - want) <= 1
    lo, hi = [(1, 1), (2, 2), (3, 4), (5, 8)][bin_]
    assert np.mean((per_row >= lo) & (per_row <= hi)) >= 0.95  # the total is met inside the bins, nearly all
    counts = judge_indices.exact_total(np.array([5, 1, 3, 1]), 6, np.random.default_rng(0))
    assert counts.sum() == 6 and counts.min() >= 1


def test_device_cap_shrinks_every_table() -> None:
    tables = [{"name": f"t{i}", "num_embeddings": 10**9, "embedding_dim": 4} for i in range(200)]
    rows = judge_indices.kept_rows(tables)
    assert sum(r * 16 for r in rows) <= judge_indices.DEVICE_CAP_BYTES


def test_operators_group_as_the_device_runs_them() -> None:
    from dreamshard.placement.expand import expand_plan

    units, placement = expand_plan(_sharded_inventory(), _sharded_plan())
    mine = [t for t in units.tables if placement[t.name] == 0]
    ops = judge.device_operators(mine, 64, 2)
    shape = sorted((op["batch"], op["pooled"], sorted(t["name"] for t in op["tables"])) for op in ops)
    assert shape == [
        (32, True, ["dp@dp0"]),  # a replica runs the device's share of the batch
        (64, False, ["q"]),  # a sequence operator per width
        (64, False, ["qs@r0:50"]),
        (64, True, ["a", "r@r0:500", "s"]),
    ]


# ----------------------------------------------------------------------------------------- interleaving, errors


def test_rounds_rotate_the_order() -> None:
    assert [judge.rotated([0, 1, 2], r) for r in range(4)] == [[0, 1, 2], [1, 2, 0], [2, 0, 1], [0, 1, 2]]


def _judged(per_round: list[list[list[float]]]) -> PlanJudgement:
    rounds = tuple(
        PlanRound(round=r, position=0, costs=Costs.from_devices([DeviceCost.from_list(d) for d in devices]))
        for r, devices in enumerate(per_round)
    )
    return PlanJudgement(plan_id="p", sharder="x", rounds=rounds)


def test_medians_spread_and_prediction_error() -> None:
    j = _judged([[[1, 1, 1, 1], [1, 0, 0, 1]], [[2, 1, 1, 2], [1, 0, 0, 1]], [[1, 1, 1, 1], [1, 0, 0, 1]]])
    assert j.samples_ms == [4.0, 6.0, 4.0] and j.overall_ms == 4.0 and j.spread == pytest.approx(0.5)
    oracle = Costs.from_devices([DeviceCost.from_list([1.5, 0.5, 0.5, 1.5]), DeviceCost.from_list([1, 0, 0, 1])])
    e = prediction_error(j, oracle)  # the judge's bottleneck: device 0, compute 2, comm 2
    assert (e.device, e.compute, e.comm, e.overall) == (0, 0.5, -0.5, 0.0)


# ----------------------------------------------------------------------------------------- end to end


def test_judge_end_to_end(tmp_path: Path) -> None:
    """Two tiny plans, 2 rounds: finite positive figures, one per device, rounds interleaved; and the CLI."""
    from dreamshard.documents import save_inventory, save_plan

    inv = _inventory()
    plans = [_plan(inv, "p1", {"a": 0, "s": 1, "q": 0, "b": 1}), _plan(inv, "p2", {"a": 0, "s": 0, "q": 1, "b": 1})]
    result = judge.judge_plans(inv, plans, rounds=2, warmup=1, repeats=3, comm_repeats=3, paced=True)
    assert result.settings.comm.startswith("paced")
    assert [p.plan_id for p in result.plans] == ["p1", "p2"]
    assert result.order == (("p1", "p2"), ("p2", "p1"))
    for p in result.plans:
        assert len(p.rounds) == 2 and [r.position for r in p.rounds] != [0, 0]
        for r in p.rounds:
            assert len(r.costs.per_device) == 2
            for d in r.costs.per_device:
                assert all(math.isfinite(x) and x > 0 for x in d.as_list())
        assert 0 < p.overall_ms < 1e4 and math.isfinite(p.spread)
    save_inventory(inv, tmp_path / "inv.yaml")
    withcost = plans[0].model_copy(update={"predicted": result.plans[0].costs})
    save_plan(withcost, tmp_path / "p1.json")
    judge.main([str(tmp_path / "inv.yaml"), str(tmp_path / "p1.json"), "--rounds", "1", "--repeats", "2",
                "--comm-repeats", "2", "--out", str(tmp_path / "r.json")])  # fmt: skip
    saved = json.loads((tmp_path / "r.json").read_text())
    assert saved["plans"][0]["plan_id"] == "p1" and len(saved["plans"][0]["rounds"]) == 1


# ----------------------------------------------------------------------------------------- independence


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports (absolute names; `from . import x` as '.x')."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)
    return out


def imports_of_the_judge(root: Path) -> list[str]:
    """'file: module' for each import of `bench` or a judge module by a .py file under `root`."""
    bad = []
    for path in sorted(root.rglob("*.py")):
        for mod in sorted(imported_modules(path)):
            top = mod.lstrip(".").split(".")[0]
            if top == "bench" or top.startswith("judge"):
                bad.append(f"{path.relative_to(root.parent)}: {mod}")
    return bad


def test_the_library_never_imports_the_judge() -> None:
    assert imports_of_the_judge(ROOT / "dreamshard") == []


def test_the_import_check_catches_a_planted_import(tmp_path: Path) -> None:
    pkg = tmp_path / "dreamshard"
    pkg.mkdir()
    (pkg / "ok.py").write_text("import json\n")
    (pkg / "bad.py").write_text("def f():\n    from judge_bytes import plan_bytes\n    import bench.heldout\n")
    assert imports_of_the_judge(pkg) == ["dreamshard/bad.py: bench.heldout", "dreamshard/bad.py: judge_bytes",
                                         "dreamshard/bad.py: judge_bytes.plan_bytes"]  # fmt: skip


def test_the_judge_uses_none_of_the_planners_measuring_code() -> None:
    files = sorted(BENCH.glob("judge*.py"))
    assert len(files) >= 5
    for path in files:
        for mod in imported_modules(path):
            assert not mod.startswith(PLANNER_MODULES), f"{path.name} imports {mod}"
            if mod.startswith("dreamshard"):
                assert mod.split(".")[1] in ("values", "documents", "placement"), f"{path.name} imports {mod}"
