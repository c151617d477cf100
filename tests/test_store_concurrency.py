"""Concurrent publishers never corrupt `current` (threads and separate processes, local store)."""

from __future__ import annotations

import importlib
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from store_helpers import approve, make_plan, publish_or_reject, publish_race

from dreamshard.errors import StoreError
from dreamshard.gate import evaluate_gate
from dreamshard.store import (
    LocalPlanStore,
    PlanStore,
    fsck,
    get_current,
    get_pointer,
    list_plans,
    publish,
)

ROOT = Path(__file__).resolve().parents[1]


def _reader(store: PlanStore, stop: threading.Event, seen: list[str], errors: list[BaseException]) -> None:
    while not stop.is_set():
        try:
            if get_pointer(store, "inv") is not None:
                seen.append(get_current(store, "inv").plan_id)  # parses and verifies the checksum
        except BaseException as e:  # noqa: BLE001 - collected and asserted below
            errors.append(e)


def run_threaded_publishers(store: PlanStore, threads: int, per_thread: int) -> None:
    """Publish threads*per_thread plans at once while a reader resolves current; check nothing was lost."""
    published: list[str] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(threads)

    def worker() -> None:
        try:
            barrier.wait()
            for _ in range(per_thread):
                plan = make_plan()
                publish(store, plan, approve(plan))
                published.append(plan.plan_id)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    stop, seen, read_errors = threading.Event(), [], []  # type: ignore[var-annotated]
    reader = threading.Thread(target=_reader, args=(store, stop, seen, read_errors))
    reader.start()
    workers = [threading.Thread(target=worker) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    stop.set()
    reader.join()
    assert not errors and not read_errors, (errors + read_errors)[0]
    assert set(seen) <= set(published)
    pointer = get_pointer(store, "inv")
    assert pointer is not None
    # No lost update: every publish pushed the previous current into the history exactly once.
    chain = [pointer.plan_id] + [e.plan_id for e in pointer.history]
    assert sorted(chain) == sorted(published)
    assert get_current(store, "inv").plan_id == pointer.plan_id


def test_threads_publishing_at_once(tmp_path: Path) -> None:
    run_threaded_publishers(LocalPlanStore(tmp_path / "store"), threads=4, per_thread=5)


def test_threads_publishing_one_plan_id_are_each_told_its_decision(tmp_path: Path) -> None:
    """The losers of a same-id publish race find the plan stored before its record: each is told the decision the
    store holds (or that it is being written), never that the clean store has no readable record."""
    for status, overall in (("approved", 10.0), ("rejected", 30.0)):
        plan = make_plan(overall=overall)
        decision = evaluate_gate(plan, {"size_greedy": 20.0}, 0.0)
        store, refs, errors = publish_race(tmp_path / status, plan, decision, threads=8)
        assert errors == [], [str(e) for e in errors]
        assert len(refs) == 8 and {(r.plan_id, r.status) for r in refs} == {(plan.plan_id, status)}
        assert sum(r.already_decided for r in refs) == 7  # each loser read the winner's decision
        assert fsck(store) == []
        assert [r.plan_id for r in list_plans(store)] == [plan.plan_id]


def test_a_plan_left_without_its_record_is_named_after_a_bounded_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(importlib.import_module("dreamshard.store.plans"), "RECORD_WAIT_S", 0.2)
    store = LocalPlanStore(tmp_path / "store")
    plan = make_plan()
    ref = publish(store, plan, approve(plan))
    (store.root / (ref.key + ".record")).unlink()  # an interrupted publish: nobody is writing it
    t0 = time.monotonic()
    with pytest.raises(StoreError, match=f"plan {plan.plan_id} is stored .* without a readable record 0.2 s on"):
        publish_or_reject(store, plan, approve(plan))
    assert 0.2 <= time.monotonic() - t0 < 2.0


_CHILD = """
import sys
sys.path.insert(0, sys.argv[2])
from store_helpers import approve, make_plan
from dreamshard.store import LocalPlanStore, publish
store = LocalPlanStore(sys.argv[1])
for _ in range(int(sys.argv[3])):
    plan = make_plan()
    publish(store, plan, approve(plan))
    print(plan.plan_id, flush=True)
"""


def test_two_processes_publishing_at_once(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = LocalPlanStore(root)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(root), str(ROOT / "tests"), "8"], stdout=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    stop, seen, read_errors = threading.Event(), [], []  # type: ignore[var-annotated]
    reader = threading.Thread(target=_reader, args=(store, stop, seen, read_errors))
    reader.start()
    outs = [p.communicate(timeout=120)[0] for p in procs]
    stop.set()
    reader.join()
    assert [p.returncode for p in procs] == [0, 0]
    assert not read_errors, read_errors[0]
    published = [line for out in outs for line in out.split()]
    assert len(published) == 16
    pointer = get_pointer(store, "inv")
    assert pointer is not None
    assert sorted([pointer.plan_id] + [e.plan_id for e in pointer.history]) == sorted(published)
    assert len(list_plans(store, "inv")) == 16
    assert not any(p.name.endswith(".tmp") for p in root.rglob("*"))
