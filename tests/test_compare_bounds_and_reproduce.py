"""Small defects of `plans reproduce`, `compare`, infeasible plans, the lower bound and `pipeline init`, each with the
behaviour it must have.

- a failed `plans reproduce --into DIR` removes only what it created (a user's empty DIR stays).
- `compare -p X -p X` (same file, same content, same plan) is refused up front in one line.
- an infeasible `plan -s dreamshard` names the sharder asked for, not a candidate it tried.
- the LB of a comparison is a true lower bound under the simulator: no plan costs less.
- `pipeline init PATH` where PATH (or a parent) is a file: one line, nothing created.
"""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from dreamshard.cli.app import invoke
from dreamshard.config.settings import installed_pipeline_file
from dreamshard.documents import save_inventory, save_plan
from dreamshard.errors import InfeasiblePlacementError, PlanError
from dreamshard.evaluation import compare_sharders, evaluate_plan
from dreamshard.evaluation.bounds import smallest_share
from dreamshard.evaluation.compare import measure_lower_bound
from dreamshard.gate import evaluate_gate
from dreamshard.inventory.synth import synth_inventory
from dreamshard.placement.expand import even_bounds, expand
from dreamshard.profiling import make_oracle
from dreamshard.sharders import HEURISTICS, get_sharder
from dreamshard.store import open_store, publish
from dreamshard.values import ColumnShard, Inventory, Table, Topology
from dreamshard.values.lineage import Lineage

TOPO = Topology(num_devices=2, memory_per_device_gb=1.0, batch_size=512)


def one_line_2(r: tuple[int, str, str]) -> str:
    lines = r[2].strip().splitlines()
    assert r[0] == 2 and len(lines) == 1 and "Traceback" not in r[1] + r[2], r
    return lines[0]


def snap(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


# -- plans reproduce --into --------------------------------------------------------------------------------------------
def stored_with_lineage(tmp_path: Path) -> tuple[str, str]:
    """A published plan whose lineage passes every check but whose DVC remote is empty: reproducing it fails
    after the workspace was started (git, DVC, dvc.lock written). Returns (store, plan id)."""
    inv = synth_inventory(6, 0, name="inv")
    plan = get_sharder("lookup_greedy").shard(inv, TOPO).model_copy(update={"sharder": "dreamshard"})
    plan = evaluate_plan(inv, plan, make_oracle("simulator"))
    (tmp_path / "remote").mkdir()
    lineage = Lineage(
        inventory_fingerprint=inv.fingerprint(),
        dvc_lock="schema: '2.0'\n",
        params="{}\n",
        dvc_remote=str(tmp_path / "remote"),
        dvc_yaml=installed_pipeline_file("dvc.yaml").read_text(),
        model_md5="a" * 32 + ".dir",
        measurements_md5="b" * 32,
    )
    plan = plan.model_copy(update={"lineage": lineage})
    cost = plan.best_costs.overall_ms if plan.best_costs else 1.0
    decision = evaluate_gate(plan, {"size_greedy": cost * 2}, 0.0)
    store = tmp_path / "store"
    publish(open_store(str(store)), plan, decision)
    return str(store), plan.plan_id


def test_failed_reproduce_keeps_the_users_empty_into_directory(tmp_path: Path) -> None:
    store, plan_id = stored_with_lineage(tmp_path)
    into = tmp_path / "mine"
    into.mkdir()
    line = one_line_2(invoke(["plans", "reproduce", plan_id, "--store", store, "--into", str(into)]))
    assert "dvc pull" in line or "md5" in line  # the remote holds nothing: it failed after starting the workspace
    assert into.is_dir() and not any(into.iterdir())  # the user's directory stays, and stays empty
    # a directory the command creates (with its parents) is removed again
    fresh = tmp_path / "new" / "deeper"
    one_line_2(invoke(["plans", "reproduce", plan_id, "--store", store, "--into", str(fresh)]))
    assert not (tmp_path / "new").exists()


def test_reproduce_into_a_file_is_one_line_and_touches_nothing(tmp_path: Path) -> None:
    store, plan_id = stored_with_lineage(tmp_path)
    f = tmp_path / "file.txt"
    f.write_text("keep me\n")
    for into in (f, f / "sub"):
        line = one_line_2(invoke(["plans", "reproduce", plan_id, "--store", store, "--into", str(into)]))
        assert "is a file" in line
    assert f.read_text() == "keep me\n"


# -- compare: a plan given twice ---------------------------------------------------------------------------------------
@pytest.fixture
def compare_files(tmp_path: Path) -> dict[str, Path]:
    inv = synth_inventory(8, 0, name="inv")
    plan = get_sharder("lookup_greedy").shard(inv, TOPO).model_copy(update={"sharder": "dreamshard"})
    files = {"inv": save_inventory(inv, tmp_path / "inv.yaml"), "plan": save_plan(plan, tmp_path / "plan.json")}
    files["copy"] = tmp_path / "copy.json"
    files["copy"].write_bytes(files["plan"].read_bytes())
    os.link(files["plan"], tmp_path / "hard.json")
    files["hard"] = tmp_path / "hard.json"
    edited = json.loads(files["plan"].read_text())
    edited["sharder"] = "size_greedy"  # another label, the same plan id
    files["same_id"] = tmp_path / "same_id.json"
    files["same_id"].write_text(json.dumps(edited))
    return files


def _compare_two(compare_files: dict[str, Path], second: Path) -> list[str]:
    """`compare` on the simulator with round_robin, the fixture's plan and `second` as `--plan`s."""
    common = ["compare", "-i", str(compare_files["inv"]), "-d", "2", "-m", "1", "--batch-size", "512"]
    sim = ["--backend", "simulator", "--rounds", "2", "--sharders", "round_robin"]
    return [*common, *sim, "-p", str(compare_files["plan"]), "-p", str(second)]


@pytest.mark.parametrize(
    "second, needle",
    [
        ("plan", "is the same file as"),
        ("hard", "is the same file as"),
        ("copy", "has the same content as"),
        ("same_id", "both hold plan"),
    ],
)
def test_compare_refuses_a_plan_given_twice(
    compare_files: dict[str, Path], tmp_path: Path, second: str, needle: str
) -> None:
    out = tmp_path / "cmp.json"
    before = snap(tmp_path)
    r = invoke([*_compare_two(compare_files, compare_files[second]), "--out", str(out)])
    line = one_line_2(r)
    assert "ConfigError" in line and needle in line and "--plan #2" in line and "--plan #1" in line
    assert snap(tmp_path) == before


def test_compare_sharders_refuses_the_same_plan_twice() -> None:
    inv = synth_inventory(8, 0, name="inv")
    plan = get_sharder("lookup_greedy").shard(inv, TOPO)
    with pytest.raises(PlanError, match="given twice"):
        compare_sharders(inv, TOPO, ["round_robin"], make_oracle("simulator"), rounds=1, extra_plans=[plan, plan])


def test_compare_of_distinct_plans_still_works(compare_files: dict[str, Path], tmp_path: Path) -> None:
    inv = synth_inventory(8, 0, name="inv")
    other = save_plan(get_sharder("size_greedy").shard(inv, TOPO), tmp_path / "other.json")
    r = invoke([*_compare_two(compare_files, other), "--json"])
    assert r[0] == 0, r[2]


# -- an infeasible plan names the sharder asked for --------------------------------------------------------------------
@pytest.mark.parametrize("sharder", ["dreamshard", "dreamshard_lpt", "dreamshard_rl"])
def test_infeasible_learned_plan_names_the_sharder_asked_for(sharder: str, tmp_path: Path) -> None:
    # 0.30 GB of tables on 2 x 0.14 GB: no cut packs them (with 0.15 GB a row-sharded table now does)
    inv = save_inventory(synth_inventory(6, 0, name="tiny"), tmp_path / "inv.yaml")
    out = tmp_path / "p.json"
    line = one_line_2(invoke(["plan", "-i", str(inv), "-d", "2", "-m", "0.14", "-s", sharder, "-o", str(out)]))
    assert "InfeasiblePlacementError" in line and f"(sharder {sharder})" in line, line
    assert "round_robin" not in line and "sharder lpt" not in line
    assert not out.exists()


def test_a_hint_that_is_not_a_sharder_name_is_kept() -> None:
    from dreamshard.search.sharders import LearnedGreedySharder

    tiny = Topology(num_devices=2, memory_per_device_gb=1e-5, batch_size=512)
    with pytest.raises(InfeasiblePlacementError, match=r"\(sharder dreamshard_lpt: larger than one device") as e:
        LearnedGreedySharder().shard(synth_inventory(6, 0, name="tiny"), tiny)
    assert e.value.hint.startswith("sharder dreamshard_lpt")


# -- the lower bound ---------------------------------------------------------------------------------------------------
def _table_wise_costs(inv: Inventory, topo: Topology, oracle: object) -> list[float]:
    names = [t.name for t in inv.tables]
    return [
        oracle.measure(inv, dict(zip(names, devs, strict=True)), topo).overall_ms  # type: ignore[attr-defined]
        for devs in itertools.product(range(topo.num_devices), repeat=len(names))
    ]


def _split_costs(inv: Inventory, topo: Topology, oracle: object) -> list[float]:
    """Every table in turn split evenly over all devices, the others round robin."""
    out = []
    for t in inv.tables:
        try:
            bounds = even_bounds(t.embedding_dim, topo.num_devices)
        except PlanError:
            continue
        shards = {t.name: [ColumnShard(start=a, end=b, device=d) for d, (a, b) in enumerate(bounds)]}
        rest = {x.name: i % topo.num_devices for i, x in enumerate(inv.tables) if x.name != t.name}
        units, placement = expand(inv, rest, shards)
        out.append(oracle.measure(units, placement, topo).overall_ms)  # type: ignore[attr-defined]
    return out


tables = st.builds(
    lambda i, rows, dim4, pooling: Table(
        name=f"t{i}", num_embeddings=rows, embedding_dim=4 * dim4, pooling_factor=pooling
    ),
    st.integers(0, 10**6),
    st.integers(1, 5_000_000),
    st.integers(1, 64),
    st.floats(0.0, 200.0),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(tables, min_size=1, max_size=5, unique_by=lambda t: t.name),
    st.integers(1, 3),
    st.sampled_from([128, 1024, 8192]),
)
def test_lower_bound_is_below_every_placement(tabs: list[Table], devices: int, batch: int) -> None:
    """Exhaustively: every table-wise placement of a small random inventory, and column-split ones, cost at
    least the LB under the simulator (the launch overhead is paid once per device, not once per table)."""
    inv = Inventory(name="r", tables=tuple(tabs))
    topo = Topology(num_devices=devices, memory_per_device_gb=1000.0, batch_size=batch)
    oracle = make_oracle("simulator")
    lb = measure_lower_bound(inv, topo, oracle).total_ms
    costs = _table_wise_costs(inv, topo, oracle) + _split_costs(inv, topo, oracle)
    assert lb <= min(costs) * (1 + 1e-9), (lb, min(costs))
    assert lb > 0


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(2, 40), st.integers(0, 10_000), st.sampled_from([2, 4, 8]))
@example(2, 548, 2)  # TorchRec's planner replicated both tables: no all-to-all, below the table-wise-only bound
def test_lower_bound_is_below_every_heuristic_plan(n: int, seed: int, devices: int) -> None:
    inv = synth_inventory(n, seed, name="x")
    topo = Topology(num_devices=devices, memory_per_device_gb=1000.0, batch_size=512)
    cmp = compare_sharders(inv, topo, [*HEURISTICS, "torchrec"], make_oracle("simulator"), rounds=1)
    assert all(r.ratio_to_lower_bound >= 1.0 - 1e-9 for r in cmp.results), [
        (r.sharder, r.ratio_to_lower_bound) for r in cmp.results
    ]


def test_smallest_share_is_what_some_device_must_hold() -> None:
    t = Table(name="t", num_embeddings=10, embedding_dim=36, pooling_factor=1.0)
    assert smallest_share(t, 1) is t
    assert smallest_share(t, 4).embedding_dim == 12  # 36 / 4 = 9 columns, rounded up to a multiple of 4
    assert smallest_share(t, 100).embedding_dim == 4
    odd = Table(name="o", num_embeddings=10, embedding_dim=4, pooling_factor=1.0)
    assert smallest_share(odd, 8) is odd


def test_the_report_says_the_simulator_bound_is_exact() -> None:
    from dreamshard.evaluation.render import reference_line

    cmp = compare_sharders(synth_inventory(8, 0, name="x"), TOPO, ["round_robin"], make_oracle("simulator"), rounds=1)
    assert "no plan costs less" in reference_line(cmp)


# -- pipeline init on a file -------------------------------------------------------------------------------------------
def test_pipeline_init_on_a_file_is_one_line_and_creates_nothing(tmp_path: Path) -> None:
    f = tmp_path / "existing.txt"
    f.write_text("mine\n")
    for target in (f, f / "ws"):
        before = snap(tmp_path)
        line = one_line_2(invoke(["pipeline", "init", str(target)]))
        assert "PipelineError" in line and "is a file" in line
        assert snap(tmp_path) == before


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(1, 12),
    st.integers(0, 10_000),
    st.sampled_from([(2, None), (4, None), (4, 2), (8, 4)]),
    st.sampled_from(["data_parallel", "row_wise", "mixed"]),
)
def test_lower_bound_is_below_plans_of_every_sharding_type(
    n: int, seed: int, shape: tuple[int, int | None], kind: str
) -> None:
    """Replicas skip the all-to-all and row shards split a table's lookups D ways: the bound holds over the
    whole plan space, flat and on hosts (the simulator: its bound is exact)."""
    from dreamshard.sharders.base import make_plan
    from dreamshard.values.units import row_shards_for

    devices, per_host = shape
    inv = synth_inventory(n, seed, name="x")
    topo = Topology(num_devices=devices, memory_per_device_gb=1000.0, batch_size=512, devices_per_host=per_host)
    names = [t.name for t in inv.tables]
    rows = {t.name: t.num_embeddings for t in inv.tables}
    dp = names if kind == "data_parallel" else names[::2] if kind == "mixed" else []
    rw = [t for t in names if t not in dp] if kind != "data_parallel" else []
    plan = make_plan(
        inv,
        topo,
        {},
        "hand",
        row_shards={t: row_shards_for(rows[t], list(range(devices))) for t in rw},
        data_parallel=dp,
    )
    oracle = make_oracle("simulator")
    lb = measure_lower_bound(inv, topo, oracle).total_ms
    cost = evaluate_plan(inv, plan, oracle).measured.overall_ms
    assert lb <= cost * (1 + 1e-9), (kind, lb, cost)
