"""Setups and checks of the store-damage table's rows on the leftovers of an interrupted publish:
the World's `store` with the bad plan's object written (and its checksum, with `checksum`) but no record, as a
publish leaves it when S3 dies before the record."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from harness import Result, cli
from store_helpers import world

from dreamshard.store import fsck, get_current, open_store


def _orphan_path(work: Path) -> Path:
    w = world()
    return work / "store/plans/inv" / w.inventory.fingerprint() / f"{w.bad.plan_id}.json"


def left_by_a_dead_publish(checksum: bool, hours: float) -> Callable[[Path], None]:
    """The bad plan's object (and its checksum) as the publish wrote it, `hours` ago; no record."""

    def setup(work: Path) -> None:
        f = _orphan_path(work)
        data = (world().bad.model_dump_json(indent=2) + "\n").encode()
        f.write_bytes(data)
        if checksum:
            Path(f"{f}.sha256").write_text(f"{hashlib.sha256(data).hexdigest()}  {f.name}\n")
        then = time.time() - hours * 3600
        for p in (f, Path(f"{f}.sha256")):
            if p.exists():
                os.utime(p, (then, then))

    return setup


def warned(work: Path, r: Result) -> None:
    """`plans list` exit 0: the orphan is one warning naming `plans gc`, never CORRUPT, not listed."""
    assert "CORRUPT" not in r.out + r.err and world().bad.plan_id not in r.out, r
    [line] = r.err.strip().splitlines()
    assert line.startswith("orphan: ") and "plans gc --store store" in line, line


def in_flight(work: Path, r: Result) -> None:
    assert r.err.startswith("in flight or orphan: ") and "CORRUPT" not in r.out, r


def removed(work: Path, r: Result) -> None:
    """`plans gc` removed the orphan and nothing else: the good plan current, its objects there, fsck clean."""
    store = open_store("store")
    assert not _orphan_path(work).exists() and "1 orphan(s) removed" in r.out, r.out
    assert get_current(store, "inv").plan_id == world().good.plan_id and fsck(store) == []


def kept(work: Path, r: Result) -> None:
    assert _orphan_path(work).exists() and "1 kept" in r.out, r.out


def kept_as_json(work: Path, r: Result) -> None:
    data = json.loads(r.out)
    assert data["removed"] == [] and [o["plan_id"] for o in data["kept"]] == [world().bad.plan_id]


def left_by_a_gc_race(kinds: tuple[str, ...]) -> Callable[[Path], None]:
    """The bad plan's objects of `kinds` ("checksum", "record") without its plan object, 3 hours old: what a
    `plans gc --grace-minutes 0` that removed a publish's plan mid-flight left before publishes wrote it again."""

    def setup(work: Path) -> None:
        from store_helpers import gate_file_plan, publish_or_reject

        w = world()
        _, decision = gate_file_plan(w.bad, w.inventory, w.comparison, w.rules)
        ref = publish_or_reject(open_store(str(work / "scratch")), w.bad, decision)
        then = time.time() - 3 * 3600
        for kind in kinds:
            key = ref.key + {"checksum": ".sha256", "record": ".record"}[kind]
            (work / "store" / key).parent.mkdir(parents=True, exist_ok=True)
            (work / "store" / key).write_bytes((work / "scratch" / key).read_bytes())
            os.utime(work / "store" / key, (then, then))
        shutil.rmtree(work / "scratch")

    return setup


def fsck_names_gc_on_the_store(work: Path, r: Result) -> None:
    """`plans fsck --store store`: the leftover is one orphan whose fix is `plans gc --store store`, as gc does."""
    [line, summary] = r.out.strip().splitlines()
    assert "orphan of an interrupted publish: a record and its checksum without their plan" in line, line
    assert "`dreamshard plans gc --store store --inventory inv` removes it" in line and "1 problem" in summary, r.out
    done = cli(["plans", "gc", "--store", "store"])
    assert done.code == 0 and "1 orphan(s) removed" in done.out, done
    assert fsck(open_store("store")) == []


def removed_without_its_plan(work: Path, r: Result) -> None:
    """`plans gc` removed what was left of the bad plan (no plan object), and nothing else."""
    left = [p.name for p in _orphan_path(work).parent.iterdir() if p.name.startswith(world().bad.plan_id)]
    assert left == [] and "1 orphan(s) removed" in r.out, (left, r.out)
    store = open_store("store")
    assert get_current(store, "inv").plan_id == world().good.plan_id and fsck(store) == []


def decided_afresh(work: Path, r: Result) -> None:
    """The plan id whose record was left without its plan is gated again (rejected: the good plan is current); the
    approved leftover stays an orphan for `plans gc` (a publish deletes nothing)."""
    assert r.err.startswith(f"rejected {world().bad.plan_id}: ") and "already decided" not in r.out + r.err, r
    [issue] = fsck(open_store("store"))
    assert "rejected/" not in issue.key and issue.problem.startswith("orphan of an interrupted publish"), issue
