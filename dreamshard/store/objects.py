"""A stored plan's objects (the plan, its checksum, its record; keys from dreamshard.store.keys): the verified
upload, checksum-verified reads, and finding plans by id."""

from __future__ import annotations

import hashlib

from pydantic import ValidationError

from dreamshard.documents import describe_validation_error
from dreamshard.errors import PlanError, StoreError
from dreamshard.store.base import KeyNotFoundError, PlanStore
from dreamshard.store.keys import PLANS_PREFIX, PlanKey, Status, inventory_of, inventory_prefix, parse_key
from dreamshard.values import GateDecision, Plan
from dreamshard.values.names import check_key_part
from dreamshard.values.records import CurrentPointer, PlanRecordFile
from dreamshard.values.review import PendingChange, Review


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def key_of(plan: Plan, status: Status = "approved") -> PlanKey:
    """Where `plan` is stored (StoreError when its inventory name, fingerprint or id is not a safe key part)."""
    return PlanKey(plan.inventory_name, plan.inventory_fingerprint, plan.plan_id, "plan", status)


def list_inventories(store: PlanStore) -> list[str]:
    return sorted({inv for k in store.list_keys(PLANS_PREFIX) if (inv := inventory_of(k)) is not None})


def plan_keys(store: PlanStore, inventory: str | None = None) -> list[PlanKey]:
    """Every stored plan (approved and rejected) of `inventory` (all if None), in key order."""
    prefix = inventory_prefix(inventory) if inventory else PLANS_PREFIX
    return [p for k in store.list_keys(prefix) if (p := parse_key(k)) is not None and p.kind == "plan"]


def find_plan(
    store: PlanStore, plan_id: str, inventory: str | None, statuses: tuple[Status, ...] = ("approved", "rejected")
) -> PlanKey | None:
    """Plan `plan_id` stored under one of `statuses` (the first of them it is stored under, in that order), or
    None. By default a decided plan: the approved one if it was also rejected; a pending plan is no decision."""
    check_key_part(plan_id, "plan id")
    found = [p for p in plan_keys(store, inventory) if p.plan_id == plan_id]
    return next((p for status in statuses for p in found if p.status == status), None)


def expected_sha(store: PlanStore, pk: PlanKey) -> str:
    """What the plan's checksum object says (StoreError when it is missing)."""
    sidecar = pk.of("checksum").key
    try:
        text = store.get_bytes(sidecar).decode("utf-8", "replace")
    except KeyNotFoundError:
        raise StoreError(f"{pk.key} in {store.location} has no checksum file {sidecar}; re-publish it") from None
    return text.split()[0] if text.split() else ""


def load_verified(store: PlanStore, pk: PlanKey, expected: str | None = None) -> Plan:
    """Read a plan, check its sha256 against `expected` (the pointer's, if given) and its checksum object, then
    parse it."""
    key = pk.key
    data = store.get_bytes(key)
    got = sha256_hex(data)
    for source, want in (("current pointer", expected), ("checksum file", expected_sha(store, pk))):
        if want is not None and want != got:
            raise StoreError(
                f"checksum mismatch for {key} in {store.location}: {source} says {want[:16]}, "
                f"object has {got[:16]}; the object is corrupt or was modified: roll back or re-publish"
            )
    return _parsed(store, pk, data)


def _parsed(store: PlanStore, pk: PlanKey, data: bytes) -> Plan:
    try:
        return Plan.model_validate_json(data)
    except ValidationError as e:
        raise PlanError(f"{pk.key} in {store.location}: {describe_validation_error(e)}") from None


def read_record(store: PlanStore, pk: PlanKey) -> PlanRecordFile | None:
    """The plan's record, or None when it is missing or unreadable."""
    try:
        return PlanRecordFile.model_validate_json(store.get_bytes(pk.of("record").key))
    except (KeyNotFoundError, ValidationError, ValueError):
        return None


def _authority(pk: PlanKey, pointer: CurrentPointer | None, record: PlanRecordFile | None) -> tuple[str, str] | None:
    """The checksum a stored plan had when it was stored, and who says so: the pointer's history (written when it
    became current), else its record (written when it was stored); None when neither knows it."""
    known = [e.sha256 for e in (pointer.entries() if pointer else ()) if e.key == pk.key]
    if known:
        return known[0], "the pointer's history"
    return (record.sha256, "its record") if record is not None else None


def _agree(
    store: PlanStore, pk: PlanKey, original: str, authority: str, sources: list[tuple[str, str | None]], fix: str
) -> None:
    """StoreError naming the plan and the first of `sources` (name, sha256 or None: not known) that disagrees with
    `authority`'s `original` checksum."""
    for source, want in sources:
        if want is not None and want != original:
            verb = "has" if source == "the object" else "says"
            raise StoreError(
                f"checksum mismatch for plan {pk.plan_id} ({pk.key} in {store.location}): {source} {verb} sha256 "
                f"{want[:16]}, {authority} says {original[:16]}; the plan or its checksum was modified: {fix}"
            )


def original_sha(
    store: PlanStore, pk: PlanKey, pointer: CurrentPointer | None, fix: str = "choose another version"
) -> str:
    """The checksum a stored plan had when it was published: the pointer's history (written when it became
    current) first, else its record; the checksum object must agree with it. A rewritten one is not enough."""
    sidecar = expected_sha(store, pk)
    record = read_record(store, pk)
    original, authority = _authority(pk, pointer, record) or (sidecar, "its checksum file")
    _agree(
        store,
        pk,
        original,
        authority,
        [("its record", record.sha256 if record else None), ("its checksum file", sidecar)],
        fix,
    )
    return original


def load_original(
    store: PlanStore, pk: PlanKey, pointer: CurrentPointer | None, fix: str, record: PlanRecordFile | None = None
) -> Plan:
    """A stored plan as it was stored: the pointer's history or its record (`record`, read here when not given)
    must know its checksum (`_authority`), and the object, its checksum file and its record must all agree with it;
    else StoreError naming the plan and what disagrees (`fix` says what to do)."""
    record = record or read_record(store, pk)
    found = _authority(pk, pointer, record)
    if found is None:
        raise StoreError(
            f"plan {pk.plan_id} ({pk.key} in {store.location}) has no readable record and was never current: "
            f"nothing to verify it against; {fix}"
        )
    data = store.get_bytes(pk.key)
    sources = [
        ("the object", sha256_hex(data)),
        ("its checksum file", expected_sha(store, pk)),
        ("its record", record.sha256 if record else None),
    ]
    _agree(store, pk, *found, sources, fix)
    return _parsed(store, pk, data)


#: How many times a publish writes its objects again when they went missing while it wrote them (a `plans gc` with a
#: grace period shorter than a publish removed them: dreamshard.store.orphans).
REWRITES = 8


def upload_verified(
    store: PlanStore,
    plan: Plan,
    decision: GateDecision,
    status: Status,
    pending: PendingChange | None = None,
    review: Review | None = None,
) -> tuple[PlanKey, str]:
    """Upload plan + checksum + record, read them back and verify them. Returns (key, sha256). The record carries
    the change a pending plan waits for (`pending`) and the reviewer's answer that decided it (`review`).

    Each object goes to its own kind's key (dreamshard.store.keys), so no write replaces another plan's object;
    a different plan already stored under this id fails the upload before anything is written. An object that is
    missing or wrong on read-back (a `plans gc` with a short grace period removed it mid-flight) is written again,
    up to REWRITES times; then StoreError."""
    pk = key_of(plan, status)
    data = (plan.model_dump_json(indent=2) + "\n").encode()
    digest = sha256_hex(data)
    existing = store.get_versioned(pk.key)
    if existing is not None and sha256_hex(existing[0]) != digest:
        raise StoreError(f"{pk.key} already exists in {store.location} with different content; plan ids must be unique")
    record = PlanRecordFile(
        plan_id=plan.plan_id, status=status, sha256=digest, gate=decision, pending=pending, review=review
    )
    objects = {
        pk.key: data,
        pk.of("checksum").key: f"{digest}  {pk.leaf}\n".encode(),
        pk.of("record").key: (record.model_dump_json(indent=2) + "\n").encode(),
    }
    missing = list(objects)
    for _ in range(REWRITES):
        for key in missing:  # in order: the plan first, its record last
            store.put_bytes(key, objects[key])
        missing = _not_read_back(store, pk, objects, digest)
        if not missing:
            return pk, digest
    raise StoreError(
        f"uploaded plan {pk.key} to {store.location} failed verification on read-back {REWRITES} times "
        f"({', '.join(missing)} missing or changed; is a `plans gc` with a short --grace-minutes running?); "
        f"current was not moved: retry the publish"
    )


def _not_read_back(store: PlanStore, pk: PlanKey, objects: dict[str, bytes], digest: str) -> list[str]:
    """The keys of `objects` (plan, checksum, record) that do not read back as written, in write order: the plan and
    its checksum byte for byte, the record as any readable record of this plan's bytes and status (a concurrent
    publisher of the same plan id may have written its own)."""
    out: list[str] = []
    for key, want in objects.items():
        if key == pk.of("record").key:
            record = read_record(store, pk)
            ok = record is not None and record.sha256 == digest and record.status == pk.status
        else:
            got = store.get_versioned(key)
            ok = got is not None and got[0] == want
        if not ok:
            out.append(key)
    return out
