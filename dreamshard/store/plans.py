"""Publishing plans to a PlanStore and reading them back: publish / reject, rollback, show, current (the listing
is dreamshard.store.listing).

The pointer moves only after the uploaded plan was read back and its checksum verified, with a compare-and-swap
(dreamshard.store.pointer), so readers never see a partial plan and concurrent publishers never lose an update.
Nothing is ever deleted: old versions stay for rollback. Key layout: dreamshard.store.keys.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime

from dreamshard.errors import PlanError, StoreError
from dreamshard.store.base import PlanStore
from dreamshard.store.keys import PlanKey, Status
from dreamshard.store.objects import (
    find_plan,
    load_original,
    load_verified,
    original_sha,
    read_record,
    upload_verified,
)
from dreamshard.store.pointer import (
    advanced,
    entry_key,
    get_pointer,
    pointer_or_problem,
    stepped_back,
    update_pointer,
)
from dreamshard.values import CURRENT_OUTCOMES, GateDecision, Plan, utcnow
from dreamshard.values.records import CurrentPointer, PlanRecordFile, PointerEntry, PublishedRef
from dreamshard.values.review import PendingChange, Review

#: A check of the pointer read inside the compare-and-swap, before it moves: StoreError when the change was decided
#: against another current plan (a concurrent publish moved it since).
Guard = Callable[[CurrentPointer | None], None]


# -- reading --------------------------------------------------------------------------------------------
def get_current(store: PlanStore, inventory: str) -> Plan:
    """The plan `current` points at, checksum-verified."""
    pointer = get_pointer(store, inventory)
    if pointer is None:
        raise StoreError(f"no current plan for inventory '{inventory}' in {store.location}; publish one first")
    return load_verified(store, entry_key(pointer.entry()), pointer.sha256)


def show(store: PlanStore, plan_id: str, inventory: str | None = None) -> Plan:
    """A stored plan (approved or rejected) by id, verified as `rollback` verifies its target: against the checksum
    the pointer's history recorded when it was current, else its record's, never only its (rewritable) checksum
    file (`objects.load_original`)."""
    pk = find_plan(store, plan_id, inventory, ("approved", "rejected", "pending"))
    if pk is None:
        where = f" for inventory '{inventory}'" if inventory else ""
        raise StoreError(f"no plan '{plan_id}'{where} in {store.location}; see `dreamshard plans list`")
    pointer, _ = pointer_or_problem(store, pk.inventory)  # a corrupt pointer knows nothing: the record decides
    return load_original(store, pk, pointer, f"see `dreamshard plans fsck --inventory {pk.inventory}`")


def recorded_decision(store: PlanStore, plan: Plan) -> tuple[PlanKey, PlanRecordFile] | None:
    """The decision the store already holds for `plan`'s id under its inventory version (fingerprint), approved
    or rejected, or None. One plan id gets one decision per inventory version: publishing it again returns this."""
    for status in ("approved", "rejected"):
        pk = PlanKey(plan.inventory_name, plan.inventory_fingerprint, plan.plan_id, "plan", status)
        if store.exists(pk.key):  # a record without its plan is an orphan, no decision (store.orphans)
            return pk, _awaited_record(store, pk)
    return None


#: How long a publisher waits for the record of a plan it finds stored without one: another publisher of the same
#: plan id may be storing it (the plan first, its record last: `objects.upload_verified`).
RECORD_WAIT_S = 2.0


def _awaited_record(store: PlanStore, pk: PlanKey) -> PlanRecordFile:
    """The record of stored plan `pk`, read again (backing off) while another publisher may still be writing it;
    StoreError once `RECORD_WAIT_S` has passed without one (an interrupted publish, or a corrupt record)."""
    deadline = time.monotonic() + RECORD_WAIT_S
    delay = 0.005
    while (record := read_record(store, pk)) is None:
        if time.monotonic() >= deadline:
            raise StoreError(
                f"plan {pk.plan_id} is stored at {pk.key} in {store.location} without a readable record "
                f"{RECORD_WAIT_S:g} s on (an interrupted publish, or a corrupt record); see `dreamshard plans fsck`"
            )
        time.sleep(delay)
        delay = min(2 * delay, 0.1)
    return record


def already_decided(store: PlanStore, plan: Plan) -> tuple[PublishedRef, Plan, GateDecision] | None:
    """What the store recorded for this plan id and inventory version: (where, the stored plan, its decision);
    None when it was never decided. StoreError when the stored plan has another placement: a plan id names one
    placement."""
    found = recorded_decision(store, plan)
    if found is None:
        return None
    pk, record = found
    pointer, _ = pointer_or_problem(store, plan.inventory_name)
    # verified as `show` and `rollback` verify: against the recorded checksum, never only the rewritable .sha256
    stored = load_original(store, pk, pointer, f"see `dreamshard plans fsck --inventory {pk.inventory}`")
    if stored.units() != plan.units() or stored.topology != plan.topology:
        raise StoreError(
            f"plan id {plan.plan_id} was already decided ({record.gate.outcome}) for another placement "
            f"of inventory '{plan.inventory_name}'; a plan id names one placement: re-plan for a new id"
        )
    ref = _ref(
        store,
        stored,
        pk,
        record.sha256,
        record.gate,
        already=True,
        is_current=pointer is not None and pointer.key == pk.key,
    )
    return ref, stored, record.gate


# -- writing --------------------------------------------------------------------------------------------
def _no_other_decision(store: PlanStore, plan: Plan, status: Status) -> None:
    found = recorded_decision(store, plan)
    if found is not None and found[0].status != status:
        raise PlanError(
            f"plan {plan.plan_id} was already decided ({found[1].gate.outcome}) for this version of "
            f"inventory '{plan.inventory_name}'; one plan id gets one decision"
        )


def _check_decision(plan: Plan, decision: GateDecision) -> None:
    if decision.plan_id and decision.plan_id != plan.plan_id:
        raise PlanError(f"gate decision is for plan '{decision.plan_id}', not '{plan.plan_id}'")


def _ref(
    store: PlanStore,
    plan: Plan,
    pk: PlanKey,
    digest: str,
    decision: GateDecision,
    already: bool = False,
    is_current: bool | None = None,
) -> PublishedRef:
    return PublishedRef(
        plan_id=plan.plan_id,
        inventory=plan.inventory_name,
        fingerprint=plan.inventory_fingerprint,
        key=pk.key,
        sha256=digest,
        status=pk.status,
        is_current=decision.approved if is_current is None else is_current,
        store=store.location,
        reason=decision.reason,
        outcome=decision.outcome,
        already_decided=already,
    )


def publish(
    store: PlanStore, plan: Plan, approval: GateDecision, review: Review | None = None, guard: Guard | None = None
) -> PublishedRef:
    """Upload an approved plan under its versioned key, verify its checksum, then move `current` to it. `review`:
    the reviewer's answer that approved it (recorded with it); `guard`: checked on the pointer inside the
    compare-and-swap before it moves.

    Publishing the plan that is already current changes nothing (no duplicate in the history). A corrupt
    pointer fails the publish before anything is uploaded (no orphan files)."""
    _check_decision(plan, approval)
    if not approval.approved or approval.outcome not in CURRENT_OUTCOMES:
        raise PlanError(f"plan {plan.plan_id} was not approved by the gate: {approval.reason}")
    store.check()
    get_pointer(store, plan.inventory_name)  # fail before uploading if the pointer cannot be updated
    _no_other_decision(store, plan, "approved")
    pk, digest = upload_verified(store, plan, approval, "approved", review=review)
    target = PointerEntry(
        plan_id=plan.plan_id,
        key=pk.key,
        sha256=digest,
        fingerprint=plan.inventory_fingerprint,
        sharder=plan.sharder,
        published_at=utcnow(),
    )

    def make(old: CurrentPointer | None) -> CurrentPointer | None:
        if old is not None and old.key == target.key and old.sha256 == digest:
            return None  # already current
        if guard is not None:
            guard(old)
        return advanced(plan.inventory_name, target, old, "publish", review)

    update_pointer(store, plan.inventory_name, make)
    return _ref(store, plan, pk, digest, approval)


def reject(store: PlanStore, plan: Plan, decision: GateDecision, review: Review | None = None) -> PublishedRef:
    """Keep a rejected plan (with the gate's reason, and the reviewer's answer when one declined it) under
    rejected/; it never becomes current."""
    _check_decision(plan, decision)
    if decision.approved:
        raise PlanError(f"plan {plan.plan_id} was approved by the gate; publish it instead")
    store.check()
    _no_other_decision(store, plan, "rejected")
    pk, digest = upload_verified(store, plan, decision, "rejected", review=review)
    return _ref(store, plan, pk, digest, decision)


def hold(store: PlanStore, plan: Plan, decision: GateDecision, change: PendingChange) -> PublishedRef:
    """Keep a plan whose `decision` would make it current under pending/, waiting for a reviewer
    (publish.require_human); nothing current changes. Holding the same plan again changes nothing."""
    _check_decision(plan, decision)
    store.check()
    pk, digest = upload_verified(store, plan, decision, "pending", pending=change)
    return _ref(store, plan, pk, digest, decision, is_current=False)


def clear_pending(store: PlanStore, pk: PlanKey) -> None:
    """Remove an answered pending change (its decision is recorded, or the pointer moved, before this): the record
    first, so an interruption leaves an orphan `plans gc` removes, never a pending plan without its answer."""
    if pk.status != "pending":
        raise StoreError(f"{pk.key} is not a pending plan")
    for kind in ("record", "checksum", "plan"):
        store.delete(pk.of(kind).key)


def pending_record(
    store: PlanStore, plan_id: str, inventory: str | None
) -> tuple[PlanKey, PlanRecordFile, Plan] | None:
    """The plan `plan_id` kept pending (its key, record and plan, checksum-verified against its record), or None
    when none is."""
    pk = find_plan(store, plan_id, inventory, ("pending",))
    if pk is None:
        return None
    record = read_record(store, pk)
    if record is None or record.pending is None:
        raise StoreError(
            f"pending plan {plan_id} ({pk.key} in {store.location}) has no readable record; "
            f"see `dreamshard plans fsck --inventory {pk.inventory}`"
        )
    plan = load_original(store, pk, None, f"see `dreamshard plans fsck --inventory {pk.inventory}`", record)
    return pk, record, plan


def rollback(
    store: PlanStore,
    inventory: str,
    to_plan_id: str | None = None,
    guard: Guard | None = None,
    review: Review | None = None,
) -> CurrentPointer:
    """Move `current` back to the version before it (or to approved plan `to_plan_id`); nothing is deleted.

    Without --to, rollbacks walk back through the pointer's history one version at a time. With --to, a
    corrupt pointer is replaced (the documented repair); the target is verified against the checksum it had
    when published (the pointer's history, else its record), not only its (rewritable) checksum file.
    """
    store.check()
    explicit: tuple[PlanKey, Plan, datetime] | None = None
    if to_plan_id is not None:
        pk = find_plan(store, to_plan_id, inventory)
        if pk is None:
            raise StoreError(
                f"no plan '{to_plan_id}' for inventory '{inventory}' in {store.location}; "
                f"see `dreamshard plans list --inventory {inventory}`"
            )
        if pk.status == "rejected":
            raise StoreError(f"plan '{to_plan_id}' was rejected by the gate and cannot become current")
        pointer, _ = pointer_or_problem(store, inventory)
        plan = load_verified(store, pk, original_sha(store, pk, pointer))
        record = read_record(store, pk)
        explicit = (pk, plan, record.stored_at if record is not None else utcnow())

    def make(old: CurrentPointer | None) -> CurrentPointer:
        if guard is not None:
            guard(old)
        if explicit is not None:
            pk, plan, published_at = explicit
            if old is not None and old.plan_id == plan.plan_id:
                raise StoreError(f"plan '{plan.plan_id}' is already current for inventory '{inventory}'")
            target = PointerEntry(
                plan_id=plan.plan_id,
                key=pk.key,
                sha256=original_sha(store, pk, old),
                fingerprint=plan.inventory_fingerprint,
                sharder=plan.sharder,
                published_at=published_at,
            )
            return advanced(inventory, target, old, "rollback", review)
        if old is None:
            raise StoreError(f"no current plan for inventory '{inventory}' in {store.location}; nothing to roll back")
        new = stepped_back(inventory, old, review)
        load_verified(store, entry_key(new.entry()), new.sha256)  # never point at a corrupt version
        return new

    return update_pointer(store, inventory, make, repair=to_plan_id is not None)
