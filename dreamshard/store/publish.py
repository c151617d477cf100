"""Publishing plans to a PlanStore: versioned keys, checksums, a compare-and-swapped `current` pointer.

Layout (keys relative to the store root):

    plans/<inventory>/<fingerprint>/<plan_id>.json             the plan (UTF-8 JSON)
    plans/<inventory>/<fingerprint>/<plan_id>.json.sha256      "<hex>  <plan_id>.json" (sha256sum format)
    plans/<inventory>/<fingerprint>/<plan_id>.record.json      status, gate decision, publish time
    plans/<inventory>/<fingerprint>/rejected/<plan_id>.*       the same for plans the gate rejected
    plans/<inventory>/current.json                             the pointer readers resolve

The pointer is written only after the uploaded plan was read back and its checksum verified, with a
compare-and-swap (PlanStore.put_if) so concurrent publishers and rollbacks never lose or corrupt it.
Nothing is ever deleted: old versions stay for rollback. A corrupt pointer is repaired with
`dreamshard plans rollback --inventory NAME --to PLAN_ID`; `dreamshard plans fsck` lists what is inconsistent
(orphans of an interrupted publish, checksum mismatches, unreadable objects). See docs/architecture.md.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from datetime import datetime, timezone
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
    """One stored plan, as `plans list` shows it (`problem` set, other fields partly empty, when it is corrupt)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    plan_id: str
    inventory: str
    fingerprint: str
    sharder: str
    created_at: datetime | None
    overall_ms: float | None
    basis: str | None
    status: Status
    key: str
    is_current: bool
    reason: str
    problem: str = ""  # why the stored plan cannot be used (checksum mismatch, unreadable); "" when it is fine


class FsckIssue(BaseModel):
    """One inconsistency `plans fsck` found."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str
    problem: str
    fix: str


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
        pointer = CurrentPointer.model_validate_json(data)
    except ValidationError as e:
        raise StoreError(
            f"{current_key(inventory)} in {store.location} is not a valid pointer "
            f"({describe_validation_error(e)}); repair it with `dreamshard plans rollback --inventory {inventory} "
            f"--to PLAN_ID` (ids: `dreamshard plans list --inventory {inventory}`)"
        ) from None
    if pointer.inventory != inventory:
        raise StoreError(
            f"{current_key(inventory)} in {store.location} points into inventory '{pointer.inventory}'; repair it "
            f"with `dreamshard plans rollback --inventory {inventory} --to PLAN_ID`"
        )
    return pointer


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


def _pointer_or_problem(store: PlanStore, inventory: str) -> tuple[CurrentPointer | None, str]:
    try:
        return get_pointer(store, inventory), ""
    except StoreError as e:
        return None, str(e)


def _record(store: PlanStore, key: str) -> PlanRecordFile | None:
    try:
        return PlanRecordFile.model_validate_json(store.get_bytes(_record_key(key)))
    except (KeyNotFoundError, ValidationError, ValueError):
        return None


def list_plans(store: PlanStore, inventory: str | None = None) -> list[PlanRecord]:
    """Every stored plan of `inventory` (all inventories if None), oldest first, each checksum-verified.

    A plan that fails verification (checksum mismatch, unreadable, invalid) is listed with its `problem`
    instead of failing the whole listing; a corrupt pointer only means no plan of that inventory is marked
    current.
    """
    inventories = [inventory] if inventory else list_inventories(store)
    out: list[PlanRecord] = []
    for inv in inventories:
        pointer, _ = _pointer_or_problem(store, inv)
        for key in _plan_keys(store, inv):
            status: Status = "rejected" if f"/{REJECTED}/" in key else "approved"
            record = _record(store, key)
            common = {"inventory": inv, "status": status, "key": key, "reason": record.gate.reason if record else "",
                      "is_current": pointer is not None and pointer.key == key}
            try:
                plan = load_verified(store, key, pointer.sha256 if pointer is not None and pointer.key == key else None)
            except (StoreError, PlanError) as e:
                out.append(_broken_record(key, str(e), common))
                continue
            costs = plan.best_costs
            out.append(
                PlanRecord(
                    plan_id=plan.plan_id,
                    fingerprint=plan.inventory_fingerprint,
                    sharder=plan.sharder,
                    created_at=plan.created_at,
                    overall_ms=costs.overall_ms if costs else None,
                    basis=plan.cost_basis,
                    **common,
                )
            )
    return sorted(out, key=lambda r: (r.inventory, r.created_at or _EPOCH, r.plan_id))


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _broken_record(key: str, problem: str, common: dict[str, object]) -> PlanRecord:
    parts = key.split("/")
    return PlanRecord(
        plan_id=parts[-1].removesuffix(".json"), fingerprint=parts[2], sharder="", created_at=None,
        overall_ms=None, basis=None, problem=problem, **common,  # type: ignore[arg-type]
    )


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
    store: PlanStore,
    inventory: str,
    make: Callable[[CurrentPointer | None], CurrentPointer | None],
    *,
    repair: bool = False,
) -> CurrentPointer:
    """Compare-and-swap loop on plans/<inventory>/current.json: `make` maps the pointer read to the new one
    (None: keep it as it is). With `repair`, a corrupt pointer is read as None (and so replaced)."""
    written: list[CurrentPointer] = []

    def step(raw: bytes | None) -> bytes | None:
        old = None
        if raw is not None:
            try:
                old = _parse_pointer(store, inventory, raw)
            except StoreError:
                if not repair:
                    raise
        new = make(old)
        if new is None:
            assert old is not None
            written[:] = [old]
            return None
        written[:] = [new]
        return (new.model_dump_json(indent=2) + "\n").encode()

    cas_update(store, current_key(inventory), step)
    return written[0]


def _advance(inventory: str, target: PointerEntry, old: CurrentPointer | None, action: str) -> CurrentPointer:
    # The target leaves the history wherever it was, so the history never lists a version twice.
    earlier = ((old.entry(),) + old.history) if old else ()
    history = tuple(e for e in earlier if e.plan_id != target.plan_id)[:HISTORY_LIMIT]
    undone = tuple(e for e in (old.rolled_back if old else ()) if e.plan_id != target.plan_id)[:HISTORY_LIMIT]
    return CurrentPointer(
        inventory=inventory,
        **target.model_dump(),
        action=action,  # type: ignore[arg-type]
        previous=history[0] if history else None,
        history=history,
        rolled_back=undone,
    )


def publish(store: PlanStore, plan: Plan, approval: GateDecision) -> PublishedRef:
    """Upload an approved plan under its versioned key, verify its checksum, then move `current` to it.

    Publishing the plan that is already current changes nothing (no duplicate in the history). A corrupt
    pointer fails the publish before anything is uploaded (no orphan files)."""
    _check_decision(plan, approval)
    if not approval.approved:
        raise PlanError(f"plan {plan.plan_id} was not approved by the gate: {approval.reason}")
    store.check()
    get_pointer(store, plan.inventory_name)  # fail before uploading if the pointer cannot be updated
    key, digest = _upload_verified(store, plan, approval, "approved")
    target = PointerEntry(
        plan_id=plan.plan_id,
        key=key,
        sha256=digest,
        fingerprint=plan.inventory_fingerprint,
        sharder=plan.sharder,
        published_at=utcnow(),
    )

    def make(old: CurrentPointer | None) -> CurrentPointer | None:
        if old is not None and old.key == key and old.sha256 == digest:
            return None  # already current
        return _advance(plan.inventory_name, target, old, "publish")

    update_pointer(store, plan.inventory_name, make)
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


def _original_sha(store: PlanStore, key: str, plan_id: str, pointer: CurrentPointer | None) -> str:
    """The checksum a stored plan had when it was published: the pointer's history (written when it became
    current) first, else its record; the sidecar must agree with it. A rewritten sidecar is not enough."""
    sidecar = _expected_sha(store, key)
    known = [e.sha256 for e in ((pointer.entry(),) + pointer.history + pointer.rolled_back if pointer else ())
             if e.plan_id == plan_id]
    record = _record(store, key)
    original = known[0] if known else (record.sha256 if record is not None else sidecar)
    for source, want in (("its record", record.sha256 if record else None), ("its checksum file", sidecar)):
        if want is not None and want != original:
            raise StoreError(
                f"{key} in {store.location}: {source} says sha256 {want[:16]}, the pointer's history says "
                f"{original[:16]}; the plan or its checksum was modified: choose another version"
            )
    return original


def rollback(store: PlanStore, inventory: str, to_plan_id: str | None = None) -> CurrentPointer:
    """Move `current` back to the version before it (or to approved plan `to_plan_id`); nothing is deleted.

    Without --to, rollbacks walk back through the pointer's history one version at a time. With --to, a
    corrupt pointer is replaced (the documented repair); the target is verified against the checksum it had
    when published (the pointer's history, else its record), not only its (rewritable) checksum file.
    """
    store.check()
    explicit: tuple[str, Plan, datetime] | None = None
    if to_plan_id is not None:
        key = _find_key(store, to_plan_id, inventory)
        if key is None:
            raise StoreError(
                f"no plan '{to_plan_id}' for inventory '{inventory}' in {store.location}; "
                f"see `dreamshard plans list --inventory {inventory}`"
            )
        if f"/{REJECTED}/" in key:
            raise StoreError(f"plan '{to_plan_id}' was rejected by the gate and cannot become current")
        pointer, _ = _pointer_or_problem(store, inventory)
        sha = _original_sha(store, key, to_plan_id, pointer)
        plan = load_verified(store, key, sha)
        record = _record(store, key)
        explicit = (key, plan, record.stored_at if record is not None else plan.created_at)

    def make(old: CurrentPointer | None) -> CurrentPointer:
        if old is None and explicit is None:
            raise StoreError(f"no current plan for inventory '{inventory}' in {store.location}; nothing to roll back")
        if explicit is not None:
            key, plan, published_at = explicit
            if old is not None and old.plan_id == plan.plan_id:
                raise StoreError(f"plan '{plan.plan_id}' is already current for inventory '{inventory}'")
            target = PointerEntry(
                plan_id=plan.plan_id, key=key, sha256=_original_sha(store, key, plan.plan_id, old),
                fingerprint=plan.inventory_fingerprint, sharder=plan.sharder, published_at=published_at,
            )
            return _advance(inventory, target, old, "rollback")
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
            rolled_back=((old.entry(),) + tuple(e for e in old.rolled_back if e.plan_id != target.plan_id))[:HISTORY_LIMIT],
        )

    return update_pointer(store, inventory, make, repair=to_plan_id is not None)


def fsck(store: PlanStore, inventory: str | None = None) -> list[FsckIssue]:
    """Everything inconsistent in the plan store (all inventories if None); changes nothing.

    Finds: corrupt or dangling `current` pointers, plans whose bytes do not match their checksum file, record
    or pointer, unreadable or invalid plans, checksum/record files without their plan (orphans), approved
    plans that never became current (an interrupted publish), and stored inventory versions that are corrupt.
    """
    out: list[FsckIssue] = []
    inventories = [inventory] if inventory else list_inventories(store)
    for inv in inventories:
        pointer, problem = _pointer_or_problem(store, inv)
        if problem:
            out.append(FsckIssue(key=current_key(inv), problem=problem,
                                 fix=f"dreamshard plans rollback --inventory {inv} --to PLAN_ID"))
        elif pointer is not None:
            try:
                load_verified(store, pointer.key, pointer.sha256)
            except (StoreError, PlanError) as e:
                out.append(FsckIssue(key=current_key(inv), problem=f"current plan {pointer.plan_id}: {e}",
                                     fix=f"dreamshard plans rollback --inventory {inv}"))
        entries = ((pointer.entry(),) + pointer.history) if pointer else ()
        referenced = {e.key for e in entries} | ({e.key for e in pointer.rolled_back} if pointer else set())
        for e in entries[1:]:
            found = store.get_versioned(e.key)
            if found is not None and sha256_hex(found[0]) != e.sha256:
                out.append(FsckIssue(key=e.key, problem=f"plan {e.plan_id} was modified since it was current "
                                     f"(pointer history says sha256 {e.sha256[:16]})", fix="never roll back to it"))
        plans = set(_plan_keys(store, inv))
        for key in sorted(plans):
            problems = list(_plan_problems(store, key, inv))
            out.extend(problems)
            record = _record(store, key)
            if (
                not problems  # a corrupt plan is never offered as a rollback target
                and f"/{REJECTED}/" not in key
                and key not in referenced
                and not problem
                and (pointer is None or len(pointer.history) < HISTORY_LIMIT)
            ):
                out.append(FsckIssue(
                    key=key, problem="approved plan that never became current (an interrupted publish?)",
                    fix=f"re-publish it, or `dreamshard plans rollback --inventory {inv} --to "
                        f"{key.rsplit('/', 1)[-1].removesuffix('.json')}`",
                ))
            if record is not None and record.status != ("rejected" if f"/{REJECTED}/" in key else "approved"):
                out.append(FsckIssue(key=_record_key(key), problem=f"record says '{record.status}' but the plan "
                                     "is stored elsewhere", fix="re-publish the plan"))
        for key in store.list_keys(inventory_prefix(inv)):
            if key.endswith(".json.sha256") and key.removesuffix(".sha256") not in plans:
                out.append(FsckIssue(key=key, problem="checksum file without its plan (orphan)", fix="delete it"))
            elif key.endswith(".record.json") and key.removesuffix(".record.json") + ".json" not in plans:
                out.append(FsckIssue(key=key, problem="record without its plan (orphan)", fix="delete it"))
    if inventory is None:
        from dreamshard.events import check_inventory_store

        out.extend(FsckIssue(key=k, problem=p, fix=f) for k, p, f in check_inventory_store(store))
    return out


def _plan_problems(store: PlanStore, key: str, inventory: str) -> list[FsckIssue]:
    """Problems of one stored plan: missing/mismatched checksum file or record, unreadable or invalid bytes."""
    out: list[FsckIssue] = []
    record = _record(store, key)
    try:
        data = store.get_bytes(key)
        got = sha256_hex(data)
        load_verified(store, key)
    except (StoreError, PlanError) as e:
        return [FsckIssue(key=key, problem=str(e), fix="roll back if it is current; re-publish it")]
    if record is None:
        out.append(FsckIssue(key=_record_key(key), problem="missing or unreadable record", fix="re-publish the plan"))
    elif record.sha256 != got:
        out.append(FsckIssue(key=key, problem=f"record says sha256 {record.sha256[:16]}, object has {got[:16]}",
                             fix=f"the plan was modified: roll back if it is current ({inventory}); re-publish it"))
    return out


def pointer_json(pointer: CurrentPointer) -> str:
    return json.dumps(pointer.model_dump(mode="json"), indent=2)
