"""Inventory versions in the store (keys: dreamshard.store.keys).

Pushing an inventory stores it under ``inventories/<name>/<fingerprint>.yaml`` (content-addressed, never
overwritten unless corrupt) and moves ``inventories/<name>/current.json`` with a compare-and-swap. The Prefect
event that announces a push lives in the flows package (`dreamshard_flows.events`): the library emits nothing.
"""

from __future__ import annotations

import hashlib

import yaml

from dreamshard.documents import model_yaml
from dreamshard.errors import StoreError
from dreamshard.parsing import load_yaml
from dreamshard.store.base import PlanStore, cas_update
from dreamshard.store.keys import INVENTORIES, current_inventory_key, inventory_key, parse_inventory_key
from dreamshard.values import Inventory, Plan
from dreamshard.values.names import InventoryNameError, check_inventory_names
from dreamshard.values.records import FsckIssue, InventoryRef

__all__ = [
    "InventoryRef",
    "VersionSchemas",
    "check_inventory_store",
    "current_inventory_key",
    "get_current_inventory",
    "get_inventory_version",
    "inventory_key",
    "push_inventory",
    "schema_of",
]

_PUSH = "dreamshard inventory push FILE --store ..."


def _parse_version(data: bytes, name: str, fingerprint: str) -> Inventory | None:
    """The inventory in a stored version object, or None when it is unreadable, invalid, or not the version
    its key names (another name or fingerprint)."""
    try:
        inv = Inventory.model_validate(load_yaml(data.decode()))
        check_inventory_names(inv)
    except (ValueError, yaml.YAMLError, InventoryNameError):  # ValidationError, UnicodeDecodeError are ValueErrors
        return None
    return inv if inv.name == name and inv.fingerprint() == fingerprint else None


def _parse_ref(data: bytes) -> InventoryRef | None:
    try:
        return InventoryRef.model_validate_json(data)
    except ValueError:
        return None


def push_inventory(store: PlanStore, inventory: Inventory, store_uri: str = "") -> InventoryRef:
    """Store `inventory` as a new version (if new) and point ``current`` at it (compare-and-swap).

    The version object is written and read back before the pointer moves, so readers of ``current``
    never see a partial inventory. A stored version that is corrupt or not what its key names is rewritten;
    a corrupt pointer is replaced (it is derived data: the push says what is current).
    """
    check_inventory_names(inventory)
    fp = inventory.fingerprint()
    key = inventory_key(inventory.name, fp)
    data = model_yaml(inventory).encode()
    digest = hashlib.sha256(data).hexdigest()
    found = store.get_versioned(key)
    if found is None or _parse_version(found[0], inventory.name, fp) is None:
        store.put_bytes(key, data)
        if _parse_version(store.get_bytes(key), inventory.name, fp) is None:
            raise StoreError(
                f"inventory '{inventory.name}': the copy written to {key} in {store.location} reads back differently; "
                f"retry the push"
            )
    uri = f"{store_uri.rstrip('/')}/{key}" if store_uri else key
    ref = InventoryRef(name=inventory.name, fingerprint=fp, key=key, uri=uri, sha256=digest)
    wrote = False

    def step(raw: bytes | None) -> bytes | None:
        nonlocal wrote
        old = None if raw is None else _parse_ref(raw)
        wrote = old is None or old.fingerprint != fp or old.key != key
        # already current: keep the pointer (and its pushed_at)
        return ref.model_dump_json(indent=2, exclude={"changed"}).encode() if wrote else None

    current = cas_update(store, current_inventory_key(inventory.name), step)
    if wrote:
        return ref
    assert current is not None  # not written: a pointer was there
    old = _parse_ref(current)
    assert old is not None
    return old.model_copy(update={"uri": uri, "changed": False})


def get_inventory_version(store: PlanStore, name: str, fingerprint: str) -> Inventory | None:
    """The stored version `fingerprint` of inventory `name` (verified: its content has that fingerprint), or
    None when it was never pushed. StoreError when it is there but corrupt."""
    found = store.get_versioned(inventory_key(name, fingerprint))
    if found is None:
        return None
    inv = _parse_version(found[0], name, fingerprint)
    if inv is None:
        raise StoreError(
            f"stored inventory {inventory_key(name, fingerprint)} in {store.location} is corrupt or does not have "
            f"fingerprint {fingerprint[:12]}; push the inventory file again"
        )
    return inv


class VersionSchemas:
    """The schema fingerprints of stored inventory versions, each version read and recomputed once: what the store's
    listing and lookups say a stored plan's schema is (the trust table: the inventory is the authority, never the
    plan file). A version not stored, or corrupt (`plans fsck` reports it), has none here."""

    def __init__(self, store: PlanStore) -> None:
        self.store = store
        self._known: dict[tuple[str, str], str | None] = {}

    def version(self, name: str, fingerprint: str) -> str | None:
        """The schema of stored version `fingerprint` of inventory `name` (None: not stored, or corrupt)."""
        key = (name, fingerprint)
        if key not in self._known:
            try:
                inv = get_inventory_version(self.store, name, fingerprint)
            except StoreError:
                inv = None
            self._known[key] = inv.schema_fingerprint() if inv is not None else None
        return self._known[key]

    def of(self, plan: Plan) -> str | None:
        """A stored plan's schema: its inventory version's, else the plan's own (verified against the inventory at
        publish); None for a plan older than schemas."""
        return self.version(plan.inventory_name, plan.inventory_fingerprint) or plan.schema_fingerprint


def schema_of(store: PlanStore, plan: Plan) -> str | None:
    """The schema fingerprint of the inventory version a stored plan was published for, recomputed from that
    version when the store holds it, else the plan's own (`VersionSchemas.of`)."""
    return VersionSchemas(store).of(plan)


def get_current_inventory(store: PlanStore, name: str) -> tuple[Inventory, InventoryRef] | None:
    """The current inventory version of `name`, or None when none was pushed."""
    found = store.get_versioned(current_inventory_key(name))
    if found is None:
        return None
    ref = _parse_ref(found[0])
    if ref is None:
        raise StoreError(
            f"{current_inventory_key(name)} in {store.location} is not a valid pointer; push the inventory again "
            f"(`dreamshard inventory push FILE --store ...`)"
        )
    inv = get_inventory_version(store, name, ref.fingerprint)
    if inv is None:
        raise StoreError(
            f"{current_inventory_key(name)} in {store.location} points at {ref.key}, which is missing; "
            f"push the inventory again"
        )
    return inv, ref


def check_inventory_store(store: PlanStore) -> list[FsckIssue]:
    """Every corrupt pointer or stored version under inventories/, with its fix (part of `plans fsck`)."""
    keys, unlisted = store.scan(f"{INVENTORIES}/")  # what cannot be read through is one finding each
    out = [FsckIssue(key=p.key, problem=p.problem, fix=p.fix) for p in unlisted]
    for key in keys:
        parsed = parse_inventory_key(key)
        if parsed is None:
            out.append(FsckIssue(key=key, problem="unexpected object in the inventory store", fix="delete it"))
            continue
        try:
            if parsed.fingerprint is not None:
                get_inventory_version(store, parsed.name, parsed.fingerprint)
            elif get_current_inventory(store, parsed.name) is None:
                out.append(FsckIssue(key=key, problem="pointer vanished while checking", fix=_PUSH))
        except StoreError as e:
            out.append(FsckIssue(key=key, problem=str(e), fix=_PUSH))
    return out
