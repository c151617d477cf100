"""What a damaged store tells its readers: `plans fsck` reports every finding in one pass, `plans list`
lists what it can and names what it cannot read through, `plans show` verifies a plan against its record and the
pointer as `plans rollback` does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from store_helpers import FP, approve, damaged_store, make_plan, sibling

from dreamshard.cli.app import invoke
from dreamshard.errors import StorePathError
from dreamshard.store import LocalPlanStore, fsck, list_plans, publish, scan_plans


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
