"""The fallback decision: a plan the gate rejects for a version the current plan cannot serve (a table
added; no plan yet) leaves the training job nothing to load; something measured with it becomes current instead,
under its own plan id, outcome `fallback`: the current plan extended to the version (its tables where they are)
first, the best measured baseline when nothing is current or a baseline beats the extension beyond the noise.
Where the current plan can serve the version (a statistics-only change), a rejection keeps it, as before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from flows_support import tiny_inventory

from dreamshard.cli.app import invoke
from dreamshard.documents import load_inventory, load_plan, save_inventory
from dreamshard.gate import fallback_plan
from dreamshard.placement.diff import plan_diff
from dreamshard.sharders import get_sharder
from dreamshard.sharders.extend import EXTENDED
from dreamshard.store import get_current, list_plans, open_store
from dreamshard.values import GateDecision, Inventory

PUBLISH = ["--measure", "--backend", "simulator", "--allow-simulated", "--rounds", "2", "--store", "store"]


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _plan(inv: str, sharder: str, out: str) -> str:
    code, _, err = invoke(["plan", "-i", inv, "-d", "2", "-m", "1", "-s", sharder, "-o", out])
    assert code == 0, err
    return load_plan(Path(out)).plan_id


def _with_new_table(inv: Inventory, path: Path) -> Inventory:
    t = inv.tables[1]
    v2 = Inventory(name=inv.name, tables=(*inv.tables, t.model_copy(update={"name": f"{t.name}_new"})))
    save_inventory(v2, path)
    return v2


def test_a_rejected_plan_for_a_new_schema_makes_the_current_plan_extended_current(work: Path) -> None:
    v1 = tiny_inventory(work / "v1.yaml")
    _plan("v1.yaml", "size_lookup_greedy", "p1.json")
    code, out, err = invoke(["plans", "publish", "p1.json", "-i", "v1.yaml", *PUBLISH])
    store = open_store("store")
    first = get_current(store, "tiny")  # approved or (if beaten) the fallback: either way v1 has a current plan
    assert first.inventory_fingerprint == v1.fingerprint(), out + err

    v2 = _with_new_table(v1, work / "v2.yaml")
    assert v2.schema_fingerprint() != v1.schema_fingerprint()
    bad = _plan("v2.yaml", "round_robin", "p2.json")  # round robin: clearly slower than the greedy baselines
    code, out, err = invoke(["plans", "publish", "p2.json", "-i", "v2.yaml", *PUBLISH])
    assert code == 1 and f"rejected {bad}" in err and "the current plan extended" in err, out + err
    assert "fallback: published" in out and "now current" in out and "added t0001_new" in out
    current = get_current(store, "tiny")
    assert current.plan_id != bad and current.inventory_fingerprint == v2.fingerprint()
    assert current.schema_fingerprint == v2.schema_fingerprint() and current.sharder == EXTENDED
    assert current.measured is not None and current.lineage is None and current.model_version is None
    assert not plan_diff(first, current, v2).moved  # every old table stays where it was: the job moves nothing
    records = {r.plan_id: r for r in list_plans(store, "tiny", v2.fingerprint())}
    assert records[bad].status == "rejected" and records[bad].outcome == "rejected"
    assert current.plan_id in records[bad].reason  # the rejection names the plan that serves instead
    fb = records[current.plan_id]
    assert fb.status == "approved" and fb.outcome == "fallback" and fb.is_current
    assert f"plan {bad} does not become current" in fb.reason and f"plan {first.plan_id} extended" in fb.reason
    code, out, _ = invoke(["plans", "list", "--store", "store"])
    assert code == 0 and "fallback" in out

    # Publishing the same plan again: its recorded decision, no second fallback.
    code, _, err = invoke(["plans", "publish", "p2.json", "-i", "v2.yaml", *PUBLISH])
    assert code == 1 and "already decided: rejected" in err
    assert len(list_plans(store, "tiny", v2.fingerprint())) == 2

    # A statistics-only change: the fallback serves it, so a rejection keeps it current and adds no fallback.
    t0 = v2.tables[0]
    v3 = Inventory(
        name="tiny", tables=(t0.model_copy(update={"pooling_factor": t0.pooling_factor + 2}), *v2.tables[1:])
    )
    save_inventory(v3, work / "v3.yaml")
    assert v3.schema_fingerprint() == v2.schema_fingerprint()
    worse = _plan("v3.yaml", "round_robin", "p3.json")
    code, out, err = invoke(["plans", "publish", "p3.json", "-i", "v3.yaml", *PUBLISH])
    assert code == 1 and f"rejected {worse}" in err and "fallback" not in out + err
    assert get_current(store, "tiny").plan_id == current.plan_id
    assert [r.outcome for r in list_plans(store, "tiny", v3.fingerprint())] == ["rejected"]


def test_the_fallback_is_only_made_from_what_the_judgement_verified_and_measured(work: Path) -> None:
    """A fallback is a contender the gate verified and measured in the same rounds, under a new id; a label the
    judgement does not hold (or the judged plan's own) makes none."""
    from dreamshard.config.publish import PublishConfig
    from dreamshard.evaluation import compare_sharders
    from dreamshard.gate import JUDGED, Incumbent, gate_plan, trust_plan
    from dreamshard.profiling.oracle import make_oracle
    from dreamshard.values import Topology

    inv = tiny_inventory(work / "inv.yaml")
    topo = Topology(num_devices=2, memory_per_device_gb=1.0, batch_size=256)
    rr = get_sharder("round_robin").shard(inv, topo).model_copy(update={"sharder": "dreamshard"})
    cmp = compare_sharders(
        inv,
        topo,
        ["dim_greedy", "torchrec"],
        make_oracle("simulator"),
        rounds=2,
        extra_plans=[rr],
        with_lower_bound=False,
    )
    rules = PublishConfig(baselines=("dim_greedy", "torchrec"), allow_simulated=True, min_rounds=2, early_rounds=0)
    j = gate_plan(trust_plan(rr, inv), cmp, rules)
    nothing = Incumbent(inventory_name="tiny")
    plan, decision = fallback_plan(j, "dim_greedy", "no plan is current for 'tiny'", nothing)  # type: ignore[misc]
    dg = next(r for r in cmp.results if r.sharder == "dim_greedy")
    assert plan.units() == dg.plan.units() and plan.plan_id not in (dg.plan.plan_id, rr.plan_id)
    assert decision.approved and decision.outcome == "fallback" and decision.plan_id == plan.plan_id
    assert plan.measured == dg.plan.measured and plan.measured_by == cmp.backend
    assert fallback_plan(j, "size_greedy", "why", nothing) is None  # not measured in this judgement
    assert fallback_plan(j, JUDGED, "why", nothing) is None
    with pytest.raises(ValueError):
        GateDecision(approved=False, outcome="fallback", reason="x")  # a fallback is always made current


def test_the_replan_fast_path_reports_the_fallback(work: Path) -> None:
    import yaml

    from dreamshard.config.settings import resolve
    from dreamshard.usecases import replan as replan_uc

    (work / "params.yaml").write_text(
        yaml.safe_dump(
            {
                "topology": {"memory_per_device_gb": 1.0, "batch_size": 2048},
                "profile": {"backend": "simulator", "warmup": 0, "repeats": 1},
                "plan": {"num_devices": 2, "candidates": ["round_robin"], "verify": 0, "samples": 0},
                "evaluate": {"rounds": 2},
                "publish": {"store_uri": "store", "allow_simulated": True, "min_rounds": 2, "min_improvement": 0.3},
            }
        )
    )
    tiny_inventory(work / "v1.yaml")
    result = replan_uc.run(
        replan_uc.ReplanRequest(settings=resolve(work / "params.yaml"), inventory=load_inventory(work / "v1.yaml"))
    )
    done = result.publication
    assert result.outcome == "fallback" and done is not None and done.fallback_ref is not None
    assert done.fallback_ref.is_current and done.current_plan_id == done.fallback_ref.plan_id
    code, out, _ = invoke(["replan", "-i", "v1.yaml", "--force", "--json"])
    assert code == 1 and json.loads(out)["outcome"] == "not-published"  # the fallback serves it now
