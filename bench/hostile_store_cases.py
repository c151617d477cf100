"""The plan store's hostile cases (issue 18 items 11 and 12), run by bench/hostile_cases.py.

18.11: a folder or file of a local store replaced by a link to somewhere outside it. A case holds when reads
(`plans show current`, `plans list`, `plans rollback`) are refused with one line (exit 2) naming the link, a
publish writes nothing (inside or outside the store), and `plans fsck` reports the link (exit 1).
18.12: what the layout cannot hold (`plans/<inv>` a file, a foreign folder in it, `plans/` a file, `current.json`
a folder). A case holds when `plans fsck` reports it with a fix (exit 1) and `plans list` gives one line (exit 2)
where it cannot list.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from hostile_cases import one_line_2  # noqa: E402 - bench/ is the script's directory
from store_helpers import FP, approve, make_plan  # noqa: E402 - tests/ is not a package

from dreamshard.cli.app import invoke as cli  # noqa: E402
from dreamshard.documents import save_inventory  # noqa: E402
from dreamshard.errors import StorePathError  # noqa: E402
from dreamshard.inventory.synth import synth_inventory  # noqa: E402
from dreamshard.store import LocalPlanStore, publish  # noqa: E402
from dreamshard.values import Plan  # noqa: E402

Case = Callable[[str, str, str], Callable[[Callable[[], Any]], None]]


def _snap(d: Path) -> dict[str, bytes]:
    """Every plain file under `d` (following no link) with its bytes."""
    out: dict[str, bytes] = {}
    for dirpath, _dirs, files in os.walk(d) if d.exists() else ():
        for name in files:
            p = Path(dirpath) / name
            if not p.is_symlink():
                out[str(p.relative_to(d))] = p.read_bytes()
    return out


def _published(root: Path) -> Plan:
    plan = make_plan()
    publish(LocalPlanStore(root), plan, approve(plan))
    return plan


def _publish_refused(root: Path) -> bool:
    """Publishing another plan raises StorePathError (the CLI's one line) and writes nothing."""
    other = make_plan(overall=5.0)
    try:
        publish(LocalPlanStore(root), other, approve(other))
    except StorePathError:
        return True
    return False


def _fsck_reports(root: Path, key: str, needle: str = "") -> bool:
    r = cli(["plans", "fsck", "--store", str(root)])
    line = next((x for x in r[1].splitlines() if x.startswith(f"{key}: ")), "")
    return r[0] == 1 and "(fix: " in line and needle in line


def cases(d: Path, case: Case) -> None:  # noqa: C901 - one flat list of cases reads best
    d.mkdir(parents=True, exist_ok=True)

    for rel in ("plans/inv", f"plans/inv/{FP}", "plans/inv/current.json"):

        @case(
            "18.11",
            f"{rel.replace(FP, '<fingerprint>')} is a link out of the store",
            "plans show current / list / rollback / fsck; publish",
        )
        def _(rel: str = rel) -> tuple[bool, str]:
            root, outside = d / f"store-{len(rel)}", d / f"outside-{len(rel)}"
            plan = _published(root)
            outside.mkdir()
            target = outside / Path(rel).name
            shutil.move(str(root / rel), str(target))
            (root / rel).symlink_to(target, target_is_directory=target.is_dir())
            before_in, before_out = _snap(root), _snap(outside)
            s = ["--store", str(root)]
            show = cli(["plans", "show", "current", "--inventory", "inv", *s])
            listed = cli(["plans", "list", *s])
            back = cli(["plans", "rollback", "--inventory", "inv", "--to", plan.plan_id, *s])
            ok = (
                one_line_2(show, rel)
                and one_line_2(listed, rel)
                and one_line_2(back, rel)
                and _publish_refused(root)
                and _fsck_reports(root, rel, "link out of the plan store")
                and _snap(root) == before_in
                and _snap(outside) == before_out
            )
            return ok, show[2].strip()[:120]

    @case("18.11", "inventories/<inventory> is a link out of the store", "inventory push inv.yaml; plans fsck")
    def _() -> bool:
        root, outside = d / "store-inventories", d / "outside-inventories"
        invf = save_inventory(synth_inventory(4, 0, name="inv"), d / "inv.yaml")
        cli(["inventory", "push", str(invf), "--store", str(root), "--no-event"])
        outside.mkdir()
        shutil.move(str(root / "inventories/inv"), str(outside / "inv"))
        (root / "inventories/inv").symlink_to(outside / "inv", target_is_directory=True)
        before = _snap(outside)
        save_inventory(synth_inventory(5, 0, name="inv"), d / "inv2.yaml")
        r = cli(["inventory", "push", str(d / "inv2.yaml"), "--store", str(root), "--no-event"])
        return (
            one_line_2(r, "inventories/inv")
            and _snap(outside) == before
            and _fsck_reports(root, "inventories/inv", "link out of the plan store")
        )

    @case("18.11", ".locks is a link out of the store", "plans publish")
    def _() -> bool:
        root, outside = d / "store-locks", d / "outside-locks"
        root.mkdir()
        outside.mkdir()
        (root / ".locks").symlink_to(outside, target_is_directory=True)
        return (
            _publish_refused(root)
            and _snap(root) == {}
            and _snap(outside) == {}
            and _fsck_reports(root, ".locks", "link out of the plan store")
        )

    @case("18.12", "plans/<inventory> is a file", "plans fsck; plans list --inventory inv")
    def _() -> bool:
        root = d / "store-inv-file"
        (root / "plans").mkdir(parents=True)
        (root / "plans/inv").write_text("not a folder")
        r = cli(["plans", "list", "--store", str(root), "--inventory", "inv"])
        return _fsck_reports(root, "plans/inv") and one_line_2(r, "plans/inv")

    @case("18.12", "plans/<inventory> holds a foreign folder (with a file; empty)", "plans fsck")
    def _() -> bool:
        root = d / "store-foreign"
        _published(root)
        (root / "plans/inv/junk").mkdir()
        (root / "plans/inv/junk/notes.txt").write_text("x")
        (root / "plans/inv/empty").mkdir()
        return _fsck_reports(root, "plans/inv/junk/notes.txt") and _fsck_reports(root, "plans/inv/empty", "empty")

    @case("18.12", "plans/ is a file", "plans list; plans fsck")
    def _() -> bool:
        root = d / "store-plans-file"
        root.mkdir()
        (root / "plans").write_text("not a folder")
        r = cli(["plans", "list", "--store", str(root)])
        return one_line_2(r, "plans") and "no plans stored yet" not in r[1] and _fsck_reports(root, "plans")

    @case("18.12", "current.json (the pointer) is a folder", "plans list; plans fsck; publish")
    def _() -> bool:
        root = d / "store-pointer-folder"
        _published(root)
        (root / "plans/inv/current.json").unlink()
        (root / "plans/inv/current.json").mkdir()
        before = _snap(root)
        r = cli(["plans", "list", "--store", str(root)])
        return (
            one_line_2(r, "plans/inv/current.json")
            and _fsck_reports(root, "plans/inv/current.json", "folder")
            and _publish_refused(root)
            and _snap(root) == before
        )
