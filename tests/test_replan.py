"""The production loop's fast path (dreamshard.usecases.replan, `dreamshard replan`): a new inventory version is
planned with the current model, gated and published without profiling or training; a version outside the model's
ranges is not published and says a retrain is due."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from flows_support import REPLAN_PARAMS, change_one_table, fast_path_workspace, resize_one_table, tiny_inventory

from dreamshard.cli.app import invoke
from dreamshard.config.settings import resolve
from dreamshard.documents import load_inventory
from dreamshard.placement.diff import plan_diff
from dreamshard.store import get_current, get_current_inventory, list_plans, open_store
from dreamshard.usecases import replan as replan_uc
from dreamshard.values import Inventory

PARAMS = REPLAN_PARAMS


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return fast_path_workspace(tmp_path, monkeypatch, PARAMS)


def _replan(work: Path, **kw: object) -> replan_uc.ReplanResult:
    if isinstance(kw.get("inventory"), Path):  # the door reads the file
        kw["inventory"] = load_inventory(kw["inventory"])  # type: ignore[arg-type]
    return replan_uc.run(replan_uc.ReplanRequest(settings=resolve(work / "params.yaml"), **kw))  # type: ignore[arg-type]


def test_a_new_version_is_planned_gated_and_published_without_profiling_or_training(work: Path) -> None:
    inv = tiny_inventory(work / "v1.yaml")
    first = _replan(work, inventory=work / "v1.yaml")
    assert first.outcome == "published", first.reason
    store = open_store("store")
    assert get_current(store, "tiny").plan_id == first.plan.plan_id  # type: ignore[union-attr]
    assert get_current_inventory(store, "tiny")[0].fingerprint() == inv.fingerprint()  # type: ignore[index]
    again = _replan(work, inventory=work / "v1.yaml")
    assert again.outcome == "current" and again.plan.plan_id == first.plan.plan_id  # type: ignore[union-attr]
    v2 = change_one_table(inv, work / "v2.yaml")  # one table's pooling changed: a new version, same schema
    assert v2.schema_fingerprint() == inv.schema_fingerprint()
    tied = _replan(work, inventory=work / "v2.yaml")
    # the candidates are the baselines' own plans: the plan ties the best baseline, a tie is no approval (it is
    # equivalent), and the current plan serves the new version (same schema), so it stays
    assert tied.outcome == "not-published" and "equivalent" in tied.reason, tied.reason
    assert get_current(store, "tiny").plan_id == first.plan.plan_id  # type: ignore[union-attr]
    v2 = resize_one_table(v2, work / "v3.yaml")  # another schema, which the current plan cannot serve as it is
    second = _replan(work, inventory=work / "v3.yaml")
    # the new plan, or (not approved against it) the current plan extended to the version, which moves nothing
    assert second.outcome in ("published", "fallback"), second.reason
    assert second.previous_plan_id == first.plan.plan_id  # type: ignore[union-attr]
    now = get_current(store, "tiny")
    assert now.inventory_fingerprint == v2.fingerprint()
    if second.outcome == "fallback":
        assert now.sharder == "current+new" and not plan_diff(first.plan, now, v2).moved  # type: ignore[arg-type]
    assert get_current_inventory(store, "tiny")[0].fingerprint() == v2.fingerprint()  # type: ignore[index]
    diff = second.diff  # what the training job reshards: the tables the new plan places differently
    assert diff is not None and diff.old_plan_id == first.plan.plan_id  # type: ignore[union-attr]
    assert diff.new_plan_id == second.plan.plan_id and diff.kept + len(diff.moved) == len(v2.tables)  # type: ignore[union-attr]
    assert set(diff.moved) == {
        t
        for t in v2.table_names  # type: ignore[union-attr]
        if first.plan.units().get(t) != second.plan.units().get(t)
    }  # type: ignore[union-attr]
    assert first.diff is None  # no plan was current before the first


def test_a_version_outside_the_models_ranges_is_not_published_and_a_retrain_is_due(work: Path) -> None:
    tiny_inventory(work / "v1.yaml")
    data = yaml.safe_load((work / "params.yaml").read_text())
    data["plan"]["num_devices"] = 64  # the packaged model learned on 2-16 devices
    (work / "params.yaml").write_text(yaml.safe_dump(data))
    result = _replan(work, inventory=work / "v1.yaml")
    assert result.outcome == "retrain-due" and result.publication is None
    assert any("devices" in r for r in result.retrain_reasons), result.retrain_reasons
    store = open_store("store")
    assert list_plans(store, "tiny") == []  # nothing published, nothing rejected
    assert get_current_inventory(store, "tiny") is not None  # the version itself is stored


def test_a_decided_version_is_not_replanned_unless_forced(work: Path) -> None:
    tiny_inventory(work / "v1.yaml")
    data = yaml.safe_load((work / "params.yaml").read_text())
    data["publish"]["min_improvement"] = 0.5  # nothing beats the baselines by half: not published
    (work / "params.yaml").write_text(yaml.safe_dump(data))
    first = _replan(work, inventory=work / "v1.yaml")
    # nothing was current: the rejected plan's best measured baseline became current instead (the fallback)
    done = first.publication
    assert first.outcome == "fallback" and done is not None and done.ref is not None and done.fallback_ref is not None
    fallback_id = done.fallback_ref.plan_id
    again = _replan(work, inventory=work / "v1.yaml")
    assert again.outcome == "current" and again.plan.plan_id == fallback_id  # type: ignore[union-attr]
    assert [r.outcome for r in list_plans(open_store("store"), "tiny")] in (
        ["rejected", "fallback"],
        ["fallback", "rejected"],
    )
    forced = _replan(work, inventory=work / "v1.yaml", force=True)
    # the fallback is current and serves this version: a rejection now keeps it
    kept = forced.publication
    assert forced.outcome == "not-published" and kept is not None and kept.ref is not None
    assert kept.ref.plan_id != done.ref.plan_id and kept.fallback_ref is None
    assert get_current(open_store("store"), "tiny").plan_id == fallback_id


def test_replan_cli_from_the_store_and_its_errors(work: Path) -> None:
    tiny_inventory(work / "v1.yaml")
    code, _, err = invoke(["inventory", "push", "v1.yaml", "--store", "store", "--no-event"])
    assert code == 0, err
    code, out, err = invoke(["replan", "--inventory-name", "tiny", "--json"])
    assert code == 0, err
    answer = json.loads(out)
    assert answer["outcome"] == "published"
    # what verify measured is reported (the stored plan drops it: the gate never trusts a plan's verification)
    v = answer["verification"]
    assert v["candidates"] and v["chosen"] and all(1 <= c["rounds"] <= v["rounds"] for c in v["candidates"])
    assert answer["plan_stage_vs_search"] == v["stage_vs_search"]  # what measurement added, as `plan` says it
    code, out, err = invoke(["replan", "--inventory-name", "tiny"])
    assert code == 0 and out.strip().splitlines()[-1].startswith("current: tiny"), out
    # a resized table (a statistics-only change ties the current plan's baseline: a tie is no approval)
    resize_one_table(tiny_inventory(work / "v1.yaml"), work / "v2.yaml")
    code, out, err = invoke(["replan", "-i", "v2.yaml"])
    assert code == 0 and "against the plan that was current: " in out and "tables move" in out, out + err
    assert "plan stage: " in out and "the search-only plan" in out, out
    code, _, err = invoke(["replan", "--inventory-name", "nope"])
    assert code == 2 and err.count("\n") == 1 and "no inventory 'nope'" in err
    code, _, err = invoke(["replan"])
    assert code == 2 and "an inventory file (-i), or the inventory name (--inventory-name)" in err
    code, _, err = invoke(["replan", "-i", "v1.yaml", "--inventory-name", "other"])
    assert code == 2 and "is not the file's inventory 'tiny'" in err


def first_plan(store: Any, plan: Any, decision: Any, inventory: Inventory) -> Any:
    """The decision the publish policy records for `plan` given the store's current plan (read as the publish use
    case reads it), on hand-set figures with no extension measured."""
    from store_helpers import hand_judgement

    from dreamshard.gate import incumbent_for
    from dreamshard.gate.publish_policy import publish_verdict
    from dreamshard.usecases.publish_decide import read_state

    state = read_state(store, plan.inventory_name)
    inc = incumbent_for(plan.inventory_name, state.plan_id, state.plan, state.schema, inventory, plan.topology)
    return publish_verdict(hand_judgement(decision, {"size_greedy": [10.0, 10.0, 10.0]}, plan), inc).decision


def test_an_inconclusive_plan_becomes_the_first_plan_but_never_replaces_a_current_one(tmp_path: Path) -> None:
    from store_helpers import publish_or_reject

    from dreamshard.sharders import get_sharder
    from dreamshard.values import GateDecision, Topology

    inv = tiny_inventory(tmp_path / "inv.yaml")
    topo = Topology(num_devices=2, memory_per_device_gb=1.0)
    plan = get_sharder("dim_greedy").shard(inv, topo)
    store = open_store(str(tmp_path / "store"))
    unsure = GateDecision(
        approved=False,
        outcome="inconclusive",
        plan_id=plan.plan_id,
        reason="inconclusive: ... within the noise, the current plan stays (measure more rounds)",
    )
    first = first_plan(store, plan, unsure, inv)
    assert first.approved and first.outcome == "approved" and "no plan is current for 'tiny'" in first.reason
    rejected = unsure.model_copy(update={"outcome": "rejected"})
    assert first_plan(store, plan, rejected, inv) == rejected  # clearly slower: never
    published = publish_or_reject(
        store,
        plan.model_copy(update={"measured": plan.predicted}),
        first.model_copy(update={"inventory_fingerprint": inv.fingerprint()}),
    )
    assert published.is_current
    other = get_sharder("size_greedy").shard(inv, topo)
    assert first_plan(store, other, unsure.model_copy(update={"plan_id": other.plan_id}), inv).outcome == "inconclusive"


def test_inside_the_noise_a_current_plan_stays_only_when_it_can_serve_the_new_version(tmp_path: Path) -> None:
    """A statistics-only change keeps the schema: the current plan can still place the job, and an inconclusive
    plan leaves it current. A table added (another schema) or another topology: the current plan cannot serve
    the new version's job, so there is nothing to keep and the plan inside the noise becomes current."""
    from store_helpers import publish_or_reject

    from dreamshard.sharders import get_sharder
    from dreamshard.values import GateDecision, Topology

    v1 = tiny_inventory(tmp_path / "v1.yaml")
    topo = Topology(num_devices=2, memory_per_device_gb=1.0)
    store = open_store(str(tmp_path / "store"))
    current = get_sharder("dim_greedy").shard(v1, topo)
    approved = GateDecision(
        approved=True,
        outcome="approved",
        plan_id=current.plan_id,
        reason="approved",
        inventory_fingerprint=v1.fingerprint(),
    )
    assert publish_or_reject(store, current.model_copy(update={"measured": current.predicted}), approved).is_current

    def unsure(plan_id: str) -> GateDecision:
        return GateDecision(
            approved=False,
            outcome="inconclusive",
            plan_id=plan_id,
            reason="inconclusive: ... within the noise, the current plan stays (measure more rounds)",
        )

    stats_only = change_one_table(v1, tmp_path / "v2.yaml")
    assert stats_only.schema_fingerprint() == v1.schema_fingerprint()
    same_schema = get_sharder("size_greedy").shard(stats_only, topo)
    kept = first_plan(store, same_schema, unsure(same_schema.plan_id), stats_only)
    assert kept.outcome == "inconclusive" and "measure more rounds" in kept.reason
    # a re-plan that kept the current plan's placement (another id): no number of rounds could tell them apart
    again = current.model_copy(update={"plan_id": f"{current.plan_id}-again"})
    same = first_plan(store, again, unsure(again.plan_id), v1)
    assert same.outcome == "inconclusive" and "measure more rounds" not in same.reason
    assert f"the current plan {current.plan_id} stays (this plan places every table as it does" in same.reason

    extra = v1.tables[1].model_copy(update={"name": "t_new"})
    grown = Inventory(name=v1.name, tables=(*v1.tables, extra))
    added = get_sharder("size_greedy").shard(grown, topo)
    got = first_plan(store, added, unsure(added.plan_id), grown)
    assert got.approved and got.outcome == "approved"
    assert f"the current plan {current.plan_id} places another table schema" in got.reason
    assert got.reason.endswith("it becomes current")

    wider = get_sharder("size_greedy").shard(stats_only, Topology(num_devices=4, memory_per_device_gb=1.0))
    got = first_plan(store, wider, unsure(wider.plan_id), stats_only)
    assert got.approved and "is for 2 x cpu (batch 2048) and cannot serve this topology" in got.reason


def test_the_fast_path_refines_only_for_its_own_budget(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Plan.refine_seconds is the retrain path's plan stage; the fast path refines for plan.replan_refine_seconds
    (0 by default: no refinement), or `replan --refine-seconds`."""
    import dreamshard.measured.steps as measured_steps

    budgets: list[float] = []
    real = measured_steps.refine_plan

    def spy(inv: object, plan: object, cost: object, oracle: object, seconds: float, *a: object, **k: object) -> object:
        budgets.append(seconds)
        return real(inv, plan, cost, oracle, seconds, *a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(measured_steps, "refine_plan", spy)
    v1 = tiny_inventory(work / "v1.yaml")
    data = yaml.safe_load((work / "params.yaml").read_text())
    data["plan"]["refine_seconds"] = 30.0
    data["plan"]["stage_budget"] = 0  # no budget: refinement gets what it asks (the budget: test_measured_race.py)
    (work / "params.yaml").write_text(yaml.safe_dump(data))
    assert _replan(work, inventory=work / "v1.yaml").outcome == "published"
    assert budgets == []
    change_one_table(v1, work / "v2.yaml")
    code, _, err = invoke(["replan", "-i", "v2.yaml", "--refine-seconds", "0.2"])
    assert code in (0, 1), err
    assert budgets == [0.2]


def test_a_plan_diff_names_what_moves_and_its_bytes() -> None:
    """A table moves when its device, its sharding type or its shards change; one only in one plan is added or
    removed; the moved bytes are the moved tables' weights."""
    from dreamshard.placement.diff import plan_diff
    from dreamshard.sharders.base import make_plan
    from dreamshard.values import GB, Table, Topology
    from dreamshard.values.units import row_shards_for

    topo = Topology(num_devices=2, memory_per_device_gb=1.0)
    t = {
        n: Table(name=n, num_embeddings=1000 * (i + 1), embedding_dim=16, pooling_factor=2.0)
        for i, n in enumerate("abcdef")
    }
    old_inv = Inventory(name="x", tables=tuple(t[n] for n in "abcde"))
    new_inv = Inventory(name="x", tables=tuple(t[n] for n in "abcdf"))
    old = make_plan(
        old_inv, topo, {"a": 0, "b": 1, "c": 0, "e": 1}, "hand", row_shards={"d": row_shards_for(4000, [0, 1])}
    )
    new = make_plan(new_inv, topo, {"a": 0, "b": 0, "d": 1, "f": 1}, "hand", data_parallel=("c",))
    diff = plan_diff(old, new, new_inv)
    assert set(diff.moved) == {"b", "c", "d"} and diff.kept == 1  # b: device; c: table-wise -> replicated; d: rows
    assert diff.added == ("f",) and diff.removed == ("e",)
    assert diff.moved_gb == pytest.approx(sum(t[n].size_bytes for n in "bcd") / GB)
    assert diff.summary.startswith("3 of 4 tables move") and "1 added, 1 removed" in diff.summary
    assert plan_diff(new, new, new_inv).moved == ()
