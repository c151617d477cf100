"""Planning on the learned cost: search over candidates, --verify, out-of-range warnings, memory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from toy_cost import toy_model

from dreamshard.cli.app import invoke
from dreamshard.config.learning import SearchConfig
from dreamshard.documents import load_plan, save_inventory
from dreamshard.inventory.synth import synth_inventory
from dreamshard.learning.model_store import PACKAGED_DIR, load_model
from dreamshard.learning.planning_cost import PlanningCost
from dreamshard.placement.validate import check_placement
from dreamshard.profiling import make_oracle
from dreamshard.search.candidates import search
from dreamshard.sharders import get_sharder
from dreamshard.values import Table, TableConstraints, Topology

CHEAP = ("policy", "lpt", "dim_greedy", "lookup_greedy", "size_lookup_greedy", "size_greedy", "round_robin")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("model")
    toy_model(d)
    return d


def _score(cost: PlanningCost, tables: list[Table], placement: dict[str, int]) -> float:
    with torch.no_grad():
        return float(cost.overall(cost.placement_states(tables, placement)))


def test_search_is_never_worse_than_any_candidate(model_dir):
    model = load_model(model_dir)
    inv = synth_inventory(40, seed=21, name="unseen")
    for d in (2, 4, 7):
        topo = Topology(num_devices=d, memory_per_device_gb=16)
        cost = PlanningCost(model.cost_net, topo, risk=1.0)
        res = search(inv, topo, cost, model.policy, SearchConfig(candidates=CHEAP, samples=3))
        assert res.best.predicted_ms == min(c.predicted_ms for c in res.candidates)
        assert abs(res.best.predicted_ms - _score(cost, list(inv.tables), res.best.placement)) < 1e-4
        for name in ("dim_greedy", "lookup_greedy", "round_robin"):  # every source's own plan, scored alike
            plan = get_sharder(name).place(inv, topo)
            assert res.best.predicted_ms <= _score(cost, list(inv.tables), plan) + 1e-6
        assert {c.source for c in res.candidates} >= {"policy", "lpt", "dim_greedy"}
        check_placement(inv, res.best.placement, topo)


def test_search_respects_tight_memory_and_skips_sources_that_cannot_place(model_dir):
    model = load_model(model_dir)
    inv = synth_inventory(30, seed=22, name="tight")
    total = sum(t.size_gb for t in inv.tables)
    topo = Topology(
        num_devices=3, memory_per_device_gb=max(total / 3 * 1.08, max(t.size_gb for t in inv.tables) * 1.01)
    )
    res = search(inv, topo, PlanningCost(model.cost_net, topo), model.policy, SearchConfig(candidates=CHEAP))
    for c in res.candidates:
        check_placement(inv, c.placement, topo)
    assert res.candidates  # at least one source placed it; the others are listed as failed with the reason
    assert all(isinstance(v, str) and v for v in res.failed.values())


def test_an_optional_planner_not_installed_is_a_failed_candidate(model_dir, monkeypatch):
    """A machine without torchrec (the GPU box) still plans: TorchRec's planner is listed as failed."""
    from dreamshard.errors import UnknownSharderError
    from dreamshard.sharders.torchrec_sharder import TorchRecTwCwSharder

    def missing(*_a, **_k):
        raise UnknownSharderError("torchrec sharder needs torchrec (No module named 'torchrec')")

    monkeypatch.setattr(TorchRecTwCwSharder, "shard", missing)
    model = load_model(model_dir)
    inv = synth_inventory(8, seed=3, name="no-torchrec")
    topo = Topology(num_devices=2, memory_per_device_gb=16)
    res = search(
        inv, topo, PlanningCost(model.cost_net, topo), model.policy, SearchConfig(candidates=("lpt", "torchrec"))
    )
    assert "torchrec" in res.failed and "No module named" in res.failed["torchrec"]
    assert [c.source for c in res.candidates if c.source.startswith("lpt")]


def test_verify_races_the_best_candidates_and_every_baseline_and_keeps_the_best_measured(model_dir):
    from dreamshard.measured.contenders import baseline_names

    inv = synth_inventory(24, seed=23, name="verify")
    topo = Topology(num_devices=4, memory_per_device_gb=16)
    oracle = make_oracle("simulator", warmup=0, repeats=1)
    sharder = get_sharder(
        "dreamshard",
        model_dir=model_dir,
        verify=3,
        verify_rounds=2,
        oracle=oracle,
        search=SearchConfig(candidates=CHEAP),
    )
    report = sharder.shard_with_report(inv, topo)
    plan = report.plan
    v = plan.verification
    assert v is not None and v.rounds in (2, 3) and report.search is not None
    # the search-only plan first, then the 3 best predicted (each distinct plan once), then every baseline's own plan:
    # measured, or listed with why (here: each the same plan as a contender already in)
    learned = [c.source for c in v.candidates if c.role not in ("heuristic", "torchrec")]
    assert learned[0] == v.search_only == report.search.candidates[0].source and v.candidates[0].role == "search only"
    assert set(learned) <= {c.source for c in report.search.candidates[:3]}
    raced = {c.label for c in v.candidates} | set(v.not_measured)
    assert all(any(label.endswith(f":{name}") for label in raced) for name in baseline_names())
    assert not hasattr(sharder, "last_search")  # what a call did is in its report, never on the sharder
    # never slower than a baseline it measured: the kept plan's paired ratio to the fastest one is at most 1
    assert v.best_baseline is not None and v.kept_vs_baseline is not None and v.kept_vs_baseline <= 1.0
    kept = next(c for c in v.candidates if c.kept)
    assert v.chosen == kept.source
    assert plan.measured is not None and plan.measured_by is not None and plan.measured_by.is_simulated
    assert plan.measured.overall_ms == pytest.approx(kept.measured_ms)
    assert plan.cost_basis == "simulated" and plan.sharder == "dreamshard"
    check_placement(inv, plan.placement, topo)


def test_out_of_range_inventory_warns_and_is_recorded(model_dir, tmp_path):
    wide = synth_inventory(12, seed=24, name="wide", dims=(1024,))  # the toy model saw dims 16..128
    inv = save_inventory(wide, tmp_path / "wide.yaml")
    code, out, err = invoke(
        [
            "plan",
            "-i",
            str(inv),
            "-d",
            "4",
            "-m",
            "64",
            "-s",
            "dreamshard",
            "--model",
            str(model_dir),
            "-o",
            str(tmp_path / "p.json"),
        ]
    )
    assert code == 0, err
    plan = load_plan(tmp_path / "p.json")
    assert any("embedding_dim" in x and "1024" in x for x in plan.out_of_range)
    assert "warning: outside the model's training ranges" in err and "embedding_dim" in err
    # in range: nothing recorded
    same = synth_inventory(12, seed=4, name="same")  # the toy model's own table generator and seed
    inv2 = save_inventory(same, tmp_path / "same.yaml")
    code, _, err = invoke(
        ["plan", "-i", str(inv2), "-d", "4", "-m", "64", "--model", str(model_dir), "-o", str(tmp_path / "q.json")]
    )
    assert code == 0 and load_plan(tmp_path / "q.json").out_of_range == () and "training ranges" not in err


def test_cli_plan_for_cuda_with_the_cpu_trained_model_warns_about_the_device_and_the_batch(tmp_path):
    """The packaged model learned from cpu measurements at batch sizes 519..16128: `plan --device-type cuda` and a
    batch size outside that span warn, and the plan records both; inside it nothing is said."""
    inv = save_inventory(synth_inventory(12, seed=26, name="gpu"), tmp_path / "inv.yaml")
    base = ["plan", "-i", str(inv), "-d", "4", "-m", "16", "-s", "dreamshard_lpt", "--model", str(PACKAGED_DIR)]
    code, _, err = invoke([*base, "--device-type", "cuda", "--batch-size", "65536", "-o", str(tmp_path / "g.json")])
    assert code == 0, err
    device = "device_type cuda: the model learned from cpu measurements"
    batch = "batch size 65536, outside the trained range 519..16128"
    assert set(load_plan(tmp_path / "g.json").out_of_range) >= {device, batch}
    assert f"warning: outside the model's training ranges: {device}" in err and batch in err
    code, _, err = invoke([*base, "--device-type", "cpu", "--batch-size", "8192", "-o", str(tmp_path / "c.json")])
    assert code == 0 and "device_type" not in err and "batch size" not in err
    assert not any(x.startswith(("device_type", "batch size")) for x in load_plan(tmp_path / "c.json").out_of_range)


def test_shard_with_report_carries_the_search_the_card_and_the_warnings(model_dir):
    inv = synth_inventory(20, seed=3, name="report")
    topo = Topology(num_devices=8, memory_per_device_gb=16)  # more devices than the toy model saw: out of range
    sharder = get_sharder(
        "dreamshard", model_dir=model_dir, search=SearchConfig(candidates=CHEAP), column_splits="never"
    )
    report = sharder.shard_with_report(inv, topo)
    assert report.search is not None and report.plan.placement == report.search.best.placement
    assert report.plan.placement == sharder.shard(inv, topo).placement  # shard() is the report's plan
    assert report.card.version == report.plan.model_version and report.learned_from_simulation
    assert report.out_of_range == report.plan.out_of_range and report.out_of_range
    assert (
        report.warnings[-1]
        == f"predicted costs are SIMULATED: model {report.card.version} learned from the toy backend"
    )
    assert all(w.startswith("outside the model's training ranges: ") for w in report.warnings[:-1])
    assert len(report.warnings) == len(report.out_of_range) + 1
    lpt = get_sharder("dreamshard_lpt", model_dir=model_dir).shard_with_report(inv, topo)
    assert lpt.search is None and lpt.plan.sharder == "dreamshard_lpt"


def test_cli_verify_records_and_refuses_other_sharders(model_dir, tmp_path):
    inv = save_inventory(synth_inventory(16, seed=25, name="cli"), tmp_path / "inv.yaml")
    out = tmp_path / "v.json"
    code, stdout, err = invoke(
        [
            "plan",
            "-i",
            str(inv),
            "-d",
            "2",
            "-m",
            "16",
            "--model",
            str(model_dir),
            "--verify",
            "2",
            "--verify-rounds",
            "1",
            "--backend",
            "simulator",
            "--explain",
            "-o",
            str(out),
        ]
    )
    assert code == 0, err
    data = json.loads(out.read_text())
    # the search-only plan and the 2 best predicted (each distinct plan once), and every baseline's own plan
    rows = data["verification"]["candidates"]
    assert [r["role"] for r in rows].count("search only") == 1 and data["measured"] is not None
    assert {"heuristic", "torchrec"} <= {r["role"] for r in rows} | {
        k.split(":")[0] for k in data["verification"]["not_measured"]
    }
    assert "candidates under the learned cost" in stdout and "raced on simulator" in stdout
    code, _, err = invoke(
        [
            "plan",
            "-i",
            str(inv),
            "-d",
            "2",
            "-m",
            "16",
            "-s",
            "dim_greedy",
            "--verify",
            "2",
            "-o",
            str(tmp_path / "x.json"),
        ]
    )
    assert (
        code == 2
        and "plan.verify (--verify) needs the searching sharder (--sharder dreamshard)" in err
        and not (tmp_path / "x.json").exists()
    )


def test_cli_warns_of_a_simulated_model_and_of_an_explain_without_search(model_dir, tmp_path):
    inv = save_inventory(synth_inventory(8, seed=3, name="w"), tmp_path / "inv.yaml")
    code, _, err = invoke(
        ["plan", "-i", str(inv), "-d", "2", "-m", "16", "--model", str(model_dir), "-o", str(tmp_path / "p.json")]
    )
    assert code == 0 and "warning: predicted costs are SIMULATED: model" in err and "the toy backend" in err
    code, _, err = invoke(
        ["plan", "-i", str(inv), "-d", "2", "-m", "16", "-s", "dim_greedy", "--explain", "-o", str(tmp_path / "q.json")]
    )
    assert code == 0 and "warning: the explanation (--explain) is skipped: 'dim_greedy' does not search" in err
    assert "SIMULATED" not in err


def test_criteo_terabyte_plans_with_column_splits_and_an_unfittable_table_is_named(model_dir, tmp_path):
    inv = tmp_path / "tb.yaml"
    code, _, err = invoke(["inventory", "preset", "criteo-terabyte", "--dim", "128", "-o", str(inv)])
    assert code == 0, err
    code, out, err = invoke(
        [
            "plan",
            "-i",
            str(inv),
            "-d",
            "8",
            "-m",
            "16",
            "--model",
            str(model_dir),
            "--explain",
            "-o",
            str(tmp_path / "p.json"),
        ]
    )
    assert code == 0, err
    # TorchRec's planner is asked too; it places no unit around row blocks, so it says why it has no plan
    assert "torchrec: no plan: skipped: TorchRec's planner places no unit around fixed units" in out
    plan = load_plan(tmp_path / "p.json")
    assert (plan.column_shards or plan.row_shards) and plan.fits_memory() and len(plan.table_names) == 26
    # dim 128: no column shard narrower than TorchRec's 128, so the four tables over 13 GB are row-sharded
    assert not plan.column_shards and len(plan.row_shards) == 4
    # a heuristic splits the tables larger than a device too
    code, _, err = invoke(
        ["plan", "-i", str(inv), "-d", "8", "-m", "16", "-s", "dim_greedy", "-o", str(tmp_path / "q.json")]
    )
    assert code == 0, err
    greedy = load_plan(tmp_path / "q.json")
    assert (greedy.column_shards or greedy.row_shards) and greedy.fits_memory() and len(greedy.table_names) == 26
    # a table that no sharding fits is named in one line
    code, _, err = invoke(
        ["plan", "-i", str(inv), "-d", "2", "-m", "0.5", "-s", "dim_greedy", "-o", str(tmp_path / "r.json")]
    )
    assert code == 2 and "t_cat_" in err and "fits on no device" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "r.json").exists()


def test_a_column_shard_plan_round_trips_through_gate_store_and_torchrec_export(model_dir, tmp_path):
    base = synth_inventory(8, seed=26, name="cs")
    big = max(base.tables, key=lambda t: t.size_bytes)
    big = big.model_copy(update={"constraints": TableConstraints(min_partition=4)})  # narrow shards asked for
    base = base.model_copy(update={"tables": tuple(big if t.name == big.name else t for t in base.tables)})
    inv = save_inventory(base, tmp_path / "inv.yaml")
    mem = str(big.size_gb * 0.6)  # the biggest table must be split
    plan_file, cmp_file, store = tmp_path / "plan.json", tmp_path / "cmp.json", tmp_path / "store"
    assert (
        invoke(["plan", "-i", str(inv), "-d", "4", "-m", mem, "--model", str(model_dir), "-o", str(plan_file)])[0] == 0
    )
    plan = load_plan(plan_file)
    assert big.name in plan.column_shards
    # The table-wise heuristics cannot place the split table: TorchRec's planner (it splits too) is the baseline.
    params = tmp_path / "params.yaml"
    params.write_text("publish: {baselines: [torchrec], allow_simulated: true}\n")
    code, _, err = invoke(
        [
            "compare",
            "-i",
            str(inv),
            "-d",
            "4",
            "-m",
            mem,
            "--sharders",
            "torchrec",
            "--model",
            str(model_dir),
            "--plan",
            str(plan_file),
            "--backend",
            "simulator",
            "--rounds",
            "5",
            "--warmup",
            "0",
            "--repeats",
            "1",
            "--out",
            str(cmp_file),
        ]
    )
    assert code == 0, err
    code, out, err = invoke(
        [
            "plans",
            "publish",
            str(plan_file),
            "-i",
            str(inv),
            "--comparison",
            str(cmp_file),
            "--params",
            str(params),
            "--store",
            str(store),
        ]
    )
    assert code in (0, 1), err  # approved, or kept as rejected: either way stored and verified
    code, out, err = invoke(["plans", "show", plan.plan_id, "--store", str(store)])
    assert code == 0, err
    stored = json.loads(out)
    assert stored["column_shards"] == json.loads(plan_file.read_text())["column_shards"]
    tr = tmp_path / "tr.json"
    assert invoke(["torchrec", "export", str(plan_file), "-i", str(inv), "-o", str(tr)])[0] == 0
    from dreamshard.integrations.torchrec_file import plan_from_document, read_torchrec_plan

    back = plan_from_document(read_torchrec_plan(tr), base, plan.topology)
    assert back.column_shards == plan.column_shards and back.placement == plan.placement


def test_verify_keeps_the_best_predicted_unless_every_round_confirms_another() -> None:
    from dreamshard.measured.verify import kept_index

    top, lucky, sure = [10.0, 12.0, 11.0], [9.0, 12.5, 9.5], [9.8, 11.5, 10.9]
    assert kept_index([top, lucky], [11.0, 9.5]) == 0  # a lower median, but slower in one round: noise
    assert kept_index([top, lucky, sure], [11.0, 9.5, 10.9]) == 0  # faster in every round, by less than 3%
    assert kept_index([top, lucky, sure], [11.0, 9.5, 10.9], [0.0, 0.0, 0.0]) == 2  # a baseline's: no margin
    faster = [9.0, 11.0, 10.0]
    assert kept_index([top, sure, faster], [11.0, 10.9, 10.0]) == 2  # of the confirmed, the fastest median
    assert kept_index([top, list(top)], [11.0, 11.0]) == 0  # a tie is no confirmation
    assert kept_index([top], [11.0]) == 0
    assert kept_index([top, [9.0]], [11.0, 9.0]) == 0  # dropped after fewer rounds: never confirmed


def test_the_current_plan_adapted_to_a_new_version_is_a_candidate_and_search_from_it_moves_few_tables(model_dir):
    """`incumbent`: every table the current plan places keeps its device, a new table is inserted where the
    predicted maximum is lowest; that placement (`current`) and local search from it (`current+search`) compete
    with the other sources, so a re-plan can keep most of the job's state where it is."""
    from dreamshard.placement.diff import plan_diff
    from dreamshard.search.insertion import adapted_placement, insert
    from dreamshard.values import Inventory

    v1 = synth_inventory(24, seed=31, name="inc")
    topo = Topology(num_devices=4, memory_per_device_gb=16)
    sharder = get_sharder(
        "dreamshard", model_dir=model_dir, search=SearchConfig(candidates=CHEAP), column_splits="never"
    )
    current = sharder.shard(v1, topo)
    new = Table(name="launch", num_embeddings=50_000, embedding_dim=64, pooling_factor=12.0)
    v2 = Inventory(name="inc", tables=(*v1.tables[1:], new))  # one table gone, one added
    with_current = get_sharder(
        "dreamshard",
        model_dir=model_dir,
        search=SearchConfig(candidates=CHEAP),
        column_splits="never",
        incumbent=current,
    )
    report = with_current.shard_with_report(v2, topo)
    assert report.search is not None
    (seed,) = [c for c in report.search.candidates if c.source == "current"]
    assert all(seed.placement[t.name] == current.placement[t.name] for t in v1.tables[1:])
    cost = with_current.planning_cost(topo)
    assert seed.placement["launch"] == insert(
        list(v1.tables[1:]), {t.name: current.placement[t.name] for t in v1.tables[1:]}, new, topo, cost
    )
    assert report.plan.placement == report.search.best.placement  # the best predicted, wherever it came from
    if report.search.best.source.startswith("current"):
        assert len(plan_diff(current, report.plan, v2).moved) < len(v1.tables) // 2
    # nothing in common, or another device count: no seed, and the search says why
    other = Inventory(name="inc", tables=(new,))
    assert adapted_placement(current.units(), other, topo, cost) is None
    two = get_sharder(
        "dreamshard",
        model_dir=model_dir,
        search=SearchConfig(candidates=CHEAP),
        column_splits="never",
        incumbent=current,
    ).shard_with_report(v2, Topology(num_devices=2, memory_per_device_gb=16))
    assert two.search is not None and "4 devices, this topology 2" in two.search.failed["current"]


def test_cli_plan_with_an_incumbent_shows_its_moves_and_refuses_misuse(model_dir, tmp_path):
    inv = synth_inventory(16, seed=32, name="cli")
    save_inventory(inv, tmp_path / "v1.yaml")
    code, _, err = invoke(
        [
            "plan",
            "-i",
            str(tmp_path / "v1.yaml"),
            "-d",
            "2",
            "-m",
            "16",
            "--model",
            str(model_dir),
            "-o",
            str(tmp_path / "v1.json"),
        ]
    )
    assert code == 0, err
    save_inventory(inv.model_copy(update={"tables": inv.tables[:-1]}), tmp_path / "v2.yaml")
    code, out, err = invoke(
        [
            "plan",
            "-i",
            str(tmp_path / "v2.yaml"),
            "-d",
            "2",
            "-m",
            "16",
            "--model",
            str(model_dir),
            "--incumbent",
            str(tmp_path / "v1.json"),
            "--explain",
            "-o",
            str(tmp_path / "v2.json"),
        ]
    )
    assert code == 0, err
    assert "against --incumbent: " in out and "tables move" in out and "1 removed" in out and "current" in out
    for argv, needle in (
        (["-s", "dim_greedy"], "an incumbent plan (--incumbent) needs the searching sharder (--sharder dreamshard)"),
        (["-o", str(tmp_path / "v1.json")], "same file as --incumbent"),
    ):
        code, _, err = invoke(
            [
                "plan",
                "-i",
                str(tmp_path / "v2.yaml"),
                "-d",
                "2",
                "-m",
                "16",
                "--model",
                str(model_dir),
                "--incumbent",
                str(tmp_path / "v1.json"),
                "-o",
                str(tmp_path / "x.json"),
                *argv,
            ]
        )
        assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err
    (tmp_path / "cut.json").write_text((tmp_path / "v1.json").read_text()[:200])
    code, _, err = invoke(
        [
            "plan",
            "-i",
            str(tmp_path / "v2.yaml"),
            "-d",
            "2",
            "-m",
            "16",
            "--model",
            str(model_dir),
            "--incumbent",
            str(tmp_path / "cut.json"),
            "-o",
            str(tmp_path / "y.json"),
        ]
    )
    assert code == 2 and "cut.json" in err and not (tmp_path / "y.json").exists()
    (tmp_path / "none.json").write_text('{"incumbent": null, "reason": "no plan was current"}')  # `plans incumbent`
    code, out, err = invoke(
        [
            "plan",
            "-i",
            str(tmp_path / "v2.yaml"),
            "-d",
            "2",
            "-m",
            "16",
            "--model",
            str(model_dir),
            "--incumbent",
            str(tmp_path / "none.json"),
            "--explain",
            "-o",
            str(tmp_path / "z.json"),
        ]
    )
    assert code == 0 and "against --incumbent" not in out and "current" not in out, err


def test_local_search_always_starts_from_the_current_plan_even_when_it_ranks_low(model_dir):
    """The seed is refined whatever its rank (`refine_top` covers the best few only): an incumbent with every table
    on one device ranks last, and local search from it still runs (and spreads the tables)."""
    from dreamshard.sharders.base import make_plan

    inv = synth_inventory(12, seed=33, name="low")
    topo = Topology(num_devices=3, memory_per_device_gb=16)
    crowded = make_plan(inv, topo, {t.name: 0 for t in inv.tables}, "hand")
    report = get_sharder(
        "dreamshard",
        model_dir=model_dir,
        search=SearchConfig(candidates=CHEAP, refine_top=1),
        column_splits="never",
        incumbent=crowded,
    ).shard_with_report(inv, topo)
    assert report.search is not None
    by_source = {c.source: c for c in report.search.candidates}
    assert by_source["current"].predicted_ms == max(c.predicted_ms for c in report.search.candidates)
    assert "current+search" in by_source
    assert by_source["current+search"].predicted_ms < by_source["current"].predicted_ms


def test_a_current_plan_equal_to_another_candidate_keeps_the_name_current(model_dir):
    """Search lists each distinct placement once: when another source places exactly as the current plan does, the
    entry is `current` (verify's default; it moves nothing), not the other source's."""
    inv = synth_inventory(12, seed=35, name="same")
    topo = Topology(num_devices=3, memory_per_device_gb=16)
    current = get_sharder("size_greedy").shard(inv, topo)
    report = get_sharder(
        "dreamshard",
        model_dir=model_dir,
        search=SearchConfig(candidates=["size_greedy", "lpt"]),
        column_splits="never",
        incumbent=current,
    ).shard_with_report(inv, topo)
    assert report.search is not None
    sources = [c.source for c in report.search.candidates]
    assert "current" in sources and "size_greedy" not in sources, sources


def test_verify_keeps_the_current_plans_candidate_unless_another_is_faster_in_every_round(model_dir):
    """With an incumbent, verify measures its best candidate first and keeps it by default: a re-plan moves the
    job's tables only when the hardware confirms the gain."""
    inv = synth_inventory(16, seed=34, name="keep")
    topo = Topology(num_devices=2, memory_per_device_gb=16)
    current = get_sharder("size_greedy").shard(inv, topo)
    sharder = get_sharder(
        "dreamshard",
        model_dir=model_dir,
        search=SearchConfig(candidates=CHEAP),
        column_splits="never",
        incumbent=current,
        verify=2,
        verify_rounds=2,
        oracle=make_oracle("simulator"),
    )
    plan = sharder.shard(inv, topo)
    v = plan.verification
    assert v is not None and v.candidates[0].source.startswith("current")
    first = v.candidates[0]
    if v.chosen != first.source:  # replaced: the kept one measured faster (every round, so its median too)
        kept = next(c for c in v.candidates if c.source == v.chosen)
        assert kept.measured_ms < first.measured_ms and kept.rounds == first.rounds
