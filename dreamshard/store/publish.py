"""Publishing plans to a PlanStore: versioned keys, checksums, a compare-and-swapped `current` pointer.

Layout (keys relative to the store root):

    plans/<inventory>/<fingerprint>/<plan_id>.json             the plan (UTF-8 JSON)
    plans/<inventory>/<fingerprint>/<plan_id>.json.sha256      "<hex>  <plan_id>.json" (sha256sum format)
    plans/<inventory>/<fingerprint>/<plan_id>.record.json      status, gate decision, publish time
    plans/<inventory>/<fingerprint>/rejected/<plan_id>.*       the same for plans the gate rejected
    plans/<inventory>/current.json                             the pointer readers resolve

The pointer is written only after the uploaded plan was read back and its checksum verified, with a
compare-and-swap (PlanStore.put_if) so concurrent publishers and rollbacks never lose or corrupt it.
Nothing is ever deleted: old versions stay for rollback.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dreamshard.errors import PlanError, StoreError
from dreamshard.gate import GateDecision
from dreamshard.io import describe_validation_error
from dreamshard.store.base import KeyNotFoundError, PlanStore, cas_update, check_key_part
from dreamshard.types import Plan, utcnow

ROOT = "plans"
CURRENT = "current.json"
REJECTED = "rejected"
HISTORY_LIMIT = 100

Status = Literal["approved", "rejected"]


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
    previous: PointerEntry | None = None
    history: tuple[PointerEntry, ...] = ()  # earlier current versions, most recent first

    def entry(self) -> PointerEntry:
        return PointerEntry(
            plan_id=self.plan_id,
            key=self.key,
            sha256=self.sha256,
            fingerprint=self.fingerprint,
            sharder=self.sharder,
            published_at=self.published_at,
        )


class PlanRecordFile(BaseModel):
    """<plan_id>.record.json: why a plan is in the store."""

    model_config = ConfigDict(extra="forbid")

    plan_id: str
    status: Status
    sha256: str
    stored_at: datetime = Field(default_factory=utcnow)
    gate: GateDecision


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


class PlanRecord(BaseModel):
    """One stored plan, as `plans list` shows it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    plan_id: str
    inventory: str
    fingerprint: str
    sharder: str
    created_at: datetime
    overall_ms: float | None
    basis: str | None
    status: Status
    key: str
    is_current: bool
    reason: str


# -- keys ---------------------------------------------------------------------------------------------
def inventory_prefix(inventory: str) -> str:
    return f"{ROOT}/{check_key_part(inventory, 'inventory name')}/"


def current_key(inventory: str) -> str:
    return inventory_prefix(inventory) + CURRENT


def plan_key(plan: Plan, status: Status = "approved") -> str:
    base = inventory_prefix(plan.inventory_name) + check_key_part(plan.inventory_fingerprint, "inventory fingerprint")
    sub = f"/{REJECTED}" if status == "rejected" else ""
    return f"{base}{sub}/{check_key_part(plan.plan_id, 'plan id')}.json"


def _sidecar(key: str) -> str:
    return key + ".sha256"


def _record_key(key: str) -> str:
    return key.removesuffix(".json") + ".record.json"


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# -- reading --------------------------------------------------------------------------------------------
def _expected_sha(store: PlanStore, key: str) -> str:
    try:
        text = store.get_bytes(_sidecar(key)).decode("utf-8", "replace")
    except KeyNotFoundError:
        raise StoreError(f"{key} in {store.location} has no checksum file {_sidecar(key)}; re-publish it") from None
    return text.split()[0] if text.split() else ""


def load_verified(store: PlanStore, key: str, expected_sha: str | None = None) -> Plan:
    """Read a plan, check its sha256 against the pointer's (if given) and its sidecar, then parse it."""
    data = store.get_bytes(key)
    got = sha256_hex(data)
    for source, want in (("current pointer", expected_sha), ("checksum file", _expected_sha(store, key))):
        if want is not None and want != got:
            raise StoreError(
                f"checksum mismatch for {key} in {store.location}: {source} says {want[:16]}, "
                f"object has {got[:16]}; the object is corrupt or was modified: roll back or re-publish"
            )
    try:
        return Plan.model_validate_json(data)
    except ValidationError as e:
        raise PlanError(f"{key} in {store.location}: {describe_validation_error(e)}") from None


def get_pointer(store: PlanStore, inventory: str) -> CurrentPointer | None:
    """The current pointer of `inventory`, or None if nothing was published yet."""
    got = store.get_versioned(current_key(inventory))
    return None if got is None else _parse_pointer(store, inventory, got[0])


def _parse_pointer(store: PlanStore, inventory: str, data: bytes) -> CurrentPointer:
    try:
        return CurrentPointer.model_validate_json(data)
    except ValidationError as e:
        raise StoreError(
            f"{current_key(inventory)} in {store.location} is not a valid pointer "
            f"({describe_validation_error(e)}); roll back with --to PLAN_ID to rewrite it"
        ) from None


def get_current(store: PlanStore, inventory: str) -> Plan:
    """The plan `current` points at, checksum-verified."""
    pointer = get_pointer(store, inventory)
    if pointer is None:
        raise StoreError(f"no current plan for inventory '{inventory}' in {store.location}; publish one first")
    return load_verified(store, pointer.key, pointer.sha256)


def _plan_keys(store: PlanStore, inventory: str | None = None) -> list[str]:
    prefix = inventory_prefix(inventory) if inventory else f"{ROOT}/"
    out = []
    for key in store.list_keys(prefix):
        parts = key.split("/")
        if not key.endswith(".json") or key.endswith(".record.json") or parts[-1] == CURRENT:
            continue
        if len(parts) == 4 or (len(parts) == 5 and parts[3] == REJECTED):
            out.append(key)
    return out


def _find_key(store: PlanStore, plan_id: str, inventory: str | None) -> str | None:
    check_key_part(plan_id, "plan id")
    approved = rejected = None
    for key in _plan_keys(store, inventory):
        if key.rsplit("/", 1)[-1] == f"{plan_id}.json":
            if f"/{REJECTED}/" in key:
                rejected = key
            else:
                approved = key
    return approved or rejected


def show(store: PlanStore, plan_id: str, inventory: str | None = None) -> Plan:
    """A stored plan (approved or rejected) by id, checksum-verified."""
    key = _find_key(store, plan_id, inventory)
    if key is None:
        where = f" for inventory '{inventory}'" if inventory else ""
        raise StoreError(f"no plan '{plan_id}'{where} in {store.location}; see `dreamshard plans list`")
    return load_verified(store, key)


def list_inventories(store: PlanStore) -> list[str]:
    return sorted({k.split("/")[1] for k in store.list_keys(f"{ROOT}/") if k.count("/") >= 2})


def list_plans(store: PlanStore, inventory: str | None = None) -> list[PlanRecord]:
    """Every stored plan of `inventory` (all inventories if None), oldest first."""
    inventories = [inventory] if inventory else list_inventories(store)
    out: list[PlanRecord] = []
    for inv in inventories:
        pointer = get_pointer(store, inv)
        for key in _plan_keys(store, inv):
            try:
                plan = Plan.model_validate_json(store.get_bytes(key))
            except ValidationError as e:
                raise PlanError(f"{key} in {store.location}: {describe_validation_error(e)}") from None
            status: Status = "rejected" if f"/{REJECTED}/" in key else "approved"
            reason = ""
            try:
                reason = PlanRecordFile.model_validate_json(store.get_bytes(_record_key(key))).gate.reason
            except (KeyNotFoundError, ValidationError):
                pass
            costs = plan.best_costs
            out.append(
                PlanRecord(
                    plan_id=plan.plan_id,
                    inventory=inv,
                    fingerprint=plan.inventory_fingerprint,
                    sharder=plan.sharder,
                    created_at=plan.created_at,
                    overall_ms=costs.overall_ms if costs else None,
                    basis=("measured" if plan.measured else "predicted") if costs else None,
                    status=status,
                    key=key,
                    is_current=pointer is not None and pointer.key == key,
                    reason=reason,
                )
            )
    return sorted(out, key=lambda r: (r.inventory, r.created_at, r.plan_id))


# -- writing --------------------------------------------------------------------------------------------
def _upload_verified(store: PlanStore, plan: Plan, decision: GateDecision, status: Status) -> tuple[str, str]:
    """Upload plan + checksum + record, read the plan back and verify it. Returns (key, sha256)."""
    key = plan_key(plan, status)
    data = (plan.model_dump_json(indent=2) + "\n").encode()
    digest = sha256_hex(data)
    existing = store.get_versioned(key)
    if existing is not None and sha256_hex(existing[0]) != digest:
        raise StoreError(
            f"{key} already exists in {store.location} with different content; plan ids must be unique"
        )
    store.put_bytes(key, data)
    store.put_bytes(_sidecar(key), f"{digest}  {key.rsplit('/', 1)[-1]}\n".encode())
    record = PlanRecordFile(plan_id=plan.plan_id, status=status, sha256=digest, gate=decision)
    store.put_bytes(_record_key(key), (record.model_dump_json(indent=2) + "\n").encode())
    back = store.get_bytes(key)
    if sha256_hex(back) != digest or _expected_sha(store, key) != digest:
        raise StoreError(
            f"uploaded plan {key} to {store.location} failed checksum verification on read-back; "
            f"current was not moved: retry the publish"
        )
    return key, digest


def _check_decision(plan: Plan, decision: GateDecision) -> None:
    if decision.plan_id and decision.plan_id != plan.plan_id:
        raise PlanError(f"gate decision is for plan '{decision.plan_id}', not '{plan.plan_id}'")


def update_pointer(
    store: PlanStore, inventory: str, make: Callable[[CurrentPointer | None], CurrentPointer]
) -> CurrentPointer:
    """Compare-and-swap loop on plans/<inventory>/current.json: `make` maps the pointer read to the new one."""
    written: list[CurrentPointer] = []

    def step(raw: bytes | None) -> bytes:
        new = make(None if raw is None else _parse_pointer(store, inventory, raw))
        written[:] = [new]
        return (new.model_dump_json(indent=2) + "\n").encode()

    cas_update(store, current_key(inventory), step)
    return written[0]


def _advance(inventory: str, target: PointerEntry, old: CurrentPointer | None, action: str) -> CurrentPointer:
    history = ((old.entry(),) + old.history)[:HISTORY_LIMIT] if old else ()
    return CurrentPointer(
        inventory=inventory,
        **target.model_dump(),
        action=action,  # type: ignore[arg-type]
        previous=history[0] if history else None,
        history=history,
    )


def publish(store: PlanStore, plan: Plan, approval: GateDecision) -> PublishedRef:
    """Upload an approved plan under its versioned key, verify its checksum, then move `current` to it."""
    _check_decision(plan, approval)
    if not approval.approved:
        raise PlanError(f"plan {plan.plan_id} was not approved by the gate: {approval.reason}")
    store.check()
    key, digest = _upload_verified(store, plan, approval, "approved")
    target = PointerEntry(
        plan_id=plan.plan_id,
        key=key,
        sha256=digest,
        fingerprint=plan.inventory_fingerprint,
        sharder=plan.sharder,
        published_at=utcnow(),
    )
    update_pointer(store, plan.inventory_name, lambda old: _advance(plan.inventory_name, target, old, "publish"))
    return _ref(store, plan, key, digest, approval)


def _ref(store: PlanStore, plan: Plan, key: str, digest: str, decision: GateDecision) -> PublishedRef:
    return PublishedRef(
        plan_id=plan.plan_id,
        inventory=plan.inventory_name,
        fingerprint=plan.inventory_fingerprint,
        key=key,
        sha256=digest,
        status="approved" if decision.approved else "rejected",
        is_current=decision.approved,
        store=store.location,
        reason=decision.reason,
    )


def reject(store: PlanStore, plan: Plan, decision: GateDecision) -> PublishedRef:
    """Keep a rejected plan (with the gate's reason) under rejected/; it never becomes current."""
    _check_decision(plan, decision)
    if decision.approved:
        raise PlanError(f"plan {plan.plan_id} was approved by the gate; publish it instead")
    store.check()
    key, digest = _upload_verified(store, plan, decision, "rejected")
    return _ref(store, plan, key, digest, decision)


def publish_or_reject(store: PlanStore, plan: Plan, decision: GateDecision) -> PublishedRef:
    return publish(store, plan, decision) if decision.approved else reject(store, plan, decision)


def rollback(store: PlanStore, inventory: str, to_plan_id: str | None = None) -> CurrentPointer:
    """Move `current` back to the version before it (or to approved plan `to_plan_id`); nothing is deleted.

    Without --to, rollbacks walk back through the pointer's history one version at a time.
    """
    explicit: PointerEntry | None = None
    if to_plan_id is not None:
        key = _find_key(store, to_plan_id, inventory)
        if key is None:
            raise StoreError(f"no plan '{to_plan_id}' for inventory '{inventory}' in {store.location}")
        if f"/{REJECTED}/" in key:
            raise StoreError(f"plan '{to_plan_id}' was rejected by the gate and cannot become current")
        plan = load_verified(store, key)
        published_at = plan.created_at
        try:
            published_at = PlanRecordFile.model_validate_json(store.get_bytes(_record_key(key))).stored_at
        except (KeyNotFoundError, ValidationError):
            pass
        explicit = PointerEntry(
            plan_id=plan.plan_id,
            key=key,
            sha256=_expected_sha(store, key),
            fingerprint=plan.inventory_fingerprint,
            sharder=plan.sharder,
            published_at=published_at,
        )

    def make(old: CurrentPointer | None) -> CurrentPointer:
        if old is None and explicit is None:
            raise StoreError(f"no current plan for inventory '{inventory}' in {store.location}; nothing to roll back")
        if explicit is not None:
            if old is not None and old.plan_id == explicit.plan_id:
                raise StoreError(f"plan '{explicit.plan_id}' is already current for inventory '{inventory}'")
            return _advance(inventory, explicit, old, "rollback")
        assert old is not None
        if not old.history:
            raise StoreError(
                f"current plan '{old.plan_id}' of inventory '{inventory}' has no previous version to roll back to"
            )
        target, rest = old.history[0], old.history[1:]
        load_verified(store, target.key, target.sha256)  # never point at a corrupt version
        return CurrentPointer(
            inventory=inventory,
            **target.model_dump(),
            action="rollback",
            previous=rest[0] if rest else None,
            history=rest,
        )

    return update_pointer(store, inventory, make)


def pointer_json(pointer: CurrentPointer) -> str:
    return json.dumps(pointer.model_dump(mode="json"), indent=2)
