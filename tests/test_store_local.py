"""LocalPlanStore + publishing: versioned keys, checksums, current pointer, rollback, rejected plans."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from store_helpers import FP, approve, make_plan, publish_or_reject, sibling

from dreamshard.errors import PlanError, StoreError
from dreamshard.gate import evaluate_gate
from dreamshard.store import (
    LocalPlanStore,
    get_current,
    get_pointer,
    list_plans,
    open_store,
    publish,
    reject,
    rollback,
    show,
)
from dreamshard.store.keys import plan_key
from dreamshard.store.s3 import S3PlanStore


@pytest.fixture
def store(tmp_path: Path) -> LocalPlanStore:
    return LocalPlanStore(tmp_path / "store")


def test_publish_writes_versioned_key_checksum_and_pointer(store: LocalPlanStore) -> None:
    plan = make_plan()
    ref = publish(store, plan, approve(plan))
    assert ref.key == f"plans/inv/{FP}/{plan.plan_id}.json" and ref.is_current
    data = (store.root / ref.key).read_bytes()
    import hashlib

    assert hashlib.sha256(data).hexdigest() == ref.sha256
    assert (store.root / sibling(ref.key, "checksum")).read_text().split()[0] == ref.sha256
    pointer = json.loads((store.root / "plans/inv/current.json").read_text())
    assert pointer["plan_id"] == plan.plan_id and pointer["sha256"] == ref.sha256
    assert pointer["key"] == ref.key and pointer["fingerprint"] == FP and pointer["previous"] is None
    assert get_current(store, "inv") == plan


def test_current_moves_and_list_marks_it(store: LocalPlanStore) -> None:
    p1, p2 = make_plan(overall=9.0), make_plan(overall=8.0)
    publish(store, p1, approve(p1))
    publish(store, p2, approve(p2))
    assert get_current(store, "inv").plan_id == p2.plan_id
    pointer = get_pointer(store, "inv")
    assert pointer is not None and pointer.previous is not None and pointer.previous.plan_id == p1.plan_id
    records = list_plans(store, "inv")
    assert [r.plan_id for r in records] == [p1.plan_id, p2.plan_id]
    assert [r.is_current for r in records] == [False, True]
    assert records[1].overall_ms == 8.0 and records[1].basis == "measured" and records[1].status == "approved"
    assert show(store, p1.plan_id) == p1


def test_rollback_to_previous_and_to_given_plan(store: LocalPlanStore) -> None:
    plans = [make_plan(overall=10.0 - i) for i in range(3)]
    for p in plans:
        publish(store, p, approve(p))
    assert rollback(store, "inv").plan_id == plans[1].plan_id
    assert get_current(store, "inv") == plans[1]
    assert rollback(store, "inv").plan_id == plans[0].plan_id
    with pytest.raises(StoreError, match="no previous version"):
        rollback(store, "inv")
    assert rollback(store, "inv", to_plan_id=plans[2].plan_id).action == "rollback"
    assert get_current(store, "inv") == plans[2]
    with pytest.raises(StoreError, match="already current"):
        rollback(store, "inv", to_plan_id=plans[2].plan_id)
    # nothing was deleted
    assert len(list_plans(store, "inv")) == 3


def test_plans_a_rollback_undid_were_current_once_and_fsck_says_nothing(store: LocalPlanStore) -> None:
    from dreamshard.store import fsck, get_pointer

    plans = [make_plan(overall=10.0 - i) for i in range(3)]
    for p in plans:
        publish(store, p, approve(p))
    rollback(store, "inv")
    rollback(store, "inv")  # current: plans[0]; plans[2] and plans[1] were current once, not interrupted publishes
    assert [e.plan_id for e in get_pointer(store, "inv").rolled_back] == [plans[1].plan_id, plans[2].plan_id]
    assert fsck(store, "inv") == []
    rollback(store, "inv", to_plan_id=plans[2].plan_id)  # a rolled-back version can come back
    pointer = get_pointer(store, "inv")
    assert [e.plan_id for e in pointer.rolled_back] == [plans[1].plan_id]
    assert [e.plan_id for e in pointer.history] == [plans[0].plan_id] and fsck(store, "inv") == []
    # a rolled-back version that was modified since is caught by its original checksum, and never offered
    key = plan_key("inv", FP, plans[1].plan_id)
    (store.root / key).write_text((store.root / key).read_text().replace("10.0", "1.0"))
    (store.root / sibling(key, "checksum")).write_text("0" * 64)
    with pytest.raises(StoreError, match="modified"):
        rollback(store, "inv", to_plan_id=plans[1].plan_id)
    assert all("rollback" not in i.fix or plans[1].plan_id not in i.fix for i in fsck(store, "inv"))


def test_rejected_plan_is_kept_with_reason_and_never_current(store: LocalPlanStore) -> None:
    good = make_plan(overall=5.0)
    publish(store, good, approve(good))
    bad = make_plan(overall=20.0)
    decision = evaluate_gate(bad, {"size_greedy": 10.0}, 0.0)
    ref = publish_or_reject(store, bad, decision)
    assert ref.status == "rejected" and not ref.is_current
    assert ref.key == f"plans/inv/{FP}/rejected/{bad.plan_id}.json"
    assert get_current(store, "inv") == good
    rec = {r.plan_id: r for r in list_plans(store, "inv")}[bad.plan_id]
    assert rec.status == "rejected" and "does not beat" in rec.reason and not rec.is_current
    record = json.loads((store.root / sibling(ref.key, "record")).read_text())
    assert record["status"] == "rejected" and record["gate"]["approved"] is False
    with pytest.raises(StoreError, match="rejected by the gate"):
        rollback(store, "inv", to_plan_id=bad.plan_id)
    with pytest.raises(PlanError, match="not approved"):
        publish(store, bad, decision)
    with pytest.raises(PlanError, match="approved"):
        reject(store, good, approve(good))
    assert show(store, bad.plan_id) == bad


def test_corrupted_plan_is_detected_on_read(store: LocalPlanStore) -> None:
    plan = make_plan()
    ref = publish(store, plan, approve(plan))
    path = store.root / ref.key
    path.write_text(path.read_text().replace('"dreamshard"', '"evil"'))
    for read in (lambda: get_current(store, "inv"), lambda: show(store, plan.plan_id)):
        with pytest.raises(StoreError) as e:
            read()
        msg = str(e.value)
        assert "checksum mismatch" in msg and ref.key in msg and "\n" not in msg


def test_rollback_refuses_corrupt_previous_version(store: LocalPlanStore) -> None:
    p1, p2 = make_plan(), make_plan()
    r1 = publish(store, p1, approve(p1))
    publish(store, p2, approve(p2))
    (store.root / r1.key).write_text("{}")
    with pytest.raises(StoreError, match="checksum mismatch"):
        rollback(store, "inv")
    assert get_current(store, "inv") == p2


def test_errors_are_one_line(store: LocalPlanStore) -> None:
    with pytest.raises(StoreError, match="no current plan for inventory 'inv'"):
        get_current(store, "inv")
    with pytest.raises(StoreError, match="no plan 'plan-x'"):
        show(store, "plan-x")
    with pytest.raises(StoreError, match="inventory name 'a b'"):
        publish(store, make_plan(inventory="a b"), approve(make_plan()).model_copy(update={"plan_id": ""}))
    (store.root / "plans/inv").mkdir(parents=True)
    (store.root / "plans/inv/current.json").write_text("{not json")
    with pytest.raises(StoreError, match="not a valid pointer"):
        get_current(store, "inv")


def test_republishing_same_plan_is_idempotent(store: LocalPlanStore) -> None:
    plan = make_plan()
    publish(store, plan, approve(plan))
    publish(store, plan, approve(plan))
    assert len(list_plans(store, "inv")) == 1


def test_several_inventories_and_fingerprints(store: LocalPlanStore) -> None:
    a, b = make_plan(inventory="a"), make_plan(inventory="b", fingerprint="cd" * 32)
    publish(store, a, approve(a))
    publish(store, b, approve(b))
    assert {r.inventory for r in list_plans(store)} == {"a", "b"}
    assert get_current(store, "b").inventory_fingerprint == "cd" * 32


def test_open_store_uris(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert isinstance(open_store(str(tmp_path)), LocalPlanStore)
    assert open_store(f"file://{tmp_path}/x").location == str(tmp_path / "x")  # type: ignore[attr-defined]
    monkeypatch.setenv("DREAMSHARD_S3_ENDPOINT", "http://127.0.0.1:1")
    s3 = open_store("s3://bucket/some/prefix")
    assert isinstance(s3, S3PlanStore)
    assert (s3.bucket, s3.prefix, s3.endpoint_url) == ("bucket", "some/prefix", "http://127.0.0.1:1")
    assert open_store("s3://bucket", endpoint_url="http://h:2").endpoint_url == "http://h:2"  # type: ignore[attr-defined]
    with pytest.raises(StoreError, match="credentials"):
        open_store("s3://KEY:SECRET@bucket/p")
    with pytest.raises(StoreError, match="unsupported"):
        open_store("gs://bucket/p")


# -- the key layout (dreamshard.store.keys) ------------------------------------------------------------------
HOSTILE_IDS = [
    "p",
    "p.record",
    "p.json",
    "p.json.record",
    "p.sha256",
    "p.json.sha256",
    "p.record.json",
    "rejected",
    "current",
    "current.json",
    "records",
]


def test_keys_of_every_kind_are_distinct_and_parse_back() -> None:
    from dreamshard.store.keys import KINDS, PlanKey, current_key, parse_key

    seen: dict[str, PlanKey] = {}
    for fp in (FP, "rejected", "current.json"):
        for plan_id in HOSTILE_IDS:
            for kind in KINDS:
                for status in ("approved", "rejected"):
                    pk = PlanKey("inv", fp, plan_id, kind, status)  # type: ignore[arg-type]
                    assert pk.key not in seen, (pk, seen.get(pk.key))
                    assert parse_key(pk.key) == pk
                    assert plan_key("inv", fp, plan_id, kind, status) == pk.key  # type: ignore[arg-type]
                    seen[pk.key] = pk
    assert current_key("inv") not in seen and parse_key(current_key("inv")) is None
    for junk in (
        "plans/inv/x.json",
        f"plans/inv/{FP}/x.txt",
        f"plans/inv/{FP}/other/x.json",
        f"plans/inv/{FP}/.x.json",
        f"elsewhere/inv/{FP}/x.json",
        f"plans/inv/{FP}/rejected/a/x.json",
        f"plans/inv/{FP}/x..y.json",
        f"plans/inv/{FP}/.json",
        "inventories/inv/current.json",
    ):
        assert parse_key(junk) is None, junk
    with pytest.raises(StoreError, match="plan id"):
        plan_key("inv", FP, "../x")


def test_a_plan_id_ending_in_record_does_not_destroy_another_plan(store: LocalPlanStore) -> None:
    """Plan `p`'s record used to be stored where plan `p.record` lives."""
    from dreamshard.store import fsck

    first = make_plan(overall=9.0).model_copy(update={"plan_id": "p.record"})
    second = make_plan(overall=8.0).model_copy(update={"plan_id": "p"})
    publish(store, first, approve(first))
    publish(store, second, approve(second))
    assert show(store, "p.record") == first and show(store, "p") == second
    assert {r.plan_id: r.problem for r in list_plans(store, "inv")} == {"p.record": "", "p": ""}
    assert rollback(store, "inv", to_plan_id="p.record").plan_id == "p.record"
    assert get_current(store, "inv") == first
    assert fsck(store) == []


def test_hostile_plan_ids_each_keep_their_own_objects(store: LocalPlanStore) -> None:
    from dreamshard.store import fsck

    plans = [make_plan(overall=20.0 - i).model_copy(update={"plan_id": pid}) for i, pid in enumerate(HOSTILE_IDS)]
    for p in plans:
        publish(store, p, approve(p))
    # (not "p.json" itself: that id was approved above, and one plan id gets one decision per inventory version)
    bad = make_plan(overall=50.0).model_copy(update={"plan_id": "rejected.json"})
    publish_or_reject(store, bad, evaluate_gate(bad, {"size_greedy": 10.0}, 0.0))
    files = store.list_keys("plans/")
    assert len(files) == 3 * (len(plans) + 1) + 1  # plan + checksum + record each, and the pointer
    assert [show(store, p.plan_id, "inv") for p in plans] == plans
    assert {(r.plan_id, r.status) for r in list_plans(store) if not r.problem} == {
        (p.plan_id, "approved") for p in plans
    } | {("rejected.json", "rejected")}
    assert fsck(store) == []
    assert rollback(store, "inv", to_plan_id="p").plan_id == "p" and get_current(store, "inv") == plans[0]


def test_a_pointer_naming_another_kind_of_object_is_refused(store: LocalPlanStore) -> None:
    plan = make_plan()
    ref = publish_or_reject(store, plan, evaluate_gate(plan, {"size_greedy": 1.0}, 0.0))  # rejected
    assert ref.status == "rejected"
    good = make_plan(overall=0.5)
    publish(store, good, approve(good))
    pointer_file = store.root / "plans/inv/current.json"
    pointer = json.loads(pointer_file.read_text())
    for forged in (ref.key, sibling(pointer["key"], "record"), f"plans/other/{FP}/{good.plan_id}.json"):
        pointer_file.write_text(json.dumps({**pointer, "key": forged}))
        with pytest.raises(StoreError, match="not a valid pointer"):
            get_current(store, "inv")
    assert rollback(store, "inv", to_plan_id=good.plan_id).key == plan_key("inv", FP, good.plan_id)
    assert get_current(store, "inv") == good
