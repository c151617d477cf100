"""Plan storage: a small object-store interface (local directory or S3) and publishing on top of it.

    from dreamshard.store import open_store, publish, get_current

`publish` uploads a plan under a versioned key with a checksum, verifies it, and only then moves the
`current` pointer with a compare-and-swap, so readers never see a partial plan (docs/architecture/stores.md, "Stores").

    base         the five-primitive store interface, compare-and-swap
    local, s3    the two backends; uri: open_store
    keys         THE key layout: building and parsing every key (segments: dreamshard.values.names)
    schemas      pointer, record, listing and fsck models
    objects      a plan's objects: verified upload, checksum-verified reads
    pointer      current.json: the advance rule and the rollback rule
    plans        publish / reject / hold (pending a reviewer) / rollback / show / current
    listing      list: every stored plan, verified, with its world size, schema and sharding types, and what it
                 could not read through
    fsck         consistency checks
    inventories  inventory versions and their pointer
    lookup       read-only: the latest approved plan for a model's schema and a job's world size
"""

from __future__ import annotations

from dreamshard.store.base import PlanStore, Version
from dreamshard.store.fsck import fsck
from dreamshard.store.inventories import (
    InventoryRef,
    check_inventory_store,
    current_inventory_key,
    get_current_inventory,
    get_inventory_version,
    inventory_key,
    push_inventory,
)
from dreamshard.store.listing import PlanListing, list_plans, scan_plans
from dreamshard.store.local import LocalPlanStore
from dreamshard.store.objects import list_inventories
from dreamshard.store.plans import (
    already_decided,
    clear_pending,
    get_current,
    hold,
    pending_record,
    publish,
    reject,
    rollback,
    show,
)
from dreamshard.store.pointer import get_pointer
from dreamshard.store.uri import open_store
from dreamshard.values.records import CurrentPointer, FsckIssue, PlanRecord, PointerEntry, PublishedRef

__all__ = [
    "already_decided",
    "clear_pending",
    "hold",
    "pending_record",
    "CurrentPointer",
    "FsckIssue",
    "InventoryRef",
    "LocalPlanStore",
    "PlanListing",
    "PlanRecord",
    "PlanStore",
    "PointerEntry",
    "PublishedRef",
    "Version",
    "check_inventory_store",
    "current_inventory_key",
    "fsck",
    "get_current",
    "get_current_inventory",
    "get_inventory_version",
    "get_pointer",
    "inventory_key",
    "list_inventories",
    "list_plans",
    "open_store",
    "publish",
    "push_inventory",
    "reject",
    "rollback",
    "scan_plans",
    "show",
]
