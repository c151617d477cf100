"""`plans fsck`: everything inconsistent in a store, each with its fix. Changes nothing."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from functools import partial

from dreamshard.errors import PlanError, StoreError, StorePathError
from dreamshard.store.base import PathProblem, PlanStore
from dreamshard.store.inventories import check_inventory_store
from dreamshard.store.keys import (
    PLANS_PREFIX,
    PlanKey,
    current_key,
    inventory_of,
    inventory_prefix,
    parse_key,
    pointer_of,
)
from dreamshard.store.objects import load_verified, read_record, sha256_hex
from dreamshard.store.orphans import ORPHAN_GRACE_MINUTES, age, grace_of, orphans_of
from dreamshard.store.pointer import HISTORY_LIMIT, entry_key, pointer_or_problem
from dreamshard.values import utcnow
from dreamshard.values.records import CurrentPointer, FsckIssue, Orphan, PlanRecordFile

#: A checksum or record file without its plan that is no orphan (dreamshard.store.orphans): the pointer names the
#: plan, or cannot be read (it may name it). Kept by `plans gc`.
_STRAY = (
    "{kind} without its plan, kept: the pointer names the plan, or cannot be read",
    "restore the plan from a backup, or repair the pointer (`plans gc` keeps what a pointer may name)",
)


def _path_issue(e: StorePathError | PathProblem) -> FsckIssue:
    return FsckIssue(key=e.key, problem=e.problem, fix=e.fix)


def _guarded(check: Callable[[], list[FsckIssue]]) -> list[FsckIssue]:
    """`check`'s findings; a path the store cannot read through (StorePathError) is one finding instead."""
    try:
        return check()
    except StorePathError as e:
        return [_path_issue(e)]


def fsck(
    store: PlanStore, inventory: str | None = None, grace_minutes: float = ORPHAN_GRACE_MINUTES, store_flag: str = ""
) -> list[FsckIssue]:
    """Everything inconsistent in the plan store (all inventories if None); changes nothing. `store_flag`: how the
    command line names this store (`--store DIR`, with `--endpoint-url`), put into every fix that is a command;
    "" for the default store.

    Finds: the store's own structure (`PlanStore.path_problems`: links out of a local store, empty folders, a file
    where a folder belongs, a folder where an object belongs), objects under plans/ that are not part of the
    layout, corrupt or dangling `current` pointers, plans whose bytes do not match their checksum file, record
    or pointer, unreadable or invalid plans, the orphans of interrupted publishes (dreamshard.store.orphans: fix
    `plans gc`; "in flight or orphan" within `grace_minutes`), record or checksum files without their plan that are
    no orphans, approved plans that never became current, and stored inventory versions that are corrupt.
    Every finding in one pass: a path the store cannot read through is one finding, and the keys it can read are
    all checked (`PlanStore.scan`).
    """
    prefix = inventory_prefix(inventory) if inventory else PLANS_PREFIX
    keys, unlisted = store.scan(prefix)
    found = [_path_issue(p) for p in unlisted]
    behind = {p.key for p in unlisted}  # objects the store cannot read through: never orphans' plans missing
    inventories = [inventory] if inventory else sorted({i for k in keys if (i := inventory_of(k)) is not None})
    for inv in inventories:
        mine = [k for k in keys if k.startswith(inventory_prefix(inv))]
        found += _guarded(partial(_check_inventory, store, inv, mine, behind, grace_of(grace_minutes), store_flag))
    found += _unexpected(keys)
    if inventory is None:
        found += _guarded(lambda: check_inventory_store(store))
    seen = {i.key for i in found}  # a key-level finding says more than the path's
    structure = [
        FsckIssue(key=p.key, problem=p.problem, fix=p.fix)
        for p in store.path_problems("" if inventory is None else prefix)
        if p.key not in seen
    ]
    return structure + _unique(found)


def _unique(issues: list[FsckIssue]) -> list[FsckIssue]:
    out: list[FsckIssue] = []
    for i in issues:
        if i not in out:
            out.append(i)
    return out


def _unexpected(keys: list[str]) -> list[FsckIssue]:
    """Objects under plans/ that are no plan, checksum, record or pointer of the layout (dreamshard.store.keys)."""
    return [
        FsckIssue(
            key=k,
            problem="not an object of the plan store's layout (a plan, its checksum or record, or "
            "an inventory's current.json)",
            fix="move it out of the store",
        )
        for k in keys
        if parse_key(k) is None and pointer_of(k) is None
    ]


def _command(verb: str, store_flag: str, *args: str) -> str:
    """A `dreamshard plans VERB` fix, naming the store as the command line did (`store_flag`)."""
    return " ".join(["dreamshard plans", verb, *([store_flag] if store_flag else []), *args])


def _check_inventory(
    store: PlanStore, inv: str, keys: list[str], behind: set[str], grace: timedelta, store_flag: str = ""
) -> list[FsckIssue]:
    """Everything inconsistent under one inventory (`keys`: its objects the store can read; `behind`: paths it
    cannot read through): its pointer and the plans it names, each stored plan, a plan decided twice, the orphans
    of interrupted publishes (only where the pointer reads: it may name any plan), and checksum or record files
    without their plan."""
    pointer, problem, out = _pointer_issues(store, inv, store_flag)
    if pointer is not None:
        out += _history_issues(store, pointer)
    now = utcnow()
    orphans = [] if problem else orphans_of(store, keys, pointer, now, grace, frozenset(behind))
    left = {k for o in orphans for k in (o.key, *o.leftovers)}
    plans = [p for k in keys if (p := parse_key(k)) is not None and p.kind == "plan"]
    stored = [p for p in plans if p.key not in left]
    out += _stored_plan_issues(store, inv, stored, pointer, not problem, store_flag)
    out += _decided_twice_issues(inv, stored)
    out += [_orphan_issue(o, now, grace, _command("gc", store_flag, "--inventory", inv)) for o in orphans]
    out += _orphan_issues([k for k in keys if k not in left], plans, behind)
    return out


def _orphan_issue(orphan: Orphan, now: datetime, grace: timedelta, gc: str) -> FsckIssue:
    """An orphan of an interrupted publish as a finding, with `gc` (the `plans gc` command) as its fix (none yet
    within the grace)."""
    written = f"written {age(orphan.written_at, now)} ago"
    if orphan.in_flight:
        return FsckIssue(
            key=orphan.key,
            problem=f"in flight or orphan: {orphan.what}, {written} (a publish may still be writing it)",
            fix=f"none while a publish runs; once it is {grace.total_seconds() / 60:g} min old, `{gc}` removes it",
        )
    return FsckIssue(
        key=orphan.key,
        problem=f"orphan of an interrupted publish: {orphan.what}, named by no pointer, {written}",
        fix=f"`{gc}` removes it",
    )


def _pointer_issues(
    store: PlanStore, inv: str, store_flag: str = ""
) -> tuple[CurrentPointer | None, str, list[FsckIssue]]:
    """The inventory's pointer (None if absent or unreadable), why it cannot be read ("" if it can), and the
    findings: an unreadable pointer, or a current plan that does not load or verify."""
    try:
        pointer, problem = pointer_or_problem(store, inv)
    except StorePathError as e:
        return None, str(e), [_path_issue(e)]
    if problem:
        fix = _command("rollback", store_flag, "--inventory", inv, "--to", "PLAN_ID")
        return None, problem, [FsckIssue(key=current_key(inv), problem=problem, fix=fix)]
    if pointer is None:
        return None, "", []
    try:
        load_verified(store, entry_key(pointer.entry()), pointer.sha256)
    except (StoreError, PlanError) as e:
        fix = _command("rollback", store_flag, "--inventory", inv)
        return pointer, "", [FsckIssue(key=current_key(inv), problem=f"current plan {pointer.plan_id}: {e}", fix=fix)]
    return pointer, "", []


def _history_issues(store: PlanStore, pointer: CurrentPointer) -> list[FsckIssue]:
    """Earlier current plans whose bytes changed since (a rollback to one would not restore what was current)."""
    out: list[FsckIssue] = []
    for entry in pointer.history:
        try:
            found = store.get_versioned(entry.key)
        except StorePathError as e:
            out.append(_path_issue(e))
            continue
        if found is not None and sha256_hex(found[0]) != entry.sha256:
            out.append(
                FsckIssue(
                    key=entry.key,
                    problem=f"plan {entry.plan_id} was modified since it was current "
                    f"(pointer history says sha256 {entry.sha256[:16]})",
                    fix="never roll back to it",
                )
            )
    return out


def _stored_plan_issues(
    store: PlanStore,
    inv: str,
    plans: list[PlanKey],
    pointer: CurrentPointer | None,
    pointer_readable: bool,
    store_flag: str = "",
) -> list[FsckIssue]:
    """Per stored plan: its own problems (`_plan_problems`), an approved plan that never became current (an
    interrupted publish), a record whose status disagrees with where the plan is stored."""
    referenced = {entry.key for entry in pointer.entries()} if pointer else set()
    out: list[FsckIssue] = []
    for pk in sorted(plans, key=lambda p: p.key):
        try:
            record = read_record(store, pk)
        except StorePathError as e:
            out.append(_path_issue(e))
            continue
        problems = _plan_problems(store, pk, inv, record)
        out.extend(problems)
        if (
            not problems  # a corrupt plan is never offered as a rollback target
            and pk.status == "approved"
            and pk.key not in referenced
            and pointer_readable
            and (pointer is None or len(pointer.history) < HISTORY_LIMIT)
        ):
            rollback = _command("rollback", store_flag, "--inventory", inv, "--to", pk.plan_id)
            out.append(
                FsckIssue(
                    key=pk.key,
                    problem="approved plan that never became current (an interrupted publish?)",
                    fix=f"re-publish it, or `{rollback}`",
                )
            )
        if record is not None and record.status != pk.status:
            out.append(
                FsckIssue(
                    key=pk.of("record").key,
                    problem=f"record says '{record.status}' but the plan is stored elsewhere",
                    fix="re-publish the plan",
                )
            )
    return out


def _decided_twice_issues(inv: str, plans: list[PlanKey]) -> list[FsckIssue]:
    """Plan ids stored both approved and rejected for one inventory version (one plan id gets one decision per
    inventory version: `dreamshard.store.plans.already_decided`)."""
    decided: dict[tuple[str, str], set[str]] = {}
    for pk in plans:
        if pk.status != "pending":  # no decision yet: a reviewer's answer makes it one
            decided.setdefault((pk.fingerprint, pk.plan_id), set()).add(pk.status)
    return [
        FsckIssue(
            key=PlanKey(inv, fp, plan_id, "plan", "rejected").key,
            problem=f"plan {plan_id} is stored both approved and rejected for one inventory version",
            fix="the approved one stands; never publish a plan id twice",
        )
        for (fp, plan_id), statuses in sorted(decided.items())
        if len(statuses) > 1
    ]


def _orphan_issues(keys: list[str], plans: list[PlanKey], behind: set[str]) -> list[FsckIssue]:
    """Checksum and record files (of `keys`, the orphans taken out) whose plan is not stored (a plan the store
    cannot read through is there: its path is a finding of its own)."""
    stored = {pk.key for pk in plans} | behind
    out: list[FsckIssue] = []
    for key in keys:
        parsed = parse_key(key)
        if parsed is not None and parsed.kind != "plan" and parsed.of("plan").key not in stored:
            problem, fix = _STRAY
            out.append(FsckIssue(key=key, problem=problem.format(kind=f"{parsed.kind} file"), fix=fix))
    return out


def _plan_problems(store: PlanStore, pk: PlanKey, inventory: str, record: PlanRecordFile | None) -> list[FsckIssue]:
    """Problems of one stored plan: missing/mismatched checksum file or record, unreadable or invalid bytes."""
    try:
        got = sha256_hex(store.get_bytes(pk.key))
        load_verified(store, pk)
    except StorePathError as e:
        return [_path_issue(e)]
    except (StoreError, PlanError) as e:
        return [FsckIssue(key=pk.key, problem=str(e), fix="roll back if it is current; re-publish it")]
    if record is None:
        return [FsckIssue(key=pk.of("record").key, problem="missing or unreadable record", fix="re-publish the plan")]
    if record.sha256 != got:
        return [
            FsckIssue(
                key=pk.key,
                problem=f"record says sha256 {record.sha256[:16]}, object has {got[:16]}",
                fix=f"the plan was modified: roll back if it is current ({inventory}); re-publish it",
            )
        ]
    return []
