"""`plans list`: every stored plan with what it is for (docs/architecture.md, "Stores").

Each plan is read checksum-verified (its pointer's checksum when it is current, else its checksum object); its
schema is recomputed from the stored inventory version (`inventories.VersionSchemas`, once per version), its world
size and mix of sharding types come from the verified plan, its date and outcome from its record (the store's own
write). A plan that fails verification is listed with its `problem` instead of failing the listing.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from dreamshard.errors import PlanError, StoreError, StorePathError
from dreamshard.store.base import PlanStore
from dreamshard.store.inventories import VersionSchemas
from dreamshard.store.keys import PlanKey
from dreamshard.store.objects import list_inventories, load_verified, plan_keys, read_record
from dreamshard.store.pointer import pointer_or_problem
from dreamshard.store.schemas import CurrentPointer, PlanRecord

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def list_plans(store: PlanStore, inventory: str | None = None, fingerprint: str | None = None) -> list[PlanRecord]:
    """Every stored plan of `inventory` (all inventories if None; of its version `fingerprint` only, if given),
    oldest first by the store's own write (the record's `stored_at`), each checksum-verified.

    A plan that fails verification (checksum mismatch, unreadable, invalid) is listed with its `problem`
    instead of failing the whole listing; a corrupt pointer only means no plan of that inventory is marked
    current. A store whose structure is broken (StorePathError: a link out of a local store, a file where a
    folder belongs, a folder where an object belongs) fails the listing: `plans fsck` says what to move.
    """
    inventories = [inventory] if inventory else list_inventories(store)
    schemas = VersionSchemas(store)
    out: list[PlanRecord] = []
    for inv in inventories:
        pointer, _ = pointer_or_problem(store, inv)
        for pk in plan_keys(store, inv):
            if fingerprint is None or pk.fingerprint == fingerprint:
                out.append(_listed(store, pk, pointer, schemas))
    return sorted(out, key=lambda r: (r.inventory, r.stored_at or _EPOCH, r.plan_id))


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
        "outcome": record.gate.outcome if record else "",
        "stored_at": record.stored_at if record else None,
    }
    try:
        plan = load_verified(store, pk, pointer.sha256 if pointer is not None and is_current else None)
    except StorePathError:
        raise
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
