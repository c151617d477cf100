"""`plans list`: every stored plan with what it is for (docs/architecture/stores.md, "Stores").

Each plan is verified as `plans show` verifies it (`objects.load_original`: the checksum the pointer's history or
its record holds, which its object and checksum object must match); its schema is recomputed from the stored
inventory version (`inventories.VersionSchemas`, once per version), its world size and mix of sharding types come
from the verified plan, its date and outcome from its record (the store's own write). A plan that fails
verification is listed with its `problem` instead of failing the listing; a path the store cannot read through is
skipped and named (`scan_plans`).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, NamedTuple

from dreamshard.errors import PlanError, StoreError, StorePathError
from dreamshard.store.base import PlanStore
from dreamshard.store.inventories import VersionSchemas
from dreamshard.store.keys import PLANS_PREFIX, PlanKey, inventory_of, inventory_prefix, parse_key
from dreamshard.store.objects import load_original, read_record
from dreamshard.store.orphans import ORPHAN_GRACE_MINUTES, grace_of, orphans_of
from dreamshard.store.pointer import pointer_or_problem
from dreamshard.values import utcnow
from dreamshard.values.records import CurrentPointer, FsckIssue, Orphan, PlanRecord

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


class PlanListing(NamedTuple):
    """What `plans list` shows: every stored plan it could read (`records`), and what it could not read through
    (`skipped`: a link out of a local store, a file where a folder belongs...), each with its fix, and the leftovers
    of interrupted publishes (`orphans`: dreamshard.store.orphans), which are no stored plans: never listed as corrupt.
    """

    records: list[PlanRecord]
    skipped: list[FsckIssue]
    orphans: list[Orphan] = []


def scan_plans(
    store: PlanStore,
    inventory: str | None = None,
    fingerprint: str | None = None,
    grace_minutes: float = ORPHAN_GRACE_MINUTES,
) -> PlanListing:
    """Every stored plan of `inventory` (all inventories if None; of its version `fingerprint` only, if given),
    oldest first by the store's own write (the record's `stored_at`), each checksum-verified, and every path the
    store could not read through (StorePathError), skipped and named.

    A plan that fails verification (checksum mismatch, unreadable, invalid) is listed with its `problem`; a corrupt
    pointer only means no plan of that inventory is marked current; a pointer or plan object the store cannot read
    through (a link out of a local store, a folder where an object belongs) is one skipped entry, and the rest is
    listed. `plans fsck` says what to move. The orphans of an interrupted publish (of an inventory whose pointer
    reads) are not listed: they are returned apart (`orphans`, each in flight or not by `grace_minutes`).
    """
    keys, unlisted = store.scan(inventory_prefix(inventory) if inventory else PLANS_PREFIX)
    skipped = [FsckIssue(key=p.key, problem=p.problem, fix=p.fix) for p in unlisted]
    plans = [p for k in keys if (p := parse_key(k)) is not None and p.kind == "plan"]
    inventories = [inventory] if inventory else sorted({i for k in keys if (i := inventory_of(k)) is not None})
    schemas = VersionSchemas(store)
    behind, grace, now = frozenset(p.key for p in unlisted), grace_of(grace_minutes), utcnow()
    out: list[PlanRecord] = []
    orphans: list[Orphan] = []
    for inv in inventories:
        try:
            pointer, problem = pointer_or_problem(store, inv)
        except StorePathError as e:
            pointer, problem = None, str(e)
            skipped.append(_skipped(e))
        if not problem:  # an unreadable pointer may name any plan: none is an orphan
            mine = [k for k in keys if inventory_of(k) == inv]
            orphans += [
                o
                for o in orphans_of(store, mine, pointer, now, grace, behind)
                if fingerprint is None or (ok := parse_key(o.key)) is None or ok.fingerprint == fingerprint
            ]
        left = {o.key for o in orphans}
        for pk in plans:
            if pk.inventory == inv and (fingerprint is None or pk.fingerprint == fingerprint) and pk.key not in left:
                try:
                    out.append(_listed(store, pk, pointer, schemas))
                except StorePathError as e:
                    skipped.append(_skipped(e))
    records = sorted(out, key=lambda r: (r.inventory, r.stored_at or _EPOCH, r.plan_id))
    return PlanListing(records, list({i.key: i for i in skipped}.values()), orphans)


def list_plans(store: PlanStore, inventory: str | None = None, fingerprint: str | None = None) -> list[PlanRecord]:
    """`scan_plans`'s records, for a caller that needs the whole listing: a path the store cannot read through
    (StorePathError: a link out of a local store, a file where a folder belongs) fails it."""
    listing = scan_plans(store, inventory, fingerprint)
    if listing.skipped:
        first = listing.skipped[0]
        raise StorePathError(first.key, store.location, first.problem, first.fix)
    return listing.records


def _skipped(e: StorePathError) -> FsckIssue:
    return FsckIssue(key=e.key, problem=e.problem, fix=e.fix)


def _listed(store: PlanStore, pk: PlanKey, pointer: CurrentPointer | None, schemas: VersionSchemas) -> PlanRecord:
    """One stored plan as `plans list` shows it."""
    is_current = pointer is not None and pointer.key == pk.key
    record = read_record(store, pk)
    common: dict[str, Any] = {
        "inventory": pk.inventory,
        "status": pk.status,
        "key": pk.key,
        "is_current": is_current,
        "reason": record.gate.reason if record else "",
        "outcome": record.gate.shown if record else "",
        "stored_at": record.stored_at if record else None,
        "pending": record.pending if record else None,
    }
    try:
        plan = load_original(store, pk, pointer, f"see `dreamshard plans fsck --inventory {pk.inventory}`", record)
    except StorePathError:
        raise  # skipped and named (`scan_plans`)
    except (StoreError, PlanError) as e:
        return PlanRecord(
            plan_id=pk.plan_id,
            fingerprint=pk.fingerprint,
            sharder="",
            overall_ms=None,
            basis=None,
            problem=str(e),
            **common,
        )
    costs = plan.best_costs
    return PlanRecord(
        plan_id=plan.plan_id,
        fingerprint=plan.inventory_fingerprint,
        sharder=plan.sharder,
        overall_ms=costs.overall_ms if costs else None,
        basis=plan.cost_basis,
        topology=plan.topology,
        world_size=plan.topology.num_devices,
        schema_fingerprint=schemas.of(plan),
        sharding_types=plan.sharding_types(),
        **common,
    )
