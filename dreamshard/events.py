"""Inventory versions in the plan store and the `dreamshard.inventory.changed` event.

Pushing an inventory stores it under ``inventories/<name>/<fingerprint>.yaml`` (content-addressed, never
overwritten), moves ``inventories/<name>/current.json`` with a compare-and-swap, and emits a Prefect event
that the orchestrator deployment's trigger listens for. Prefect is imported lazily: the store part works
without a Prefect API, and emitting is a no-op (returns None) when no API is configured.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from dreamshard.errors import StoreError
from dreamshard.io import model_yaml
from dreamshard.store.base import PlanStore, cas_update, check_key_part
from dreamshard.types import Inventory, utcnow

#: Event name the orchestrator's deployment trigger matches.
INVENTORY_CHANGED_EVENT = "dreamshard.inventory.changed"
INVENTORY_PREFIX = "inventories"


def inventory_resource_id(name: str) -> str:
    """Prefect resource id of an inventory: ``dreamshard.inventory.<name>``."""
    return f"dreamshard.inventory.{name}"


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


def inventory_key(name: str, fingerprint: str) -> str:
    return f"{INVENTORY_PREFIX}/{check_key_part(name, 'inventory name')}/{check_key_part(fingerprint, 'fingerprint')}.yaml"


def current_inventory_key(name: str) -> str:
    return f"{INVENTORY_PREFIX}/{check_key_part(name, 'inventory name')}/current.json"


def _parse_version(data: bytes, name: str, fingerprint: str) -> Inventory | None:
    """The inventory in a stored version object, or None when it is unreadable, invalid, or not the version
    its key names (another name or fingerprint)."""
    from dreamshard.inventory.validation import InventoryNameError, check_inventory_names

    import yaml

    try:
        inv = Inventory.model_validate(_load_yaml(data))
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
    from dreamshard.inventory.validation import check_inventory_names

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
    old = _parse_ref(current)
    assert old is not None
    return old.model_copy(update={"uri": uri, "changed": False})


def _load_yaml(data: bytes) -> object:
    import yaml

    return yaml.safe_load(data.decode())


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
        raise StoreError(f"{current_inventory_key(name)} in {store.location} points at {ref.key}, which is missing; "
                         f"push the inventory again")
    return inv, ref


def check_inventory_store(store: PlanStore) -> list[tuple[str, str, str]]:
    """(key, problem, fix) for every corrupt pointer or stored version under inventories/ (`plans fsck`)."""
    out: list[tuple[str, str, str]] = []
    for key in store.list_keys(f"{INVENTORY_PREFIX}/"):
        parts = key.split("/")
        if len(parts) != 3:
            out.append((key, "unexpected object in the inventory store", "delete it"))
            continue
        name, leaf = parts[1], parts[2]
        fix = "dreamshard inventory push FILE --store ..."
        if leaf == "current.json":
            try:
                found = get_current_inventory(store, name)
            except StoreError as e:
                out.append((key, str(e), fix))
                continue
            if found is None:
                out.append((key, "pointer vanished while checking", fix))
        elif leaf.endswith(".yaml"):
            try:
                get_inventory_version(store, name, leaf.removesuffix(".yaml"))
            except StoreError as e:
                out.append((key, str(e), fix))
        else:
            out.append((key, "unexpected object in the inventory store", "delete it"))
    return out


def emit_inventory_changed(ref: InventoryRef) -> str | None:
    """Emit `dreamshard.inventory.changed` for `ref`; returns the event id, or None if not emitted."""
    from prefect.events import emit_event

    event = emit_event(
        event=INVENTORY_CHANGED_EVENT,
        resource={
            "prefect.resource.id": inventory_resource_id(ref.name),
            "prefect.resource.name": ref.name,
        },
        payload={"fingerprint": ref.fingerprint, "uri": ref.uri, "key": ref.key, "inventory_name": ref.name},
    )
    return None if event is None else str(event.id)
