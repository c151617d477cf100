"""Attacks on a local plan store's layout: a folder or file replaced by a link out of the store (reads refused in
one line naming the link, a publish writes nothing inside or outside, `plans fsck` reports it), link loops, a FIFO
pointer, and what the layout cannot hold (`plans/<inventory>` a file, a foreign folder in it, `plans/` a file,
`current.json` a folder): `plans fsck` reports each with a fix, among every other finding; `plans list` lists what it
can and names each path it cannot read through (`skipped: KEY: why (fix: ...)`, exit 1). The files: `store`, holding
one published plan (tests/store_helpers.make_plan) of inventory 'inv'."""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import pytest
from harness import Case, Holds, Result, Table, changes, cli, one_line, snap
from store_helpers import FP, approve, damaged_store, make_plan

from dreamshard.errors import StorePathError
from dreamshard.store import LocalPlanStore, fsck, get_current, list_plans, publish, push_inventory

#: The parts of a published plan's path a link can replace.
LINKED = ("plans/inv", f"plans/inv/{FP}", "plans/inv/current.json")


def world(d: Path) -> None:
    plan = make_plan()
    publish(LocalPlanStore(d / "store"), plan, approve(plan))


def _link_out(root: Path, rel: str, outside: Path) -> Path:
    """Move `rel` out of the store and leave a link to it in its place (what the hostile user did)."""
    outside.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(root / rel), str(outside))
    (root / rel).symlink_to(outside, target_is_directory=outside.is_dir())
    return outside


def _publish_refused(root: Path, match: str) -> None:
    other = make_plan(overall=5.0)
    with pytest.raises(StorePathError, match=match):
        publish(LocalPlanStore(root), other, approve(other))


def _fsck_reports(root: Path, key: str, needle: str = "", *only: str) -> None:
    r = cli(["plans", "fsck", "--store", str(root), *only])
    line = next((x for x in r.out.splitlines() if x.startswith(f"{key}: ")), "")
    assert r.code == 1 and "(fix: " in line and needle in line and "clean" not in r.out, r


def _skips(r: Result, key: str, *needles: str) -> None:
    """`plans list` on a store it cannot wholly read: exit 1, no traceback, what it could read on stdout and one
    `skipped:` line naming `key` (and its fix) on stderr."""
    assert r.code == 1 and "Traceback" not in r.out + r.err, r
    lines = [x for x in r.err.splitlines() if x.startswith("skipped: ")]
    assert len(lines) == 1 and lines[0].startswith(f"skipped: {key}: ") and "(fix: " in lines[0], r.err
    assert all(n in lines[0] for n in needles) and "no plans stored yet" not in r.out, r


def _linked_out(rel: str) -> Holds:
    def check(work: Path) -> None:
        root = work / "store"
        plan = get_current(LocalPlanStore(root), "inv")
        _link_out(root, rel, work / "elsewhere" / Path(rel).name)
        before = snap(work)
        s = ["--store", "store"]
        one_line(cli(["plans", "show", "current", "--inventory", "inv", *s]), rel, "out of the plan store")
        listed = cli(["plans", "list", *s])
        _skips(listed, rel, "out of the plan store")
        assert (plan.plan_id in listed.out) == rel.endswith("current.json"), listed.out  # the plan, if readable
        one_line(cli(["plans", "rollback", "--inventory", "inv", "--to", plan.plan_id, *s]), rel)
        for only in ([], ["--inventory", "inv"]):
            _fsck_reports(root, rel, "a link out of the plan store", *only)
        with pytest.raises(StorePathError, match="out of the plan store"):
            get_current(LocalPlanStore(root), "inv")
        _publish_refused(root, "out of the plan store")
        assert not changes(before, snap(work))

    return Holds(
        f"{rel.replace(FP, '<fingerprint>')} a link out of the store: read, listed, rolled back, published", check
    )


def _inventory_folder_linked_out(work: Path) -> None:
    from dreamshard.documents import save_inventory
    from dreamshard.inventory.synth import synth_inventory

    root = work / "inv-store"
    save_inventory(synth_inventory(4, 0, name="inv"), work / "inv.yaml")
    assert cli(["inventory", "push", "inv.yaml", "--store", "inv-store", "--no-event"]).code == 0
    _link_out(root, "inventories/inv", work / "elsewhere" / "inv")
    save_inventory(synth_inventory(5, 0, name="inv"), work / "inv2.yaml")
    before = snap(work)
    one_line(cli(["inventory", "push", "inv2.yaml", "--store", "inv-store", "--no-event"]), "inventories/inv")
    with pytest.raises(StorePathError, match="inventories/inv"):
        push_inventory(LocalPlanStore(root), synth_inventory(5, 0, name="inv"))
    assert [i.key for i in fsck(LocalPlanStore(root))] == ["inventories/inv"]
    _fsck_reports(root, "inventories/inv", "link out of the plan store")
    assert not changes(before, snap(work))


def _lock_folder_linked_out(work: Path) -> None:
    root = work / "lock-store"
    root.mkdir()
    (work / "locks").mkdir()
    (root / ".locks").symlink_to(work / "locks", target_is_directory=True)
    _publish_refused(root, ".locks")
    assert list((work / "locks").iterdir()) == [] and snap(root) == {".locks": f"link to {work / 'locks'}"}
    _fsck_reports(root, ".locks", "link out of the plan store")


def _link_inside(work: Path) -> None:
    root = work / "store"
    plan = get_current(LocalPlanStore(root), "inv")
    (root / "plans/alias").symlink_to(root / "plans/inv", target_is_directory=True)
    assert get_current(LocalPlanStore(root), "inv") == plan
    issues = fsck(LocalPlanStore(root))
    assert [i.key for i in issues] == ["plans/alias"] and "link" in issues[0].problem and issues[0].fix


def _link_loop(work: Path) -> None:
    root = work / "store"
    (root / "plans/loop").symlink_to(root / "plans/loop")
    (root / "plans/inv/current.json").unlink()
    (root / "plans/inv/current.json").symlink_to(root / "plans/inv/current.json")
    with pytest.raises(StorePathError, match="link loop"):
        get_current(LocalPlanStore(root), "inv")
    assert {i.key for i in fsck(LocalPlanStore(root))} >= {"plans/loop", "plans/inv/current.json"}


def _inventory_is_a_file(work: Path) -> None:
    root = work / "file-store"
    (root / "plans").mkdir(parents=True)
    (root / "plans/inv").write_text("not a folder")
    _fsck_reports(root, "plans/inv")
    _skips(cli(["plans", "list", "--store", str(root), "--inventory", "inv"]), "plans/inv")


def _foreign_folders(work: Path) -> None:
    root = work / "store"
    (root / "plans/inv/junk/deeper").mkdir(parents=True)
    (root / "plans/inv/junk/notes.txt").write_text("x")
    (root / "plans/inv/empty").mkdir()
    (root / f"plans/inv/{FP}/sub").mkdir()
    (root / f"plans/inv/{FP}/sub/p.json").write_text("{}")
    keys = {i.key for i in fsck(LocalPlanStore(root))}
    expected = {"plans/inv/junk/notes.txt", "plans/inv/junk/deeper", "plans/inv/empty", f"plans/inv/{FP}/sub/p.json"}
    assert keys == expected
    r = cli(["plans", "fsck", "--store", "store"])
    assert r.code == 1 and r.out.count("fix:") == 4, r
    _fsck_reports(root, "plans/inv/empty", "empty")


def _plans_is_a_file(work: Path) -> None:
    root = work / "file-store"
    root.mkdir()
    (root / "plans").write_text("not a folder")
    _skips(cli(["plans", "list", "--store", str(root)]), "plans", "a file where the store keeps a folder")
    r = cli(["plans", "fsck", "--store", str(root)])
    assert r.code == 1 and r.out.startswith("plans: ") and "fix:" in r.out, r
    _publish_refused(root, "plans")
    assert snap(root) == {"plans": b"not a folder"}


def _pointer_is_a_folder(work: Path) -> None:
    root = work / "store"
    (root / "plans/inv/current.json").unlink()
    (root / "plans/inv/current.json").mkdir()
    before = snap(work)
    _skips(cli(["plans", "list", "--store", "store"]), "plans/inv/current.json", "folder")
    one_line(cli(["plans", "show", "current", "--inventory", "inv", "--store", "store"]), "plans/inv/current.json")
    _fsck_reports(root, "plans/inv/current.json", "folder")
    _publish_refused(root, "current.json")
    assert not changes(before, snap(work))


def _pointer_is_a_fifo(work: Path) -> None:
    root = work / "store"
    pointer = root / "plans/inv/current.json"
    pointer.unlink()
    os.mkfifo(pointer)
    got: list[BaseException | None] = []

    def read() -> None:
        try:
            get_current(LocalPlanStore(root), "inv")
            got.append(None)
        except BaseException as e:  # noqa: BLE001 - handed to the test thread
            got.append(e)

    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(10)
    if t.is_alive():  # unblock the reader before failing
        with open(pointer, "wb"):
            pass
        pytest.fail("reading a FIFO pointer blocked")
    assert isinstance(got[0], StorePathError) and "not a regular file" in str(got[0])
    assert [i.key for i in fsck(LocalPlanStore(root))] == ["plans/inv/current.json"]


def _every_finding(work: Path) -> None:
    """A rewritten plan, a deleted and a garbled record, and one plan file a link out of the
    store. `plans fsck` reports all four in one pass (the link did hide the other three); `plans list` lists the
    four plans it can read (the rewritten one CORRUPT) and names the link."""
    root = work / "damaged"
    damaged = damaged_store(root, work / "elsewhere" / "p.json")
    issues = fsck(LocalPlanStore(root))
    found = {i.key: i.problem for i in issues}
    assert set(found) == set(damaged.values()) and "a link out" in found[damaged["link"]], issues
    r = cli(["plans", "fsck", "--store", "damaged"])
    assert r.code == 1 and r.out.rstrip().endswith(f"{len(issues)} problem(s) in {root}"), r.out
    for key in damaged.values():
        assert any(x.startswith(f"{key}: ") and "(fix: " in x for x in r.out.splitlines()), (key, r.out)
    listed = cli(["plans", "list", "--store", "damaged"])
    _skips(listed, damaged["link"], "out of the plan store")
    assert listed.out.count("plan-") == 4 and listed.out.count("CORRUPT") == 1, listed.out
    assert f"CORRUPT {damaged['rewritten']}: checksum mismatch" in listed.err
    (root / damaged["link"]).unlink()  # the link removed: the other three are still all found
    assert {i.key for i in fsck(LocalPlanStore(root))} >= set(damaged.values()) - {damaged["link"]}


def _clean(work: Path) -> None:
    store = LocalPlanStore(work / "store")
    assert fsck(store) == [] and len(list_plans(store)) == 1
    assert cli(["plans", "fsck", "--store", "store"]).code == 0


def _cases() -> list[Case]:
    return [
        *(_linked_out(rel) for rel in LINKED),
        Holds(
            "inventories/<inventory> a link out of the store: push refused, fsck reports it",
            _inventory_folder_linked_out,
        ),
        Holds(".locks a link out of the store: publish refused before writing", _lock_folder_linked_out),
        Holds("a link inside the store: read, and fsck reports the linked folder", _link_inside),
        Holds("link loops: refused and reported", _link_loop),
        Holds("plans/<inventory> is a file: fsck reports it, plans list names it", _inventory_is_a_file),
        Holds("plans/<inventory> holds foreign folders and files: fsck reports each", _foreign_folders),
        Holds("plans/ is a file: listed, reported and published as one line", _plans_is_a_file),
        Holds("current.json (the pointer) is a folder", _pointer_is_a_folder),
        Holds("current.json (the pointer) is a FIFO: refused without blocking", _pointer_is_a_fifo),
        Holds("a link among other damage: fsck finds all, list lists the rest and names the link", _every_finding),
        Holds("a clean store is still clean", _clean),
    ]


TABLE = Table("store layout", _cases(), world)
