"""What a damaged store tells its readers: `plans fsck` reports every finding in one pass, `plans list`
lists what it can and names what it cannot read through, `plans show` verifies a plan against its record and the
pointer as `plans rollback` does."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from conftest import SeaweedS3
from store_helpers import FP, approve, damaged_store, make_plan, sibling

from dreamshard.cli.app import invoke
from dreamshard.errors import StoreError, StorePathError
from dreamshard.gate import evaluate_gate
from dreamshard.store import LocalPlanStore, fsck, list_plans, open_store, publish, reject, scan_plans, show
from dreamshard.store.plans import already_decided


def test_fsck_reports_every_finding_beside_a_link_out(tmp_path: Path) -> None:
    damaged = damaged_store(tmp_path / "store", tmp_path / "elsewhere" / "p.json")
    issues = fsck(LocalPlanStore(tmp_path / "store"))
    assert {i.key for i in issues} == set(damaged.values()), issues
    by_key = {i.key: i for i in issues}
    assert "a link out of the plan store" in by_key[damaged["link"]].problem
    assert "record" in by_key[damaged["deleted record"]].problem
    assert "record" in by_key[damaged["garbled record"]].problem
    assert all(i.fix for i in issues)
    orphans = [i for i in issues if "orphan" in i.problem]
    assert orphans == []  # the linked plan's checksum and record are not orphans: their plan is behind the link


def test_fsck_reads_past_a_record_or_history_entry_that_is_a_link(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = LocalPlanStore(root)
    plans = [make_plan(overall=9.0 - i) for i in range(3)]
    for p in plans:
        publish(store, p, approve(p))
    keys = [f"plans/inv/{FP}/{p.plan_id}.json" for p in plans]
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    for key in (sibling(keys[0], "record"), keys[1]):  # a record, and a plan of the pointer's history
        (outside / Path(key).name).write_bytes((root / key).read_bytes())
        (root / key).unlink()
        (root / key).symlink_to(outside / Path(key).name)
    (root / keys[2]).write_text("{}")  # the current plan rewritten
    found = {i.key for i in fsck(store)}
    assert {sibling(keys[0], "record"), keys[1], keys[2], "plans/inv/current.json"} <= found, found


def test_scan_plans_lists_the_readable_and_names_the_rest(tmp_path: Path) -> None:
    damaged = damaged_store(tmp_path / "store", tmp_path / "elsewhere" / "p.json")
    store = LocalPlanStore(tmp_path / "store")
    listing = scan_plans(store)
    assert [i.key for i in listing.skipped] == [damaged["link"]]
    assert len(listing.records) == 4
    assert [r.key for r in listing.records if r.problem] == [damaged["rewritten"]]
    with pytest.raises(StorePathError, match="out of the plan store"):  # the whole listing, for a library caller
        list_plans(store)


def test_plans_list_cli_skips_a_link_and_lists_the_rest(tmp_path: Path) -> None:
    damaged = damaged_store(tmp_path / "store", tmp_path / "elsewhere" / "p.json")
    code, out, err = invoke(["plans", "list", "--store", str(tmp_path / "store"), "--json"])
    assert code == 1 and "Traceback" not in out + err, err
    assert len(json.loads(out)) == 4
    skipped = [x for x in err.splitlines() if x.startswith("skipped: ")]
    assert len(skipped) == 1 and skipped[0].startswith(f"skipped: {damaged['link']}: a link out of the plan store")
    assert "(fix: replace the link" in skipped[0]


def test_plans_list_cli_on_a_clean_store_exits_0(tmp_path: Path) -> None:
    plan = make_plan()
    publish(LocalPlanStore(tmp_path / "store"), plan, approve(plan))
    code, out, err = invoke(["plans", "list", "--store", str(tmp_path / "store")])
    assert code == 0 and plan.plan_id in out and "skipped" not in err, err


def _rewrite(root: Path, key: str, record_too: bool = False) -> None:
    """The stored plan at `key` edited, its checksum file rewritten to match (and its record's, with `record_too`)."""
    f = root / key
    f.write_text(f.read_text().replace('"dreamshard"', '"dreamsharp"'))
    digest = hashlib.sha256(f.read_bytes()).hexdigest()
    (root / sibling(key, "checksum")).write_text(f"{digest}  {f.name}\n")
    if record_too:
        record = root / sibling(key, "record")
        record.write_text(json.dumps({**json.loads(record.read_text()), "sha256": digest}))


@pytest.fixture
def two(tmp_path: Path) -> tuple[LocalPlanStore, list[str]]:
    """A store with two plans published (the first in the pointer's history): the store and their keys."""
    store = LocalPlanStore(tmp_path / "store")
    plans = [make_plan(overall=9.0), make_plan(overall=8.0)]
    for p in plans:
        publish(store, p, approve(p))
    return store, [p.plan_id for p in plans]


@pytest.mark.parametrize("record_too", [False, True])
def test_show_refuses_a_plan_rewritten_with_its_checksum_file(
    two: tuple[LocalPlanStore, list[str]], record_too: bool
) -> None:
    store, ids = two
    _rewrite(store.root, f"plans/inv/{FP}/{ids[0]}.json", record_too)
    with pytest.raises(StoreError, match=f"plan {ids[0]} .*the object has sha256 .*the pointer's history says"):
        show(store, ids[0])
    code, out, err = invoke(["plans", "show", ids[0], "--store", str(store.root)])
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and ids[0] in err, (code, out, err)
    assert show(store, ids[1]).plan_id == ids[1]  # the untouched plan is still shown
    assert [r.plan_id for r in list_plans(store) if r.problem] == [ids[0]]  # and listed as it is shown


def test_show_refuses_a_rejected_plan_rewritten_against_its_record(tmp_path: Path) -> None:
    store = LocalPlanStore(tmp_path / "store")
    plan = make_plan()
    decision = evaluate_gate(plan, {"size_greedy": 1.0}, 0.0)
    assert not decision.approved
    ref = reject(store, plan, decision)
    assert show(store, plan.plan_id) == plan
    _rewrite(store.root, ref.key)
    with pytest.raises(StoreError, match=f"plan {plan.plan_id} .*the object has sha256 .*its record says"):
        show(store, plan.plan_id)
    (store.root / sibling(ref.key, "record")).unlink()  # no record, never current: nothing to verify it against
    with pytest.raises(StoreError, match="no readable record and was never current"):
        show(store, plan.plan_id)


def test_publishing_a_decided_id_again_verifies_the_stored_plan_against_its_record(tmp_path: Path) -> None:
    """Before, `already_decided` read the stored plan against its checksum file only: a plan rewritten together
    with that file answered "already decided" with the edited content."""
    store = LocalPlanStore(tmp_path / "store")
    plan = make_plan()
    publish(store, plan, approve(plan))
    assert already_decided(store, plan) is not None
    _rewrite(store.root, f"plans/inv/{FP}/{plan.plan_id}.json")
    with pytest.raises(StoreError, match=f"plan {plan.plan_id} .*the object has sha256"):
        already_decided(store, plan)


@pytest.mark.integration
def test_s3_store_show_verifies_and_list_and_fsck_tell_all(s3_env: SeaweedS3, s3_prefix: str) -> None:
    """The same on S3 (a real SeaweedFS): an object store has no path to skip; show refuses a plan rewritten with
    its checksum object; list and fsck name it."""
    store = open_store(f"s3://{s3_env.bucket}/{s3_prefix}")
    plans = [make_plan(overall=9.0), make_plan(overall=8.0)]
    refs = [publish(store, p, approve(p)) for p in plans]
    data = store.get_bytes(refs[0].key).replace(b'"dreamshard"', b'"dreamsharp"')
    store.put_bytes(refs[0].key, data)
    store.put_bytes(sibling(refs[0].key, "checksum"), f"{hashlib.sha256(data).hexdigest()}  x\n".encode())
    with pytest.raises(StoreError, match=f"for plan {plans[0].plan_id} .*the pointer's history says"):
        show(store, plans[0].plan_id)
    assert show(store, plans[1].plan_id) == plans[1]
    listing = scan_plans(store)
    assert listing.skipped == [] and len(listing.records) == 2
    assert {i.key for i in fsck(store)} == {refs[0].key}
