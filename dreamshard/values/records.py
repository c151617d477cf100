"""What the store writes and returns: the pointer, a plan's record, what publish / list / fsck / push report. Values:
the store (dreamshard.store) produces them, the use cases and the doors carry them without importing the store."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from dreamshard.values.decision import GateDecision
from dreamshard.values.ids import utcnow
from dreamshard.values.review import PendingChange, Review
from dreamshard.values.topology import Topology

#: Where a plan's record lives in a store: approved/, rejected/ or pending/ (dreamshard.store.keys). A pending plan
#: waits for a reviewer (publish.require_human): it is no decision yet, and becomes approved or rejected by one.
Status = Literal["approved", "rejected", "pending"]
#: The statuses that are decisions (one plan id gets one of them per inventory version).
DECIDED: tuple[Status, ...] = ("approved", "rejected")


class PointerEntry(BaseModel):
    """One plan version as the pointer refers to it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    plan_id: str
    key: str
    sha256: str
    fingerprint: str
    sharder: str = ""
    published_at: datetime


class CurrentPointer(BaseModel):
    """plans/<inventory>/current.json: which verified plan is current, and what was current before."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    inventory: str
    key: str
    sha256: str
    plan_id: str
    fingerprint: str
    sharder: str = ""
    published_at: datetime
    updated_at: datetime = Field(default_factory=utcnow)
    action: Literal["publish", "rollback"] = "publish"
    review: Review | None = None  # the reviewer's answer that moved it (publish.require_human), else None
    previous: PointerEntry | None = None
    history: tuple[PointerEntry, ...] = ()  # earlier current versions, most recent first
    rolled_back: tuple[PointerEntry, ...] = ()  # versions a plain rollback undid, most recent first (once current)

    def entry(self) -> PointerEntry:
        return PointerEntry(
            plan_id=self.plan_id,
            key=self.key,
            sha256=self.sha256,
            fingerprint=self.fingerprint,
            sharder=self.sharder,
            published_at=self.published_at,
        )

    def entries(self) -> tuple[PointerEntry, ...]:
        """Every version the pointer knows: current, its history, the versions rollbacks undid."""
        return (self.entry(),) + self.history + self.rolled_back


class PlanRecordFile(BaseModel):
    """A plan's record object (kind "record" in dreamshard.store.keys): why the plan is in the store."""

    model_config = ConfigDict(extra="forbid")

    plan_id: str
    status: Status
    sha256: str
    stored_at: datetime = Field(default_factory=utcnow)
    gate: GateDecision
    # status pending: the change that waits for a reviewer (what it would make current, against which current plan)
    pending: PendingChange | None = None
    # the reviewer's answer that decided it (publish.require_human), None when no reviewer was asked
    review: Review | None = None


class PublishedRef(BaseModel):
    """What publish / reject did."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    plan_id: str
    inventory: str
    fingerprint: str
    key: str
    sha256: str
    status: Status
    is_current: bool
    store: str
    reason: str
    outcome: str = ""  # the gate's outcome (approved / rejected / equivalent / inconclusive)
    already_decided: bool = False  # the store held a decision for this plan id and inventory version: nothing written


class PlanRecord(BaseModel):
    """One stored plan, as `plans list` shows it (`problem` set, other fields partly empty, when it is corrupt)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    plan_id: str
    inventory: str
    fingerprint: str
    sharder: str
    stored_at: datetime | None  # the store's own write (the record), never a date the plan file states
    overall_ms: float | None
    basis: str | None
    status: Status
    key: str
    is_current: bool
    reason: str
    outcome: str = ""  # the gate's outcome as recorded (approved / rejected / equivalent / inconclusive)
    problem: str = ""  # why the stored plan cannot be used (checksum mismatch, unreadable); "" when it is fine
    # what the plan is for (None / empty when it is corrupt): the job's topology and world size, the table schema
    # (recomputed from the stored inventory version: `inventories.VersionSchemas`), tables per sharding type
    topology: Topology | None = None
    world_size: int | None = None
    schema_fingerprint: str | None = None
    sharding_types: dict[str, int] = Field(default_factory=dict)
    pending: PendingChange | None = None  # status pending: the change that waits for a reviewer


class FsckIssue(BaseModel):
    """One inconsistency `plans fsck` found."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str
    problem: str
    fix: str


class InventoryRef(BaseModel):
    """Where one stored inventory version lives."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    fingerprint: str
    key: str
    uri: str
    sha256: str
    pushed_at: datetime = Field(default_factory=utcnow)
    changed: bool = True  # False when this fingerprint was already current


class Orphan(BaseModel):
    """A leftover of an interrupted publish (dreamshard.store.orphans: the definition), as `plans list` warns of it,
    `plans fsck` reports it and `plans gc` removes it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str  # the plan object's key (the checksum object's, for a checksum without its plan)
    inventory: str
    plan_id: str
    what: str  # which objects were left, in words
    leftovers: tuple[str, ...]  # the keys `plans gc` deletes, in its order (the plan object last)
    written_at: datetime  # the store's own write time of the newest leftover
    in_flight: bool  # written within the grace period: maybe a publish still running; never deleted


class GcResult(BaseModel):
    """What `plans gc` did: the orphans it removed (or would remove, with `dry_run`) and those it kept because they
    are within the grace period (maybe a publish in flight)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    location: str
    grace_minutes: float
    dry_run: bool = False
    removed: tuple[Orphan, ...] = ()
    kept: tuple[Orphan, ...] = ()
