"""Setups and checks of the store-damage table's rows on the leftovers of an interrupted publish:
the World's `store` with the bad plan's object written (and its checksum, with `checksum`) but no record, as a
publish leaves it when S3 dies before the record."""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

from harness import Result
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
