"""Plan storage: a small object-store interface (local directory or S3) and publishing on top of it.

    from dreamshard.store import open_store, publish, get_current

`publish` uploads a plan under a versioned key with a checksum, verifies it, and only then moves the
`current` pointer with a compare-and-swap, so readers never see a partial plan (docs/architecture.md).
"""

from __future__ import annotations

from dreamshard.store.base import PlanStore, Version
from dreamshard.store.local import LocalPlanStore
from dreamshard.store.publish import (
    CurrentPointer,
    FsckIssue,
    PlanRecord,
    PointerEntry,
    PublishedRef,
    fsck,
    get_current,
    get_pointer,
    list_inventories,
    list_plans,
    publish,
    publish_or_reject,
    reject,
    rollback,
    show,
)
from dreamshard.store.uri import open_store

__all__ = [
    "CurrentPointer",
    "FsckIssue",
    "LocalPlanStore",
    "PlanRecord",
    "PlanStore",
    "PointerEntry",
    "PublishedRef",
    "Version",
    "fsck",
    "get_current",
    "get_pointer",
    "list_inventories",
    "list_plans",
    "open_store",
    "publish",
    "publish_or_reject",
    "reject",
    "rollback",
    "show",
]
