"""Orphans of an interrupted publish, and their repair: `plans gc` (docs/architecture/stores.md, "Stores").

What storing a decision writes, in this order (`objects.upload_verified`, `plans.publish` / `plans.reject`):

1. the plan object ``<id>.json``; 2. its checksum object ``<id>.json.sha256``; 3. its record ``<id>.json.record``
(the decision); 4. for an approved plan, the pointer's move (compare-and-swap).

Once its record is written a plan is stored, never an orphan (an approved one the pointer never reached is fsck's
"never became current": a rollback target). A publish interrupted before step 3 leaves an **orphan**:

- an orphan plan: a plan object (approved or rejected) with no record object, whose key the inventory's pointer does
  not name (neither its current entry nor its history), whose bytes are a plan of the key's id, inventory and
  fingerprint (other bytes are corruption, kept and reported), and with no ``<id>.record.json`` beside it (the
  record of a store written before this layout). Its leftovers: its checksum object if there is one, then itself;
- an orphan checksum: a checksum object without its plan object that the pointer does not name (a repair removes
  the checksum before the plan, so it leaves none; hand damage does).

Never an orphan, never deleted: a record without its plan (the only trace of a decision: fsck names it), anything a
record or the pointer names, and every object of an inventory whose pointer cannot be read (it may name them).

A leftover written within the grace period (`ORPHAN_GRACE_MINUTES` by default, by the store's own write time) may
be a publish still in flight: it is "in flight or orphan", listed and kept. `delete` and `written_at` (the two store
primitives only this repair uses) are called from here only.
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


def _candidates(keys: set[str], present: set[str], named: set[str]) -> list[tuple[PlanKey, str, tuple[str, ...]]]:
    """(key, what, leftovers) of each object of `keys` the definition (module docstring) may call an orphan, by the
    keys alone; `present`: every object there (with those the store cannot read through), `named`: the plan keys
    the pointer names."""
    out: list[tuple[PlanKey, str, tuple[str, ...]]] = []
    for key in sorted(keys):
        pk = parse_key(key)
        if pk is None or pk.of("plan").key in named:
            continue
        plan, checksum, record = (pk.of(k).key for k in ("plan", "checksum", "record"))
        if pk.kind == "plan" and record not in present and _legacy_record(pk) not in present:
            if checksum in present:
                out.append((pk, "a plan and its checksum without their record", (checksum, plan)))
            else:
                out.append((pk, "a plan without its checksum and record", (plan,)))
        elif pk.kind == "checksum" and plan not in present:
            out.append((pk, "a checksum without its plan", (checksum,)))
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
    """Checked again just before deleting: no record written meanwhile, and the pointer (read now) names no
    leftover's plan."""
    pk = parse_key(orphan.key)
    if pk is None or store.exists(pk.of("record").key):
        return False
    if pk.kind == "checksum" and store.exists(pk.of("plan").key):
        return False
    pointer, problem = pointer_or_problem(store, orphan.inventory)
    if problem:
        return False
    return pointer is None or pk.of("plan").key not in {e.key for e in pointer.entries()}


def remove_orphans(
    store: PlanStore, inventory: str | None = None, grace_minutes: float = ORPHAN_GRACE_MINUTES, dry_run: bool = False
) -> GcResult:
    """`plans gc`: delete every orphan older than the grace period (its leftovers in order: the plan object last,
    so an interrupted repair leaves an orphan plan, removed next time); keep those within it. `dry_run`: delete
    nothing, say what would go."""
    store.check()
    found = find_orphans(store, inventory, grace_minutes)
    removed: list[Orphan] = []
    for orphan in found:
        if orphan.in_flight or not _still_orphan(store, orphan):
            continue
        if not dry_run:
            for key in orphan.leftovers:
                store.delete(key)
        removed.append(orphan)
    return GcResult(
        location=store.location,
        grace_minutes=grace_minutes,
        dry_run=dry_run,
        removed=tuple(removed),
        kept=tuple(o for o in found if o.in_flight),
    )
