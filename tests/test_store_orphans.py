"""The leftovers of an interrupted publish: `plans list` warns of them as orphans and exits 0 (never
CORRUPT), `plans fsck` names `plans gc` as their fix, `plans gc` removes them once older than the grace period and
never touches a stored plan (its object and its record) nor anything of a plan a pointer (current or history) names
(dreamshard.store.orphans). A `plans gc` racing publishes: tests/test_store_gc_race.py."""

from __future__ import annotations

import os
import time
from pathlib import Path
from unittest import mock

import pytest
from store_helpers import FP, approve, make_plan, publish_or_reject

from dreamshard.cli.app import invoke
from dreamshard.errors import StoreError
from dreamshard.gate import evaluate_gate
from dreamshard.store import (
    LocalPlanStore,
    fsck,
    get_current,
    publish,
    reject,
    rollback,
    scan_plans,
)
from dreamshard.store.base import PlanStore
from dreamshard.store.orphans import find_orphans, remove_orphans
from dreamshard.values import Plan

HOUR = 3600.0


def interrupted_publish(store: PlanStore, plan: Plan, writes: int, rejected: bool = False) -> None:
    """A publish (or a reject) whose store dies after `writes` objects (1: the plan, 2: and its checksum)."""
    real = store.put_bytes
    done = [0]

    def dying(key: str, data: bytes) -> None:
        if done[0] >= writes:
            raise StoreError("S3 endpoint died mid-publish")
        done[0] += 1
        real(key, data)

    with mock.patch.object(store, "put_bytes", dying), pytest.raises(StoreError, match="died"):
        if rejected:
            reject(store, plan, evaluate_gate(plan, {"size_greedy": 1.0}, 0.0))
        else:
            publish(store, plan, approve(plan))


def age_everything(root: Path, seconds: float) -> None:
    """Every object of the local store written `seconds` ago (the store's own write time is the mtime)."""
    then = time.time() - seconds
    for p in root.rglob("*"):
        if p.is_file():
            os.utime(p, (then, then))


def cli(*argv: str) -> tuple[int, str, str]:
    return invoke(list(argv))


@pytest.fixture
def store(tmp_path: Path) -> LocalPlanStore:
    """Three published plans (the last current, the two before it in the pointer's history) and one rejected."""
    st = LocalPlanStore(tmp_path / "store")
    for overall in (9.0, 8.0, 7.0):
        p = make_plan(overall=overall)
        publish(st, p, approve(p))
    worse = make_plan(overall=50.0)
    reject(st, worse, evaluate_gate(worse, {"size_greedy": 10.0}, 0.0))
    return st


@pytest.mark.parametrize("writes", [1, 2], ids=["plan only", "plan and checksum"])
def test_plans_list_warns_of_an_orphan_and_exits_0(store: LocalPlanStore, writes: int) -> None:
    orphan = make_plan(overall=6.0)
    interrupted_publish(store, orphan, writes)
    age_everything(Path(store.location), 2 * HOUR)
    code, out, err = cli("plans", "list", "--store", store.location)
    assert code == 0, err
    assert "CORRUPT" not in out + err and orphan.plan_id not in out
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"orphan: plans/inv/{FP}/{orphan.plan_id}.json: ")
    assert "interrupted publish" in lines[0] and "plans gc --store" in lines[0] and "2.0 h ago" in lines[0]
    code, out, _ = cli("plans", "list", "--store", store.location, "--json")
    assert code == 0 and orphan.plan_id not in out


def test_an_interrupted_reject_is_an_orphan_too(store: LocalPlanStore) -> None:
    worse = make_plan(overall=60.0)
    interrupted_publish(store, worse, 2, rejected=True)
    [found] = find_orphans(store, grace_minutes=0)
    assert found.key.endswith(f"rejected/{worse.plan_id}.json") and len(found.leftovers) == 2


def test_fsck_names_plans_gc_as_the_fix(store: LocalPlanStore) -> None:
    orphan = make_plan(overall=6.0)
    interrupted_publish(store, orphan, 1)
    age_everything(Path(store.location), 2 * HOUR)
    [issue] = fsck(store)
    assert issue.key.endswith(f"{orphan.plan_id}.json") and "orphan of an interrupted publish" in issue.problem
    assert "plans gc --inventory inv" in issue.fix


def test_gc_removes_orphans_after_the_grace_period_and_nothing_named(store: LocalPlanStore) -> None:
    root = Path(store.location)
    named = sorted(str(p.relative_to(root)) for p in root.rglob("*.json*"))
    plan_only, with_checksum = make_plan(overall=6.0), make_plan(overall=5.0)
    interrupted_publish(store, plan_only, 1)
    interrupted_publish(store, with_checksum, 2)
    stray = root / "plans/inv" / FP / "gone.json.sha256"
    stray.write_text("00  gone.json\n")
    age_everything(root, 2 * HOUR)
    code, out, err = cli("plans", "gc", "--store", store.location)
    assert code == 0, err
    assert "3 orphan(s) removed, 0 kept" in out and plan_only.plan_id in out and with_checksum.plan_id in out
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*.json*")) == named  # every named object stays
    current = get_current(store, "inv").best_costs
    assert fsck(store) == [] and current is not None and current.overall_ms == 7.0
    assert cli("plans", "list", "--store", store.location)[2] == ""


def test_within_the_grace_period_it_is_in_flight_or_orphan_and_kept(store: LocalPlanStore) -> None:
    orphan = make_plan(overall=6.0)
    interrupted_publish(store, orphan, 2)
    code, _, err = cli("plans", "list", "--store", store.location)
    assert code == 0 and err.startswith("in flight or orphan: ") and "within the grace period" in err
    code, out, _ = cli("plans", "gc", "--store", store.location)
    assert code == 0 and "0 orphan(s) removed, 1 kept" in out and "younger than 60 min" in out
    assert store.exists(f"plans/inv/{FP}/{orphan.plan_id}.json")
    code, out, _ = cli("plans", "gc", "--store", store.location, "--grace-minutes", "0", "--dry-run")
    assert code == 0 and "would remove" in out and store.exists(f"plans/inv/{FP}/{orphan.plan_id}.json")
    assert cli("plans", "gc", "--store", store.location, "--grace-minutes", "0")[0] == 0
    assert not store.exists(f"plans/inv/{FP}/{orphan.plan_id}.json") and fsck(store) == []


def test_a_plan_the_pointer_names_is_never_an_orphan(store: LocalPlanStore) -> None:
    """Records deleted by hand: the current plan and one in the pointer's history have no record, and are kept."""
    root = Path(store.location)
    for record in root.rglob("*.json.record"):
        if "rejected" not in str(record):
            record.unlink()
    age_everything(root, 2 * HOUR)
    assert find_orphans(store, grace_minutes=0) == []
    assert remove_orphans(store, grace_minutes=0).removed == ()
    assert len(list(root.rglob("*.json"))) == 5  # three plans, the rejected one, the pointer
    rollback(store, "inv")
    back = get_current(store, "inv").best_costs
    assert back is not None and back.overall_ms == 8.0


def test_a_corrupt_named_plan_stays_corrupt_and_exit_1(store: LocalPlanStore) -> None:
    """A plan its record names, with bytes that fail its checksum: CORRUPT (exit 1), never removed."""
    root = Path(store.location)
    listed = scan_plans(store, "inv").records
    first = next(r for r in listed if r.status == "approved" and not r.is_current)
    (root / first.key).write_text((root / first.key).read_text().replace('"dreamshard"', '"dreamsharp"'))
    (root / (first.key + ".record")).write_text((root / (first.key + ".record")).read_text())
    age_everything(root, 2 * HOUR)
    code, out, err = cli("plans", "list", "--store", store.location)
    assert code == 1 and "CORRUPT" in out and "checksum mismatch" in err and "orphan" not in err
    assert remove_orphans(store, grace_minutes=0).removed == () and (root / first.key).exists()


def test_a_plan_without_record_under_a_corrupt_pointer_is_kept(store: LocalPlanStore) -> None:
    """An unreadable pointer may name any plan: nothing of that inventory is an orphan."""
    orphan = make_plan(overall=6.0)
    interrupted_publish(store, orphan, 1)
    (Path(store.location) / "plans/inv/current.json").write_text("{corrupt")
    age_everything(Path(store.location), 2 * HOUR)
    assert find_orphans(store, grace_minutes=0) == []
    assert remove_orphans(store, grace_minutes=0).removed == ()
    assert store.exists(f"plans/inv/{FP}/{orphan.plan_id}.json")


def test_a_record_without_its_plan_is_an_orphan_and_no_decision(store: LocalPlanStore) -> None:
    """A record whose plan is gone can verify and load nothing: fsck names `plans gc`, gc removes it once past the
    grace period, and the plan id is decided afresh when published again."""
    worse_ref = next(r for r in scan_plans(store, "inv").records if r.status == "rejected")
    worse = Plan.model_validate_json(Path(store.location, worse_ref.key).read_bytes())
    Path(store.location, worse_ref.key).unlink()
    Path(store.location, worse_ref.key + ".sha256").unlink()
    [issue] = fsck(store, grace_minutes=0)
    assert issue.key == worse_ref.key + ".record" and "a record without its plan" in issue.problem
    assert "plans gc --inventory inv" in issue.fix
    assert remove_orphans(store).kept[0].key == issue.key  # within the grace period: in flight or orphan, kept
    age_everything(Path(store.location), 2 * HOUR)
    [gone] = remove_orphans(store, grace_minutes=0).removed
    assert gone.leftovers == (worse_ref.key + ".record",) and fsck(store) == []
    ref = publish_or_reject(store, worse, evaluate_gate(worse, {"size_greedy": 10.0}, 0.0))
    assert not ref.already_decided and ref.status == "rejected" and fsck(store) == []


@pytest.mark.parametrize("grace", ["-1", "nan", "inf"])
def test_a_bad_grace_period_is_one_line(store: LocalPlanStore, grace: str) -> None:
    code, _, err = cli("plans", "gc", "--store", store.location, "--grace-minutes", grace)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--grace-minutes" in err, err
