"""Attacks on a plan store's contents: a corrupt pointer (refused in one line naming the repair command, blocking
no other inventory, repaired by `plans rollback --to`), orphans of an interrupted publish, a stored inventory
or plan edited (checksums checked by `plans list` and `plans rollback --to`), a read-only store, a plan
re-published, plan ids that look like the store's own names, a store path that names nothing.

The files: the World's (tests/store_helpers.py), `store` with the good plan current and the inventory pushed,
and another inventory's files (oinv.yaml, oplan.json, ocmp.json, o-params.yaml)."""

from __future__ import annotations

import builtins
import hashlib
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

import pytest
from harness import Case, Holds, Refused, Result, Runs, Table, cli, written
from store_helpers import approve, make_plan, publish_race, world

from dreamshard.errors import StoreError
from dreamshard.store import get_current, get_pointer, open_store
from dreamshard.store.inventories import get_current_inventory, push_inventory

GATE = "--comparison cmp.json -i inv.yaml --params gate-params.yaml"
POINTER = "store/plans/inv/current.json"


def world_files(d: Path) -> None:
    from dreamshard.documents import save_inventory, save_plan
    from dreamshard.evaluation import compare_sharders
    from dreamshard.inventory.synth import synth_inventory
    from dreamshard.profiling import make_oracle
    from dreamshard.sharders import get_sharder

    w = world()
    files = w.write(d)
    argv = [
        "plans",
        "publish",
        str(files["good"]),
        "--store",
        str(d / "store"),
        "--comparison",
        str(files["comparison"]),
    ]
    assert cli([*argv, "-i", str(files["inventory"]), "--params", str(files["params"])]).code == 0
    push_inventory(open_store(str(d / "store")), w.inventory)
    other = synth_inventory(6, 1, name="other")
    plan = get_sharder("lookup_greedy").shard(other, w.topology).model_copy(update={"sharder": "dreamshard"})
    cmp = compare_sharders(
        other, w.topology, ["round_robin", "torchrec"], make_oracle("simulator"), rounds=5, extra_plans=[plan]
    )
    save_inventory(other, d / "oinv.yaml")
    save_plan(plan, d / "oplan.json")
    (d / "ocmp.json").write_text(cmp.model_dump_json())
    (d / "o-params.yaml").write_text("publish:\n  baselines: [round_robin, torchrec]\n")


def plan_id(work: Path, name: str) -> str:
    return json.loads((work / f"{name}.json").read_text())["plan_id"]


def corrupt_pointer(work: Path) -> None:
    (work / POINTER).write_text("{corrupt")


def publish_other(work: Path) -> None:
    argv = "plans publish oplan.json --store store --comparison ocmp.json -i oinv.yaml --allow-simulated"
    r = cli([*argv.split(), "--sharders", "round_robin,torchrec", "--params", "o-params.yaml"])
    assert r.code == 0, r


def history(work: Path) -> None:
    """Store2: bad published, then good (bad in the pointer's history)."""
    for name in ("bad", "good"):
        r = cli(["plans", "publish", f"{name}.json", "--store", "store2", *GATE.split()])
        assert r.code == 0, r


def tampered(work: Path) -> Path:
    """Store2 with the stored bad plan's bytes rewritten (its sidecar not): the stored file."""
    history(work)
    f = next((work / "store2").rglob(f"{plan_id(work, 'bad')}.json"))
    f.write_text(f.read_text().replace('"sharder": "dreamshard"', '"sharder": "dreamsharp"'))
    return f


def _unreadable(work: Path) -> None:
    f = tampered(work)
    f.write_bytes(b"\xff\xfe not a plan")
    (f.parent / (f.name + ".sha256")).write_text(hashlib.sha256(f.read_bytes()).hexdigest() + "  x\n")


def _rewritten_behind_the_pointer(work: Path) -> None:
    """The stored bad plan edited, its sidecar and record rewritten to match: only the pointer's history holds
    the original checksum."""
    f = tampered(work)
    digest = hashlib.sha256(f.read_bytes()).hexdigest()
    (f.parent / (f.name + ".sha256")).write_text(f"{digest}  {f.name}\n")
    record = f.parent / (f.name + ".record")
    record.write_text(json.dumps({**json.loads(record.read_text()), "sha256": digest}))


def _rewrite_with_sidecar(f: Path) -> None:
    """The stored plan `f` edited and its checksum file rewritten to match (its record not)."""
    f.write_text(f.read_text().replace('"sharder": "dreamshard"', '"sharder": "dreamsharp"'))
    (f.parent / (f.name + ".sha256")).write_text(f"{hashlib.sha256(f.read_bytes()).hexdigest()}  {f.name}\n")


def _rewritten_with_sidecar(work: Path) -> None:
    """Store2's bad plan (once current) edited with its checksum file: its record and the pointer hold the original."""
    history(work)
    _rewrite_with_sidecar(next((work / "store2").rglob(f"{plan_id(work, 'bad')}.json")))


def _rejected_rewritten_with_sidecar(work: Path) -> None:
    """The worse plan rejected into `store`, then edited with its checksum file: only its record knows."""
    assert cli(["plans", "publish", "worse.json", "--store", "store", *GATE.split()]).code == 1
    _rewrite_with_sidecar(next((work / "store").rglob(f"rejected/{plan_id(work, 'worse')}.json")))


def _current_is(name: str) -> Callable[[Path, Result], None]:
    def then(work: Path, r: Result) -> None:
        store = "store2" if (work / "store2").exists() else "store"
        assert get_current(open_store(store), "inv").plan_id == plan_id(work, name)

    return then


def _repaired(work: Path, r: Result) -> None:
    """The store works again: the next publish reads the repaired current plan and judges against it too."""
    _current_is("good")(work, r)
    again = cli(["plans", "publish", "bad.json", "--store", "store", *GATE.split()])
    assert again.code == 1 and "baseline current" in again.err, again
    _current_is("good")(work, r)


def _listed_tampered(work: Path, r: Result) -> None:
    assert "CORRUPT" in r.out and "checksum mismatch" in r.err, r
    rows = {x["plan_id"]: x for x in json.loads(cli(["plans", "list", "--store", "store2", "--json"]).out)}
    assert "checksum mismatch" in rows[plan_id(work, "bad")]["problem"] and rows[plan_id(work, "good")]["problem"] == ""


def _listed_unreadable(work: Path, r: Result) -> None:
    rows = json.loads(r.out)
    assert any(x["plan_id"] == plan_id(work, "good") and not x["problem"] for x in rows)
    plain = cli(["plans", "list", "--store", "store2"])
    assert plain.code == 1 and "CORRUPT" in plain.out and plan_id(work, "good") in plain.out
    assert len(plain.err.strip().splitlines()) == 1 and plan_id(work, "bad") in plain.err


def _fsck_finds_the_checksum(work: Path, r: Result) -> None:
    from dreamshard.store.fsck import fsck

    assert any("sha256" in i.problem or "checksum" in i.problem for i in fsck(open_store("store2")))


def _other_inventorys_corrupt_pointer(work: Path) -> None:
    other = work / "store/plans/zzz/current.json"
    other.parent.mkdir(parents=True)
    other.write_text("garbage")
    r = cli(["plans", "list", "--store", "store", "--json"])
    assert r.code == 0 and [x["plan_id"] for x in json.loads(r.out) if x["is_current"]] == [plan_id(work, "good")]
    assert cli(["plans", "show", "current", "--store", "store", "--inventory", "inv"]).code == 0
    judged = cli(["plans", "publish", "bad.json", "--store", "store", *GATE.split()])
    assert judged.code == 1 and "baseline current" in judged.err, judged  # decided against inv's own current plan
    r = cli(["plans", "fsck", "--store", "store"])
    assert r.code == 1 and "plans/zzz/current.json" in r.out


def _orphans_of_an_interrupted_publish(work: Path) -> None:
    import importlib

    from store_helpers import gate_file_plan

    plans = importlib.import_module("dreamshard.store.plans")
    w, store = world(), open_store("store")
    r = cli(["plans", "fsck", "--store", "store"])
    assert r.code == 0 and "clean" in r.out
    _, decision = gate_file_plan(w.bad, w.inventory, w.comparison, w.rules)

    def crash(*a: object, **k: object) -> None:
        raise KeyboardInterrupt  # killed between the upload and the pointer's move

    with mock.patch.object(plans, "update_pointer", crash), pytest.raises(KeyboardInterrupt):
        plans.publish(store, w.bad, decision)
    (work / "store/plans/inv" / w.inventory.fingerprint() / "stray.json.sha256").write_text("00  stray.json\n")
    r = cli(["plans", "fsck", "--store", "store", "--json"])
    problems = {i["key"].rsplit("/", 1)[-1]: i["problem"] for i in json.loads(r.out)}
    assert r.code == 1 and "never became current" in problems[f"{w.bad.plan_id}.json"]
    assert "orphan" in problems["stray.json.sha256"]
    assert get_current(store, "inv").plan_id == plan_id(work, "good")  # current untouched


def _push_over(version: str | None, pointer: str | None) -> Callable[[Path], None]:
    """The stored inventory's version or pointer (or both) damaged: a push repairs them."""

    def check(work: Path) -> None:
        from dreamshard.documents import load_inventory

        fp = world().inventory.fingerprint()
        folder = work / "store/inventories/inv"
        if version is not None:
            (folder / f"{fp}.yaml").write_text(version)
        if pointer is not None:
            (folder / "current.json").write_text(pointer)
        store = open_store("store")
        changed = push_inventory(store, load_inventory(work / "inv.yaml")).changed
        assert changed or pointer is None  # a replaced pointer is a change
        got = get_current_inventory(store, "inv")
        assert got is not None and got[0].fingerprint() == fp and got[1].fingerprint == fp
        assert not push_inventory(store, load_inventory(work / "inv.yaml")).changed  # now current: unchanged

    return check


def _corrupt_version_read(work: Path) -> None:
    (work / "store/inventories/inv" / f"{world().inventory.fingerprint()}.yaml").write_text("tables: 3")
    with pytest.raises(StoreError, match="corrupt"):
        get_current_inventory(open_store("store"), "inv")


@contextmanager
def read_only(writable: bool) -> Iterator[None]:
    """Store2 as a read-only mount: every write under it fails; `os.access` says so too unless `writable`
    (root ignores mode bits, so the mount is simulated)."""
    real_open = builtins.open

    def ro_open(file, mode="r", *a, **k):  # type: ignore[no-untyped-def]
        if any(c in mode for c in "wa+x") and "store2" in str(file):
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, mode, *a, **k)

    with mock.patch("builtins.open", ro_open), mock.patch("os.access", lambda *a, **k: writable):
        yield


def _republished(work: Path) -> None:
    history(work)
    store, bad, good = open_store("store2"), plan_id(work, "bad"), plan_id(work, "good")
    before = get_pointer(store, "inv")
    assert cli(["plans", "publish", "good.json", "--store", "store2", *GATE.split()]).code == 0
    after = get_pointer(store, "inv")
    assert after == before and after is not None and [e.plan_id for e in after.history] == [bad]
    assert cli(["plans", "rollback", "--store", "store2", "--inventory", "inv"]).code == 0
    assert get_current(store, "inv").plan_id == bad  # the rollback is not a no-op
    assert cli(["plans", "rollback", "--store", "store2", "--inventory", "inv", "--to", good]).code == 0
    pointer = get_pointer(store, "inv")
    assert pointer is not None and [e.plan_id for e in pointer.history] == [bad]


def _record_like_ids(work: Path) -> None:
    from dreamshard.evaluation import evaluate_plan
    from dreamshard.profiling import make_oracle
    from dreamshard.store import list_plans, publish, show

    w = world()
    st = open_store("store-record")
    first = evaluate_plan(w.inventory, w.good, make_oracle("simulator")).model_copy(update={"plan_id": "p.record"})
    second = first.model_copy(update={"plan_id": "p"})
    publish(st, first, approve(first))
    publish(st, second, approve(second))
    assert show(st, "p.record") == first and show(st, "p") == second
    assert {r.plan_id for r in list_plans(st, "inv")} == {"p.record", "p"}


def _same_id_race(work: Path) -> None:
    """Eight publishers of one plan id, seven arriving while the first has stored the plan and not yet its record:
    each loser waits for the record and is told the decision; the store is clean afterwards."""
    from dreamshard.store import fsck

    plan = make_plan()
    store, refs, errors = publish_race(work / "race-store", plan, approve(plan), threads=8)
    assert errors == [], [str(e) for e in errors]
    assert len(refs) == 8 and {(r.plan_id, r.status) for r in refs} == {(plan.plan_id, "approved")}
    assert sum(r.already_decided for r in refs) == 7 and fsck(store) == []
    assert get_current(store, "inv") == plan


def _cases() -> list[Case]:
    cases: list[Case] = [
        Refused(
            "a corrupt pointer: publish writes nothing (no orphan files)",
            f"plans publish bad.json --store store {GATE}",
            "not a valid pointer",
            setup=corrupt_pointer,
        ),
        Runs(
            "a corrupt pointer: publish for another inventory works",
            "plans publish oplan.json --store store --comparison ocmp.json -i oinv.yaml --allow-simulated "
            "--sharders round_robin,torchrec --params o-params.yaml",
            setup=corrupt_pointer,
        ),
        Runs(
            "a corrupt pointer: show current of another inventory works",
            "plans show current --store store --inventory other",
            setup=lambda w: (publish_other(w), corrupt_pointer(w)),
        ),
        Runs("a corrupt pointer: plans list works", "plans list --store store", setup=corrupt_pointer),
        Refused(
            "a corrupt pointer: the line names the repair command",
            "plans show current --store store --inventory inv",
            "plans rollback --inventory inv --to PLAN_ID",
            setup=corrupt_pointer,
        ),
        Runs(
            "a corrupt pointer: rollback --to repairs it",
            lambda w: ["plans", "rollback", "--store", "store", "--inventory", "inv", "--to", plan_id(w, "good")],
            _repaired,
            setup=corrupt_pointer,
        ),
        Runs(
            "plans fsck lists a stray record",
            "plans fsck --store store",
            lambda w, r: _says(r.out, "x.json.record"),
            setup=written(f"store/plans/inv/{world_fingerprint()}/x.json.record", "{}"),
            code=1,
        ),
        Holds("another inventory's corrupt pointer blocks nothing", _other_inventorys_corrupt_pointer),
        Holds("plans fsck lists the orphans of an interrupted publish", _orphans_of_an_interrupted_publish),
    ]
    cases += [
        Holds(f"inventory push over {what}", _push_over(version, pointer))
        for what, version, pointer in (
            ("a corrupt stored pointer", None, "{x"),
            ("a corrupt stored inventory", "[1,", None),
            ("a stored inventory without tables", "name: inv\ntables: []\n", None),
            ("a corrupt stored inventory and pointer", "[1, 2", "{broken"),
            ("a stored inventory without tables and a corrupt pointer", "name: inv\ntables: []\n", "{broken"),
            ("a stored inventory that is an empty mapping and a corrupt pointer", "{}", "{broken"),
        )
    ]
    cases += [
        Holds("a corrupt stored inventory is a StoreError when read", _corrupt_version_read),
        Runs(
            "plans list verifies checksums: a tampered plan is reported",
            "plans list --store store2",
            _listed_tampered,
            setup=tampered,
            code=1,
        ),
        Runs(
            "plans list: one unreadable plan does not fail the listing",
            "plans list --store store2 --json",
            _listed_unreadable,
            setup=_unreadable,
            code=1,
        ),
        Refused(
            "plans rollback on a store that is not writable",
            "plans rollback --store store2 --inventory inv",
            "not writable",
            setup=history,
            guard=lambda: read_only(writable=False),
        ),
        Refused(
            "plans rollback on a read-only mount",
            "plans rollback --store store2 --inventory inv",
            "read-only",
            setup=history,
            guard=lambda: read_only(writable=True),
        ),
        Refused(
            "plans rollback --to on a read-only mount",
            lambda w: ["plans", "rollback", "--store", "store2", "--inventory", "inv", "--to", plan_id(w, "bad")],
            setup=history,
            guard=lambda: read_only(writable=True),
        ),
        Holds("re-publishing the current plan does not duplicate the history", _republished),
        Refused(
            "rollback --to a plan whose file, sidecar and record were rewritten: the pointer's history decides",
            lambda w: ["plans", "rollback", "--store", "store2", "--inventory", "inv", "--to", plan_id(w, "bad")],
            "pointer's history says",
            setup=_rewritten_behind_the_pointer,
            then=_fsck_finds_the_checksum,
        ),
        Holds("a plan id ending in .record beside plan p: both kept, shown and listed", _record_like_ids),
        Holds("eight publishers of one plan id: each told the decision, the store clean", _same_id_race),
        Refused(
            "plans show a plan rewritten with its checksum file: its record and the pointer's history refuse it",
            lambda w: ["plans", "show", plan_id(w, "bad"), "--store", "store2"],
            ("the object has sha256", "the pointer's history says", "plans fsck"),
            setup=_rewritten_with_sidecar,
            then=lambda w, r: _says(r.err, plan_id(w, "bad")),
        ),
        Refused(
            "plans show a plan rewritten with its checksum file and record: the pointer's history refuses it",
            lambda w: ["plans", "show", plan_id(w, "bad"), "--store", "store2", "--torchrec"],
            ("the object has sha256", "the pointer's history says"),
            setup=_rewritten_behind_the_pointer,
            then=lambda w, r: _says(r.err, plan_id(w, "bad")),
        ),
        Refused(
            "plans show a rejected plan rewritten with its checksum file: its record refuses it",
            lambda w: ["plans", "show", plan_id(w, "worse"), "--store", "store"],
            ("the object has sha256", "its record says"),
            setup=_rejected_rewritten_with_sidecar,
            then=lambda w, r: _says(r.err, plan_id(w, "worse")),
        ),
    ]
    cases += [
        Refused(f"a store path that names nothing: {command}", f"{command} --store no-such-store", "no plan store at")
        for command in ("plans list", "plans fsck", "plans show current --inventory x", "plans rollback --inventory x")
    ]
    cases.append(Holds("a compare-and-swap with nothing to write on an absent key returns at once", _cas_nothing))
    cases += _orphan_cases()
    return cases


def _orphan_cases() -> list[Case]:
    """What S3 dying mid-publish leaves (tests/attacks/store_orphans.py)."""
    from store_orphans import (
        decided_afresh,
        fsck_names_gc_on_the_store,
        in_flight,
        kept,
        kept_as_json,
        left_by_a_dead_publish,
        left_by_a_gc_race,
        removed,
        removed_without_its_plan,
        warned,
    )

    old, new = left_by_a_dead_publish(False, 3.0), left_by_a_dead_publish(True, 0.0)
    old_pair = left_by_a_dead_publish(True, 3.0)
    record, both = left_by_a_gc_race(("record",)), left_by_a_gc_race(("checksum", "record"))
    publish_bad = f"plans publish bad.json --store store {GATE}"
    return [
        Runs(
            "a gc race's record and checksum without their plan: plans fsck names gc --store, gc removes them",
            "plans fsck --store store",
            fsck_names_gc_on_the_store,
            both,
            code=1,
        ),
        Runs(
            "plans gc removes a record left without its plan",
            "plans gc --store store",
            removed_without_its_plan,
            record,
        ),
        Runs(
            "a plan id whose record was left without its plan is decided afresh", publish_bad, decided_afresh, record, 1
        ),
        Runs(
            "a plan id whose record and checksum were left without their plan is decided afresh",
            publish_bad,
            decided_afresh,
            both,
            1,
        ),
        Runs("a dead publish's plan object: plans list warns, exit 0", "plans list --store store", warned, old),
        Runs("a dead publish's plan and checksum: plans list warns", "plans list --store store", warned, old_pair),
        Runs("a dead publish's plan, just written: in flight or orphan", "plans list --store store", in_flight, new),
        Runs("plans gc removes a dead publish's plan object, nothing else", "plans gc --store store", removed, old),
        Runs("plans gc removes a dead publish's plan and checksum", "plans gc --store store", removed, old_pair),
        Runs("plans gc keeps a leftover within the grace period", "plans gc --store store", kept, new),
        Runs(
            "plans gc --json keeps a leftover within a long grace period",
            "plans gc --store store --json --grace-minutes 600",
            kept_as_json,
            old,
        ),
        *(
            Refused(f"plans gc --grace-minutes {g}", f"plans gc --store store --grace-minutes {g}", "--grace-minutes")
            for g in ("nan", "inf", "-5")
        ),
    ]


def _cas_nothing(work: Path) -> None:
    """`cas_update` whose `make` keeps an absent key absent: no write, no back-off (it slept through 64 before)."""
    from dreamshard.store.base import cas_update

    store = open_store(str(work / "store"))
    with mock.patch("dreamshard.store.base.time.sleep", side_effect=AssertionError("backed off")):
        assert cas_update(store, "plans/none/absent.json", lambda raw: None) is None
    assert store.get_versioned("plans/none/absent.json") is None


def world_fingerprint() -> str:
    from store_helpers import world_inventory

    return world_inventory().fingerprint()


def _says(text: str, *needles: str) -> None:
    for n in needles:
        assert n in text, text


TABLE = Table("store damage", _cases(), world_files)
