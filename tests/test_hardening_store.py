"""Issue 18 items 11 and 12: a local plan store never follows a link out of itself, and `plans fsck` / `plans list`
see what the layout does not hold (a file where a folder belongs, a folder where an object belongs, debris)."""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import pytest
from store_helpers import FP, approve, make_plan

from dreamshard.cli.app import invoke as cli
from dreamshard.errors import StorePathError
from dreamshard.inventory.synth import synth_inventory
from dreamshard.store import LocalPlanStore, fsck, get_current, list_plans, publish, push_inventory
from dreamshard.values import Plan


def snap(d: Path) -> dict[str, bytes]:
    """Every file under `d` (following no link), with its bytes."""
    out: dict[str, bytes] = {}
    for dirpath, _dirs, files in os.walk(d):
        for name in files:
            p = Path(dirpath) / name
            if not p.is_symlink():
                out[str(p.relative_to(d))] = p.read_bytes()
    return out


def one_line_2(r: tuple[int, str, str], needle: str = "") -> bool:
    lines = r[2].strip().splitlines()
    return r[0] == 2 and len(lines) == 1 and "Traceback" not in r[2] and needle in r[2]


@pytest.fixture
def published(tmp_path: Path) -> tuple[Path, Plan]:
    root = tmp_path / "store"
    plan = make_plan()
    publish(LocalPlanStore(root), plan, approve(plan))
    return root, plan


def _link_out(root: Path, rel: str, outside: Path) -> Path:
    """Move `rel` out of the store and leave a link to it in its place (what the hostile user did)."""
    outside.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(root / rel), str(outside))
    (root / rel).symlink_to(outside, target_is_directory=outside.is_dir())
    return outside


LINKED = ["plans/inv", f"plans/inv/{FP}", "plans/inv/current.json"]


# -- 18.11: links out of the store ------------------------------------------------------------------------
@pytest.mark.parametrize("rel", LINKED)
def test_reads_through_a_link_out_of_the_store_are_refused(
    published: tuple[Path, Plan], tmp_path: Path, rel: str
) -> None:
    root, plan = published
    _link_out(root, rel, tmp_path / "elsewhere" / Path(rel).name)
    s = ["--store", str(root)]
    r = cli(["plans", "show", "current", "--inventory", "inv", *s])
    assert one_line_2(r, rel) and "out of the plan store" in r[2], r
    r = cli(["plans", "list", *s])
    assert one_line_2(r, rel) and "no plans stored yet" not in r[1], r
    for only in ([], ["--inventory", "inv"]):
        r = cli(["plans", "fsck", *s, *only])
        assert r[0] == 1 and f"{rel}: a link out of the plan store" in r[1] and "clean" not in r[1], r
    r = cli(["plans", "rollback", "--inventory", "inv", "--to", plan.plan_id, *s])
    assert one_line_2(r, rel), r
    with pytest.raises(StorePathError, match="out of the plan store"):
        get_current(LocalPlanStore(root), "inv")


@pytest.mark.parametrize("rel", LINKED)
def test_writes_through_a_link_out_of_the_store_are_refused(
    published: tuple[Path, Plan], tmp_path: Path, rel: str
) -> None:
    root, _ = published
    outside = _link_out(root, rel, tmp_path / "elsewhere" / Path(rel).name)
    before, before_out = snap(root), snap(outside.parent)
    other = make_plan(overall=5.0)
    with pytest.raises(StorePathError, match="out of the plan store"):
        publish(LocalPlanStore(root), other, approve(other))
    assert snap(root) == before and snap(outside.parent) == before_out


def test_an_inventory_folder_linked_out_is_refused_on_push_and_reported(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = LocalPlanStore(root)
    inv = synth_inventory(4, 0, name="inv")
    push_inventory(store, inv)
    outside = _link_out(root, "inventories/inv", tmp_path / "elsewhere" / "inv")
    before = snap(outside.parent)
    with pytest.raises(StorePathError, match="inventories/inv"):
        push_inventory(store, synth_inventory(5, 0, name="inv"))
    assert snap(outside.parent) == before
    assert [i.key for i in fsck(store)] == ["inventories/inv"]


def test_the_lock_folder_linked_out_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "store"
    (tmp_path / "locks").mkdir()
    root.mkdir()
    (root / ".locks").symlink_to(tmp_path / "locks", target_is_directory=True)
    plan = make_plan()
    with pytest.raises(StorePathError, match=".locks"):
        publish(LocalPlanStore(root), plan, approve(plan))
    assert list((tmp_path / "locks").iterdir()) == [] and snap(root) == {}  # refused before anything is written


def test_a_link_inside_the_store_is_read_but_fsck_reports_a_linked_folder(published: tuple[Path, Plan]) -> None:
    root, plan = published
    (root / "plans/alias").symlink_to(root / "plans/inv", target_is_directory=True)
    store = LocalPlanStore(root)
    assert get_current(store, "inv") == plan
    issues = fsck(store)
    assert [i.key for i in issues] == ["plans/alias"] and "link" in issues[0].problem and issues[0].fix


def test_a_link_loop_is_refused_and_reported(published: tuple[Path, Plan]) -> None:
    root, _ = published
    (root / "plans/loop").symlink_to(root / "plans/loop")
    (root / "plans/inv/current.json").unlink()
    (root / "plans/inv/current.json").symlink_to(root / "plans/inv/current.json")
    with pytest.raises(StorePathError, match="link loop"):
        get_current(LocalPlanStore(root), "inv")
    assert {i.key for i in fsck(LocalPlanStore(root))} >= {"plans/loop", "plans/inv/current.json"}


# -- 18.12: what fsck and list did not see ------------------------------------------------------------------
def test_an_inventory_that_is_a_file_is_an_fsck_finding(tmp_path: Path) -> None:
    root = tmp_path / "store"
    (root / "plans").mkdir(parents=True)
    (root / "plans/inv").write_text("not a folder")
    r = cli(["plans", "fsck", "--store", str(root)])
    assert r[0] == 1 and "plans/inv:" in r[1] and "fix:" in r[1], r
    r = cli(["plans", "list", "--store", str(root), "--inventory", "inv"])
    assert one_line_2(r, "plans/inv"), r


def test_a_foreign_folder_in_an_inventory_is_an_fsck_finding(published: tuple[Path, Plan]) -> None:
    root, _ = published
    (root / "plans/inv/junk/deeper").mkdir(parents=True)
    (root / "plans/inv/junk/notes.txt").write_text("x")
    (root / "plans/inv/empty").mkdir()
    (root / f"plans/inv/{FP}/sub").mkdir()
    (root / f"plans/inv/{FP}/sub/p.json").write_text("{}")
    keys = {i.key for i in fsck(LocalPlanStore(root))}
    assert keys == {
        "plans/inv/junk/notes.txt",
        "plans/inv/junk/deeper",
        "plans/inv/empty",
        f"plans/inv/{FP}/sub/p.json",
    }
    r = cli(["plans", "fsck", "--store", str(root)])
    assert r[0] == 1 and r[1].count("fix:") == 4, r


def test_plans_folder_that_is_a_file(tmp_path: Path) -> None:
    root = tmp_path / "store"
    root.mkdir()
    (root / "plans").write_text("not a folder")
    r = cli(["plans", "list", "--store", str(root)])
    assert one_line_2(r, "plans") and "no plans stored yet" not in r[1], r
    r = cli(["plans", "fsck", "--store", str(root)])
    assert r[0] == 1 and r[1].startswith("plans: ") and "fix:" in r[1], r
    plan = make_plan()
    with pytest.raises(StorePathError, match="plans"):
        publish(LocalPlanStore(root), plan, approve(plan))
    assert snap(root) == {"plans": b"not a folder"}


def test_a_pointer_that_is_a_folder(published: tuple[Path, Plan]) -> None:
    root, _ = published
    (root / "plans/inv/current.json").unlink()
    (root / "plans/inv/current.json").mkdir()
    s = ["--store", str(root)]
    r = cli(["plans", "list", *s])
    assert one_line_2(r, "plans/inv/current.json"), r
    r = cli(["plans", "show", "current", "--inventory", "inv", *s])
    assert one_line_2(r, "plans/inv/current.json"), r
    r = cli(["plans", "fsck", *s])
    assert r[0] == 1 and "plans/inv/current.json: " in r[1] and "folder" in r[1] and "fix:" in r[1], r
    before = snap(root)
    other = make_plan(overall=5.0)
    with pytest.raises(StorePathError, match="current.json"):
        publish(LocalPlanStore(root), other, approve(other))
    assert snap(root) == before


def test_a_pointer_that_is_a_fifo_is_refused_without_blocking(published: tuple[Path, Plan]) -> None:
    root, _ = published
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


def test_a_clean_store_is_still_clean(published: tuple[Path, Plan]) -> None:
    root, plan = published
    store = LocalPlanStore(root)
    assert fsck(store) == [] and [r.plan_id for r in list_plans(store)] == [plan.plan_id]
    assert cli(["plans", "fsck", "--store", str(root)])[0] == 0
