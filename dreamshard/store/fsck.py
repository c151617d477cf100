"""`plans fsck`: everything inconsistent in a store, each with its fix. Changes nothing."""

from __future__ import annotations

from dreamshard.errors import PlanError, StoreError
from dreamshard.store.base import PlanStore
from dreamshard.store.inventories import check_inventory_store
from dreamshard.store.keys import PlanKey, current_key, inventory_prefix, parse_key
from dreamshard.store.objects import list_inventories, load_verified, plan_keys, read_record, sha256_hex
from dreamshard.store.pointer import HISTORY_LIMIT, entry_key, pointer_or_problem
from dreamshard.store.schemas import FsckIssue

_ORPHAN = {"checksum": "checksum file without its plan (orphan)", "record": "record without its plan (orphan)"}


def fsck(store: PlanStore, inventory: str | None = None) -> list[FsckIssue]:
    """Everything inconsistent in the plan store (all inventories if None); changes nothing.

    Finds: corrupt or dangling `current` pointers, plans whose bytes do not match their checksum file, record
    or pointer, unreadable or invalid plans, checksum/record files without their plan (orphans), approved
    plans that never became current (an interrupted publish), and stored inventory versions that are corrupt.
    """
    out: list[FsckIssue] = []
    for inv in [inventory] if inventory else list_inventories(store):
        out.extend(_check_inventory(store, inv))
    if inventory is None:
        out.extend(check_inventory_store(store))
    return out


def _check_inventory(store: PlanStore, inv: str) -> list[FsckIssue]:
    out: list[FsckIssue] = []
    pointer, problem = pointer_or_problem(store, inv)
    if problem:
        out.append(FsckIssue(key=current_key(inv), problem=problem,
                             fix=f"dreamshard plans rollback --inventory {inv} --to PLAN_ID"))
    elif pointer is not None:
        try:
            load_verified(store, entry_key(pointer.entry()), pointer.sha256)
        except (StoreError, PlanError) as e:
            out.append(FsckIssue(key=current_key(inv), problem=f"current plan {pointer.plan_id}: {e}",
                                 fix=f"dreamshard plans rollback --inventory {inv}"))
    entries = ((pointer.entry(),) + pointer.history) if pointer else ()
    referenced = {e.key for e in pointer.entries()} if pointer else set()
    for e in entries[1:]:
        found = store.get_versioned(e.key)
        if found is not None and sha256_hex(found[0]) != e.sha256:
            out.append(FsckIssue(key=e.key, problem=f"plan {e.plan_id} was modified since it was current "
                                 f"(pointer history says sha256 {e.sha256[:16]})", fix="never roll back to it"))
    plans = plan_keys(store, inv)
    for pk in sorted(plans, key=lambda p: p.key):
        problems = _plan_problems(store, pk, inv)
        out.extend(problems)
        if (
            not problems  # a corrupt plan is never offered as a rollback target
            and pk.status == "approved"
            and pk.key not in referenced
            and not problem
            and (pointer is None or len(pointer.history) < HISTORY_LIMIT)
        ):
            out.append(FsckIssue(
                key=pk.key, problem="approved plan that never became current (an interrupted publish?)",
                fix=f"re-publish it, or `dreamshard plans rollback --inventory {inv} --to {pk.plan_id}`",
            ))
        record = read_record(store, pk)
        if record is not None and record.status != pk.status:
            out.append(FsckIssue(key=pk.of("record").key, problem=f"record says '{record.status}' but the plan "
                                 "is stored elsewhere", fix="re-publish the plan"))
    decided: dict[tuple[str, str], set[str]] = {}
    for pk in plans:
        decided.setdefault((pk.fingerprint, pk.plan_id), set()).add(pk.status)
    for (fp, plan_id), statuses in sorted(decided.items()):
        if len(statuses) > 1:  # one plan id gets one decision per inventory version (store.plans.already_decided)
            out.append(FsckIssue(key=PlanKey(inv, fp, plan_id, "plan", "rejected").key,
                                 problem=f"plan {plan_id} is stored both approved and rejected for one inventory version",
                                 fix="the approved one stands; never publish a plan id twice"))
    stored = {pk.key for pk in plans}
    for key in store.list_keys(inventory_prefix(inv)):
        parsed = parse_key(key)
        if parsed is not None and parsed.kind != "plan" and parsed.of("plan").key not in stored:
            out.append(FsckIssue(key=key, problem=_ORPHAN[parsed.kind], fix="delete it"))
    return out


def _plan_problems(store: PlanStore, pk: PlanKey, inventory: str) -> list[FsckIssue]:
    """Problems of one stored plan: missing/mismatched checksum file or record, unreadable or invalid bytes."""
    record = read_record(store, pk)
    try:
        got = sha256_hex(store.get_bytes(pk.key))
        load_verified(store, pk)
    except (StoreError, PlanError) as e:
        return [FsckIssue(key=pk.key, problem=str(e), fix="roll back if it is current; re-publish it")]
    if record is None:
        return [FsckIssue(key=pk.of("record").key, problem="missing or unreadable record", fix="re-publish the plan")]
    if record.sha256 != got:
        return [FsckIssue(key=pk.key, problem=f"record says sha256 {record.sha256[:16]}, object has {got[:16]}",
                          fix=f"the plan was modified: roll back if it is current ({inventory}); re-publish it")]
    return []
