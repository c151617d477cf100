"""One test per gate defect found by the hardening rounds (all failed before the gate's
rework): noise cannot flip a decision, labels cannot remove or fake a baseline, the publisher cannot choose the
baselines, a plan file's metadata is not trusted, a comparison's figures must agree, one decision per plan id."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gate_hostile import (
    by_label,
    edit_results,
    full_comparison,
    publish_argv,
    relabelled,
    write_case,
)
from store_helpers import NoisyOracle, approve, publish_or_reject, world

from dreamshard.cli.app import invoke
from dreamshard.evaluation import BASELINE_SHARDERS
from dreamshard.store import list_plans, open_store, publish
from dreamshard.values import GateDecision
from dreamshard.values.lineage import Lineage


def one_line_2(r: tuple[int, str, str]) -> str:
    lines = r[2].strip().splitlines()
    assert r[0] == 2 and len(lines) == 1 and "Traceback" not in r[2], r
    return lines[0]


def records(files: dict[str, Path]) -> list:  # type: ignore[type-arg]
    """The store's decisions on the plans under test: a fallback (a rejected plan's best measured baseline made
    current when nothing current served the version) is a baseline's own plan, checked here and left out."""
    found = list_plans(open_store(str(files["store"]))) if files["store"].exists() else []
    for r in found:
        if r.outcome == "fallback":
            assert r.sharder in BASELINE_SHARDERS and r.is_current and r.status == "approved"
    return [r for r in found if r.outcome != "fallback"]


# -- 18.2: relabelling ---------------------------------------------------------------------------------------
def test_a_relabelled_plan_is_measured_against_the_real_baseline(tmp_path: Path) -> None:
    plan = relabelled()
    files = write_case(tmp_path, plan)
    r = invoke(publish_argv(files, "--measure", "--backend", "simulator", comparison=False))
    assert r[0] == 1 and "best baseline lookup_greedy" in r[2] and "does not beat" in r[2], r
    (rec,) = records(files)
    assert rec.status == "rejected" and rec.outcome == "rejected"
    # `compare -p` output of the relabelled plan, unedited: two lookup_greedy contenders, the plan by its id
    files = write_case(tmp_path / "c", plan, full_comparison(plan))
    r = invoke(publish_argv(files))
    assert r[0] == 1 and "does not beat" in r[2], r


# -- 18.3: the publisher cannot choose the baselines ---------------------------------------------------------
def test_the_publisher_cannot_narrow_the_baselines(tmp_path: Path) -> None:
    plan = relabelled("dreamshard")
    narrow = full_comparison(plan, sharders=("round_robin",))
    files = write_case(tmp_path / "a", plan, narrow)
    assert "no 'dim_greedy' baseline" in one_line_2(invoke(publish_argv(files, "--sharders", "round_robin")))
    files = write_case(tmp_path / "b", plan)
    # random is no default gate baseline (gate.GATE_BASELINES); added, it counts (here: the fastest, seed 0)
    r = invoke(publish_argv(files, "--measure", "--backend", "simulator", "--sharders", "random", comparison=False))
    assert r[0] == 1 and "best baseline random" in r[2], r
    cmp = full_comparison(plan)
    deleted = edit_results(cmp, lambda rs: [x for x in rs if x["sharder"] not in ("random", "lookup_greedy")])
    files = write_case(tmp_path / "c", plan, deleted)
    assert "baseline" in one_line_2(invoke(publish_argv(files)))
    assert not records(files)


def test_a_baseline_entry_copied_under_another_label_is_refused(tmp_path: Path) -> None:
    plan = relabelled("dreamshard")
    cmp = full_comparison(plan)

    def copy_rr(rs: list) -> list:  # type: ignore[type-arg]
        fake = json.loads(json.dumps(by_label(rs, "round_robin")))
        fake["sharder"] = fake["plan"]["sharder"] = "lookup_greedy"
        fake["plan"]["plan_id"] = "copied"
        return [*rs, fake]  # the last duplicate label used to win

    files = write_case(tmp_path / "dup", plan, edit_results(cmp, copy_rr))
    assert "two contenders labelled 'lookup_greedy'" in one_line_2(invoke(publish_argv(files)))

    def replace_lg(rs: list) -> list:  # type: ignore[type-arg]
        return [x for x in copy_rr(rs) if not (x["sharder"] == "lookup_greedy" and x["plan"]["plan_id"] != "copied")]

    files = write_case(tmp_path / "swap", plan, edit_results(cmp, replace_lg))
    assert "recomputed" in one_line_2(invoke(publish_argv(files)))
    assert not records(files)


# -- 18.13: a comparison's inner consistency -----------------------------------------------------------------
@pytest.mark.parametrize(
    "edit, needle",
    [
        ("overall", "bottleneck device"),
        ("simulated", "is_simulated"),
        ("huge", "below 1e+12"),
    ],
)
def test_inconsistent_comparisons_are_refused(edit: str, needle: str, tmp_path: Path) -> None:
    w = world()
    data = json.loads(w.comparison.model_dump_json())
    own = next(r for r in data["results"] if r["plan"]["plan_id"] == w.good.plan_id)
    if edit == "overall":  # overall 0.5 ms beside per-device totals of ~0.8 ms
        own["overall_ms"] = own["plan"]["measured"]["overall_ms"] = 0.5
        own["samples_ms"] = [0.5] * len(own["samples_ms"])
    elif edit == "simulated":
        data["backend"]["is_simulated"] = False
        for r in data["results"]:
            r["plan"]["measured_by"]["is_simulated"] = False
    else:
        base = by_label(data["results"], "dim_greedy")
        base["overall_ms"] = base["plan"]["measured"]["overall_ms"] = 1e308
        base["samples_ms"] = [1e308] * len(base["samples_ms"])
        base["plan"]["measured"]["per_device"] = [{k: 5e307 for k in d} for d in base["plan"]["measured"]["per_device"]]
    files = w.write(tmp_path)
    files["comparison"].write_text(json.dumps(data))
    files["plan"] = files["good"]
    r = invoke(publish_argv(files, "--params", str(files["params"])))
    assert needle in one_line_2(r)
    assert not files["store"].exists()


# -- 18.4: what a plan file may say ----------------------------------------------------------------------------
def test_forged_plan_metadata_is_not_stored(tmp_path: Path) -> None:
    w = world()
    files = w.write(tmp_path)
    forged = json.loads(files["good"].read_text())
    forged.update(
        lineage=Lineage(
            inventory_fingerprint=w.inventory.fingerprint(),
            flow_run_id="fake-run",
            dvc_remote="https://user:hunter2@evil.example/x",
        ).model_dump(mode="json"),
        predicted=forged["measured"] if forged.get("measured") else None,
        model_version="v-forged",
        verification=None,
        out_of_range=["table t0 rows outside the trained range"],
    )
    files["good"].write_text(json.dumps(forged))
    files["plan"] = files["good"]
    r = invoke(publish_argv(files, "--params", str(files["params"])))
    assert r[0] == 0, r
    r = invoke(["plans", "show", w.good.plan_id, "--store", str(files["store"])])
    shown = json.loads(r[1])
    assert shown["lineage"] is None and shown["predicted"] is None and shown["model_version"] is None
    assert shown["verification"] is None and shown["out_of_range"] == ["table t0 rows outside the trained range"]
    assert shown["measured_by"]["is_simulated"] is True
    r = invoke(["plans", "show", w.good.plan_id, "--store", str(files["store"]), "--lineage"])
    assert r[0] == 2 and "hunter2" not in r[1] + r[2]


def _stored_with_lineage(tmp_path: Path, **lineage: object) -> str:
    from dreamshard.config.settings import installed_pipeline_file

    store = tmp_path / "store"
    fields = {
        "inventory_fingerprint": world().inventory.fingerprint(),
        "dvc_lock": "schema: '2.0'\n",
        "params": "{}\n",
        "dvc_remote": str(tmp_path / "remote"),
        "dvc_yaml": installed_pipeline_file("dvc.yaml").read_text(),
        "model_md5": "a" * 32 + ".dir",
        "measurements_md5": "b" * 32,
        **lineage,
    }
    measured = next(r for r in world().comparison.results if r.plan.plan_id == world().good.plan_id).plan.measured
    plan = world().good.model_copy(update={"lineage": Lineage(**fields), "measured": measured})  # type: ignore[arg-type]
    publish(open_store(str(store)), plan, approve(plan))
    return str(store)


@pytest.mark.parametrize(
    "lineage, needle",
    [
        ({"model_md5": None, "measurements_md5": None}, "no md5 for the model and the measurements"),
        (
            {"dvc_yaml": "stages:\n  inventory:\n    cmd: sh -c 'touch /tmp/pwned'\n    outs: [data/inventory.yaml]\n"},
            "not the installed pipeline's",
        ),
    ],
)
def test_reproduce_refuses_what_it_could_not_check(lineage: dict, needle: str, tmp_path: Path) -> None:  # type: ignore[type-arg]
    store = _stored_with_lineage(tmp_path, **lineage)
    r = invoke(["plans", "reproduce", world().good.plan_id, "--store", store, "--into", str(tmp_path / "repro")])
    assert needle in one_line_2(r)
    assert not (tmp_path / "repro").exists()


# -- 15.5: noise, simulator basis, one decision per plan -------------------------------------------------------
def test_noise_cannot_flip_the_decision_and_a_plan_is_decided_once(tmp_path: Path) -> None:
    w = world()
    files = w.write(tmp_path)
    noisy = full_comparison(w.good, NoisyOracle(seed=3), sharders=tuple(w.baselines))
    files["comparison"].write_text(noisy.model_dump_json())
    files["plan"] = files["good"]
    # a current plan to keep (with none, a plan inside the noise becomes the first: gate/publish_policy.py)
    seed = w.worse.model_copy(update={"measured": w.worse.predicted})
    publish_or_reject(
        open_store(str(files["store"])),
        seed,
        GateDecision(
            approved=True,
            outcome="approved",
            reason="seed",
            plan_id=seed.plan_id,
            inventory_fingerprint=w.inventory.fingerprint(),
        ),
    )
    r = invoke(publish_argv(files, "--params", str(files["params"])))
    assert r[0] == 1 and r[2].startswith("inconclusive") and "the current plan stays" in r[2], r
    (rec,) = [x for x in records(files) if x.plan_id == w.good.plan_id]
    assert rec.status == "rejected" and rec.outcome == "inconclusive" and not rec.is_current
    # the same plan again, now with a quiet comparison and with --measure: the recorded decision stands
    files["comparison"].write_text(w.comparison.model_dump_json())
    for extra in ([], ["--measure", "--backend", "simulator"]):
        argv = publish_argv(files, "--params", str(files["params"]), *extra, comparison=not extra)
        r = invoke(argv)
        assert r[0] == 1 and r[2].startswith("already decided: inconclusive"), r
    assert [x.outcome for x in records(files) if x.plan_id == w.good.plan_id] == ["inconclusive"]


def test_a_rejected_plan_is_never_approved_later(tmp_path: Path) -> None:
    w = world()
    files = w.write(tmp_path)
    files["plan"] = files["worse"]
    assert invoke(publish_argv(files, "--params", str(files["params"])))[0] == 1
    r = invoke(
        publish_argv(files, "--params", str(files["params"]), "--measure", "--backend", "simulator", comparison=False)
    )
    assert r[0] == 1 and "already decided: rejected" in r[2]
    assert [x.status for x in records(files)] == ["rejected"]


def test_a_simulated_basis_needs_to_be_asked_for(tmp_path: Path) -> None:
    w = world()
    files = w.write(tmp_path)
    argv = [
        "plans",
        "publish",
        str(files["good"]),
        "--store",
        str(files["store"]),
        "-i",
        str(files["inventory"]),
        "--comparison",
        str(files["comparison"]),
    ]
    files["params"].write_text(w.params_text(allow_simulated=False))
    assert "--allow-simulated" in one_line_2(invoke([*argv, "--params", str(files["params"])]))
    assert not files["store"].exists()
    assert invoke([*argv, "--params", str(files["params"]), "--allow-simulated"])[0] == 0


def test_params_that_drop_torchrec_are_a_config_error(tmp_path: Path) -> None:
    w = world()
    files = w.write(tmp_path)
    files["params"].write_text("publish:\n  baselines: [round_robin, dim_greedy]\n")
    files["plan"] = files["good"]
    line = one_line_2(invoke(publish_argv(files, "--params", str(files["params"]))))
    assert "publish.baselines" in line and "torchrec" in line


def test_baselines_that_cannot_place_the_inventory_do_not_block_the_gate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Baselines that cannot place the inventory (the heuristics here, made to fail as a heuristic without splits
    would: they now row-shard a table larger than a device). The comparison records them as infeasible, the gate
    recomputes each before accepting its absence, and decides against the baselines that can (TorchRec's planner);
    with none left, the only plan that runs is approved."""
    from store_helpers import gate_file_plan

    from dreamshard.config.publish import PublishConfig
    from dreamshard.errors import InfeasiblePlacementError, PlanError
    from dreamshard.evaluation import compare_sharders
    from dreamshard.gate import evaluate_gate
    from dreamshard.profiling import make_oracle
    from dreamshard.sharders import get_sharder
    from dreamshard.values import Inventory, Table, Topology

    inv = Inventory(
        name="big",
        tables=(
            Table(name="huge", num_embeddings=4_000_000, embedding_dim=128, pooling_factor=2),
            Table(name="a", num_embeddings=1000, embedding_dim=16, pooling_factor=3),
            Table(name="b", num_embeddings=2000, embedding_dim=32, pooling_factor=1),
        ),
    )
    topo = Topology(num_devices=4, memory_per_device_gb=1.0, device_type="cuda")  # TorchRec row-shards for cuda only
    from dreamshard.sharders.base import TableWiseSharder

    def cannot(self: TableWiseSharder, inventory: Inventory, topology: Topology) -> None:
        raise InfeasiblePlacementError("huge", 1.9, 1.0, f"sharder {self.name}: fits on no device")

    monkeypatch.setattr(TableWiseSharder, "shard", cannot)
    plan = get_sharder("torchrec").shard(inv, topo).model_copy(update={"sharder": "dreamshard", "plan_id": "mine"})
    names = ["random", "round_robin", "dim_greedy", "size_greedy", "lookup_greedy", "size_lookup_greedy", "torchrec"]
    cmp = compare_sharders(inv, topo, names, make_oracle("simulator"), rounds=5, extra_plans=[plan])
    assert set(cmp.infeasible) == set(names) - {"torchrec"} and {r.sharder for r in cmp.results} == {
        "torchrec",
        "dreamshard",
    }
    rules = PublishConfig(allow_simulated=True)
    _, decision = gate_file_plan(plan, inv, cmp, rules)
    assert decision.baselines == ("torchrec",) and set(decision.infeasible) == set(rules.baselines) - {"torchrec"}
    assert decision.decided_by == "torchrec"
    # a forged "infeasible" claim does not remove a baseline that can place the inventory
    forged = cmp.model_copy(
        update={
            "results": [r for r in cmp.results if r.sharder != "torchrec"],
            "infeasible": {**cmp.infeasible, "torchrec": "claimed"},
        }
    )
    with pytest.raises(PlanError, match="no 'torchrec' baseline"):
        gate_file_plan(plan, inv, forged, rules)
    with pytest.raises(InfeasiblePlacementError, match="fits on no device"):  # nothing to measure: the first error
        compare_sharders(inv, topo, ["dim_greedy", "round_robin"], make_oracle("simulator"), rounds=1)
    alone = evaluate_gate(
        plan.model_copy(update={"measured": cmp.result("dreamshard").plan.measured}),
        {},
        0.0,
        infeasible=("dim_greedy",),
    )
    assert alone.approved and "no baseline can place" in alone.reason
