"""Orphans of an interrupted publish, and their repair: `plans gc` (docs/architecture/stores.md, "Stores").

What storing a decision writes, in this order (`objects.upload_verified`, `plans.publish` / `plans.reject`):

1. the plan object ``<id>.json``; 2. its checksum object ``<id>.json.sha256``; 3. its record ``<id>.json.record``
(the decision); 4. for an approved plan, the pointer's move (compare-and-swap).

A plan is stored when its object and its record are both there (an approved one the pointer never reached is
fsck's "never became current": a rollback target). Anything else of a plan that no pointer names (neither the
inventory's current entry nor its history) is an **orphan**, left by a publish that was interrupted or whose objects
a `plans gc` removed while it was writing them:

- an orphan plan: a plan object (approved or rejected) with no record object, whose bytes are a plan of the key's
  id, inventory and fingerprint (other bytes are corruption, kept and reported), and with no ``<id>.record.json``
  beside it (the record of a store written before this layout). Its leftovers: its checksum object if there is one,
  then itself;
- an orphan record or checksum: a record and/or checksum object without its plan object. A record without its plan
  is no decision (nothing can be verified or loaded against it; publishing the plan id again decides it afresh).
  Its leftovers: the checksum, then the record.

Never an orphan, never deleted: anything of a plan the pointer names (fsck names what is missing), and every object
of an inventory whose pointer cannot be read (it may name them).

A leftover written within the grace period (`ORPHAN_GRACE_MINUTES` by default, by the store's own write time) may
be a publish still in flight: it is "in flight or orphan", listed and kept. With a grace period shorter than a
publish (`--grace-minutes 0`), a removal can meet a publish mid-flight: the publish writes again what went missing
before it returns (`objects.upload_verified`), and `plans gc` checks each orphan again just before and just after
removing it, putting back (never over a newer object) what a publish came to need meanwhile. `delete` and
`written_at` (the two store primitives only this repair uses) are called from here only.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from pydantic import ValidationError

from dreamshard.errors import StoreError
from dreamshard.store.base import PlanStore
from dreamshard.store.keys import PLANS_PREFIX, PlanKey, inventory_of, inventory_prefix, parse_key
from dreamshard.store.pointer import pointer_or_problem
from dreamshard.values import Plan, utcnow
from dreamshard.values.names import name_problem
from dreamshard.values.records import CurrentPointer, GcResult, Orphan

#: How old a leftover must be before `plans gc` removes it (a publish writes its objects within seconds).
ORPHAN_GRACE_MINUTES = 60.0


def grace_of(minutes: float) -> timedelta:
    """The grace period; StoreError unless `minutes` is a finite number >= 0."""
    if not 0 <= minutes < float("inf"):
        raise StoreError(f"--grace-minutes must be a finite number of minutes >= 0, got {minutes!r}")
    return timedelta(minutes=minutes)


def age(written: datetime, now: datetime) -> str:
    """`now - written` in words: "40 s", "12 min", "3.5 h", "2.0 d"."""
    s = max(0.0, (now - written).total_seconds())
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h" if s < 172800 else f"{s / 86400:.1f} d"


def _is_its_plan(store: PlanStore, pk: PlanKey) -> bool:
    """Whether the object at `pk` is a plan of the key's id, inventory and fingerprint (False for anything else:
    corruption, or an old-layout record, is never removed)."""
    try:
        plan = Plan.model_validate_json(store.get_bytes(pk.key))
    except (StoreError, ValidationError, ValueError):
        return False
    return (plan.plan_id, plan.inventory_name, plan.inventory_fingerprint) == (pk.plan_id, pk.inventory, pk.fingerprint)


def _classify(pk: PlanKey, present: set[str], named: set[str]) -> tuple[str, tuple[str, ...]] | None:
    """(what, leftovers) when the objects of plan `pk` that are `present` make an orphan by the definition (module
    docstring), by the keys alone; None when they do not. `named`: the plan keys the pointer names."""
    plan, checksum, record = (pk.of(k).key for k in ("plan", "checksum", "record"))
    if plan in named:
        return None
    if plan in present:
        if record in present or _legacy_record(pk) in present:
            return None
        if checksum in present:
            return "a plan and its checksum without their record", (checksum, plan)
        return "a plan without its checksum and record", (plan,)
    left = tuple(k for k in (checksum, record) if k in present)
    if left == (checksum, record):
        return "a record and its checksum without their plan", left
    if left:
        return ("a checksum without its plan" if left == (checksum,) else "a record without its plan"), left
    return None


def _candidates(keys: set[str], present: set[str], named: set[str]) -> list[tuple[PlanKey, str, tuple[str, ...]]]:
    """(key, what, leftovers) of each orphan among the plans of `keys`, by the keys alone, in key order; `present`:
    every object there (with those the store cannot read through), `named`: the plan keys the pointer names. The key
    is the plan object's, or its first leftover's when the plan object is missing."""
    out: list[tuple[PlanKey, str, tuple[str, ...]]] = []
    for plan_key in sorted({pk.of("plan") for k in keys if (pk := parse_key(k)) is not None}, key=lambda p: p.key):
        found = _classify(plan_key, present, named)
        if found is not None:
            what, leftovers = found
            key = plan_key if plan_key.key in leftovers else parse_key(leftovers[0])
            if key is not None:
                out.append((key, what, leftovers))
    return out


def _legacy_record(pk: PlanKey) -> str:
    """Where the old layout kept this plan's record (``<id>.record.json``), or "" when no key can be there."""
    name = f"{pk.plan_id}.record"
    if name_problem(name) is not None:
        return ""
    return PlanKey(pk.inventory, pk.fingerprint, name, "plan", pk.status).key


def orphans_of(
    store: PlanStore,
    keys: list[str],
    pointer: CurrentPointer | None,
    now: datetime,
    grace: timedelta,
    behind: frozenset[str] = frozenset(),
) -> list[Orphan]:
    """The orphans among `keys` (one inventory's readable objects) given its readable pointer (None: it has none);
    `behind`: paths the store cannot read through (an object may be there: never a missing plan)."""
    named = {e.key for e in pointer.entries()} if pointer is not None else set()
    out: list[Orphan] = []
    for pk, what, leftovers in _candidates(set(keys), set(keys) | behind, named):
        if pk.kind == "plan" and not _is_its_plan(store, pk):
            continue
        times = [store.written_at(k) for k in leftovers]
        if any(t is None for t in times):
            continue  # changed while we looked
        newest = max(t for t in times if t is not None)
        out.append(
            Orphan(
                key=pk.key,
                inventory=pk.inventory,
                plan_id=pk.plan_id,
                what=what,
                leftovers=leftovers,
                written_at=newest,
                in_flight=now - newest < grace,
            )
        )
    return out


def find_orphans(
    store: PlanStore, inventory: str | None = None, grace_minutes: float = ORPHAN_GRACE_MINUTES
) -> list[Orphan]:
    """Every orphan of `inventory` (all inventories if None), in key order. An inventory whose pointer cannot be
    read has none (its pointer may name any of its plans); a path the store cannot read through is skipped."""
    grace, now = grace_of(grace_minutes), utcnow()
    keys, unlisted = store.scan(inventory_prefix(inventory) if inventory else PLANS_PREFIX)
    behind = frozenset(p.key for p in unlisted)
    inventories = [inventory] if inventory else sorted({i for k in keys if (i := inventory_of(k)) is not None})
    out: list[Orphan] = []
    for inv in inventories:
        try:
            pointer, problem = pointer_or_problem(store, inv)
        except StoreError:
            continue
        if not problem:
            mine = [k for k in keys if k.startswith(inventory_prefix(inv))]
            out += orphans_of(store, mine, pointer, now, grace, behind)
    return out


def _still_orphan(store: PlanStore, orphan: Orphan) -> bool:
    """Whether `orphan` is, read now, the orphan it was found to be: the same leftovers, no record or plan object
    written meanwhile, and the pointer (read now) does not name its plan."""
    pk = parse_key(orphan.key)
    if pk is None:
        return False
    pointer, problem = pointer_or_problem(store, orphan.inventory)
    if problem:
        return False
    named = {e.key for e in pointer.entries()} if pointer is not None else set()
    keys = [pk.of(k).key for k in ("plan", "checksum", "record")] + [_legacy_record(pk)]
    present = {k for k in keys if k and store.exists(k)}
    return _classify(pk, present, named) == (orphan.what, orphan.leftovers)


def _remove(store: PlanStore, orphan: Orphan) -> bool:
    """Delete `orphan`'s leftovers in order, then check that no publish came to need them meanwhile (a record or the
    plan object written, the pointer moved to it); if one did, put back each removed object where nothing was
    written since, and say False."""
    kept = {k: got[0] for k in orphan.leftovers if (got := store.get_versioned(k)) is not None}
    for key in orphan.leftovers:
        store.delete(key)
    if _gone_unneeded(store, orphan):
        return True
    for key, data in kept.items():
        store.put_if(key, data, None)  # only where the key is empty: never over what the publish wrote
    return False


def _gone_unneeded(store: PlanStore, orphan: Orphan) -> bool:
    """After its leftovers were deleted: nothing of the orphan's plan is there (nothing a publish wrote meanwhile)
    and the pointer names no leftover's plan."""
    pk = parse_key(orphan.key)
    if pk is None:
        return False
    if any(store.exists(pk.of(k).key) for k in ("plan", "checksum", "record")):
        return False
    pointer, problem = pointer_or_problem(store, orphan.inventory)
    return not problem and (pointer is None or pk.of("plan").key not in {e.key for e in pointer.entries()})


def remove_orphans(
    store: PlanStore, inventory: str | None = None, grace_minutes: float = ORPHAN_GRACE_MINUTES, dry_run: bool = False
) -> GcResult:
    """`plans gc`: delete every orphan older than the grace period (its leftovers in order: the plan object or the
    record last, so an interrupted repair leaves an orphan, removed next time); keep those within it. An orphan a
    publish came to need while it was removed is put back and not counted (`_remove`). `dry_run`: delete nothing,
    say what would go."""
    store.check()
    found = find_orphans(store, inventory, grace_minutes)
    removed: list[Orphan] = []
    for orphan in found:
        if orphan.in_flight or not _still_orphan(store, orphan):
            continue
        if dry_run or _remove(store, orphan):
            removed.append(orphan)
    return GcResult(
        location=store.location,
        grace_minutes=grace_minutes,
        dry_run=dry_run,
        removed=tuple(removed),
        kept=tuple(o for o in found if o.in_flight),
    )
