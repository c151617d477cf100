"""`plans gc --grace-minutes 0` beside publishes (dreamshard.store.orphans, dreamshard.store.objects.upload_verified):
no publish fails with a raw KeyNotFoundError or leaves a record without its plan, what gc removes from under a
publish is written again (by the publish) or put back (by gc), every plan id stays publishable, and `plans fsck`
and `plans gc` agree on what an orphan is.

Each interleaving is forced once (a store that runs a gc pass at the chosen moment), then a real loop: gc passes
back to back in a thread beside 20 publishes."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from store_helpers import FP, approve, make_plan, publish_or_reject

from dreamshard.cli.app import invoke
from dreamshard.store import LocalPlanStore, fsck, get_current, get_pointer, publish
from dreamshard.store.keys import parse_key
from dreamshard.store.orphans import find_orphans, remove_orphans
from dreamshard.values import Plan


class GcAfterWrites(LocalPlanStore):
    """A local store on which a whole `plans gc --grace-minutes 0` pass runs after each of the first `passes` plan
    objects written (a plan, its checksum or its record)."""

    def __init__(self, root: Path, passes: int) -> None:
        super().__init__(root)
        self.passes = passes
        self.removed: list[str] = []

    def put_bytes(self, key: str, data: bytes) -> None:
        super().put_bytes(key, data)
        if self.passes > 0 and parse_key(key) is not None:
            self.passes -= 1
            done = remove_orphans(LocalPlanStore(self.root), grace_minutes=0)
            self.removed += [k for o in done.removed for k in o.leftovers]


def test_a_publish_whose_objects_gc_removes_as_it_writes_them_writes_them_again(tmp_path: Path) -> None:
    """gc after the plan, after its checksum, after its record: each one removed as soon as it was written."""
    store = GcAfterWrites(tmp_path / "store", passes=3)
    plan = make_plan()
    ref = publish(store, plan, approve(plan))
    assert len(store.removed) == 3  # the plan, then its checksum, then its record went: all written again
    assert get_current(store, "inv").plan_id == plan.plan_id
    assert fsck(store, grace_minutes=0) == [] and find_orphans(store, grace_minutes=0) == []
    again = publish_or_reject(store, plan, approve(plan))
    assert again.already_decided and again.key == ref.key


class PublishDuringDelete(LocalPlanStore):
    """A local store whose first `delete` lets a publish finish first: the objects in `rest` (key -> bytes: the
    checksum, the record and the pointer, as the publish writes them after the plan object) are written, then the
    delete goes on. A gc that checked its orphan just before the publish wrote the record."""

    def __init__(self, root: Path, rest: dict[str, bytes]) -> None:
        super().__init__(root)
        self.rest = rest

    def delete(self, key: str) -> None:
        for k, data in self.rest.items():
            LocalPlanStore(self.root).put_bytes(k, data)
        self.rest = {}
        super().delete(key)


def test_a_removal_a_publish_came_to_need_meanwhile_is_put_back(tmp_path: Path) -> None:
    plan = make_plan()
    ref = publish(LocalPlanStore(tmp_path / "whole"), plan, approve(plan))
    whole = {k: (tmp_path / "whole" / k).read_bytes() for k in (ref.key, ref.key + ".sha256", ref.key + ".record")}
    whole["plans/inv/current.json"] = (tmp_path / "whole/plans/inv/current.json").read_bytes()
    left = LocalPlanStore(tmp_path / "store")
    left.put_bytes(ref.key, whole.pop(ref.key))  # the publish wrote its plan object; gc finds it without a record
    [orphan] = find_orphans(left, grace_minutes=0)
    done = remove_orphans(PublishDuringDelete(tmp_path / "store", whole), grace_minutes=0)
    assert done.removed == ()  # put back: the publish stored it meanwhile
    pointer = get_pointer(left, "inv")
    assert pointer is not None and pointer.key == orphan.key
    assert get_current(left, "inv").plan_id == plan.plan_id and fsck(left, grace_minutes=0) == []


#: What an interrupted publish, or a gc that met one, can leave of a plan: the kinds of object written.
LEFT: dict[str, tuple[str, ...]] = {
    "a plan": ("plan",),
    "a plan and its checksum": ("plan", "checksum"),
    "a checksum": ("checksum",),
    "a record": ("record",),
    "a checksum and a record": ("checksum", "record"),
}


@pytest.mark.parametrize("kinds", LEFT.values(), ids=LEFT.keys())
def test_fsck_and_gc_agree_on_what_is_an_orphan(tmp_path: Path, kinds: tuple[str, ...]) -> None:
    """What fsck calls an orphan that `plans gc` removes, gc removes; then fsck finds nothing."""
    store = LocalPlanStore(tmp_path / "store")
    current = make_plan(overall=7.0)
    publish(store, current, approve(current))
    plan = make_plan(overall=6.0)
    ref = publish(LocalPlanStore(tmp_path / "scratch"), plan, approve(plan))
    for kind in kinds:
        key = ref.key + {"plan": "", "checksum": ".sha256", "record": ".record"}[kind]
        store.put_bytes(key, (tmp_path / "scratch" / key).read_bytes())
    found = fsck(store, grace_minutes=0)
    assert len(found) == 1 and found[0].problem.startswith("orphan of an interrupted publish"), found
    assert "plans gc --inventory inv" in found[0].fix
    [removed] = remove_orphans(store, grace_minutes=0).removed
    assert removed.key == found[0].key and fsck(store, grace_minutes=0) == []
    assert get_current(store, "inv").plan_id == current.plan_id
    assert not publish_or_reject(store, plan, approve(plan)).already_decided  # the plan id publishes


@pytest.mark.parametrize(
    ("given", "named"),
    [(lambda root: ["--store", str(root)], lambda root: f"--store {root}"), (lambda root: [], lambda root: "")],
    ids=["--store given", "the default store"],
)
def test_fsck_fixes_name_the_store_unless_it_is_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: Callable[[Path], list[str]], named: Callable[[Path], str]
) -> None:
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "runs/plan-store"
    store = LocalPlanStore(root)
    plan = make_plan()
    store.put_bytes(f"plans/inv/{FP}/{plan.plan_id}.json", plan.model_dump_json().encode())
    code, out, _ = invoke(["plans", "fsck", "--grace-minutes", "0", *given(root)])
    assert code == 1
    flag = f" {named(root)}" if named(root) else ""
    assert f"(fix: `dreamshard plans gc{flag} --inventory inv` removes it)" in out, out


def test_gc_in_a_loop_beside_20_publishes(tmp_path: Path) -> None:
    """gc passes back to back (grace 0) while 20 threads publish: every publish succeeds, nothing is left half
    stored, every plan id is decided once and stays publishable."""
    root = tmp_path / "store"
    store = LocalPlanStore(root)
    store.check()
    stop = threading.Event()
    passes, errors = [0], []

    def collect() -> None:
        while not stop.is_set():
            remove_orphans(LocalPlanStore(root), grace_minutes=0)
            passes[0] += 1

    plans = [make_plan(overall=5.0 + i / 100) for i in range(20)]

    def publisher(plan: Plan) -> None:
        try:
            publish_or_reject(store, plan, approve(plan))
        except Exception as e:  # noqa: BLE001 - asserted below
            errors.append(e)

    gc = threading.Thread(target=collect)
    gc.start()
    workers = [threading.Thread(target=publisher, args=(p,)) for p in plans]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    stop.set()
    gc.join()
    assert errors == [] and passes[0] > 0, [f"{type(e).__name__}: {e}" for e in errors]
    assert fsck(store, grace_minutes=0) == []
    pointer = get_pointer(store, "inv")
    assert pointer is not None
    assert sorted(e.plan_id for e in pointer.entries()) == sorted(p.plan_id for p in plans)
    assert all(publish_or_reject(store, p, approve(p)).already_decided for p in plans)
