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


def push_inventory(store: PlanStore, inventory: Inventory, store_uri: str = "") -> InventoryRef:
    """Store `inventory` as a new version (if new) and point ``current`` at it (compare-and-swap).

    The version object is written and read back before the pointer moves, so readers of ``current``
    never see a partial inventory.
    """
    fp = inventory.fingerprint()
    key = inventory_key(inventory.name, fp)
    data = model_yaml(inventory).encode()
    digest = hashlib.sha256(data).hexdigest()
    if not store.exists(key):
        store.put_bytes(key, data)
    stored = store.get_bytes(key)
    if Inventory.model_validate(_load_yaml(stored)).fingerprint() != fp:
        raise StoreError(f"inventory '{inventory.name}': stored copy at {key} does not match fingerprint {fp[:12]}")
    uri = f"{store_uri.rstrip('/')}/{key}" if store_uri else key
    ref = InventoryRef(name=inventory.name, fingerprint=fp, key=key, uri=uri, sha256=digest)
    wrote = False

    def step(raw: bytes | None) -> bytes | None:
        nonlocal wrote
        wrote = raw is None or json.loads(raw).get("fingerprint") != fp
        # already current: keep the pointer (and its pushed_at)
        return ref.model_dump_json(indent=2, exclude={"changed"}).encode() if wrote else None

    current = cas_update(store, current_inventory_key(inventory.name), step)
    return ref if wrote else InventoryRef.model_validate({**json.loads(current), "uri": uri, "changed": False})


def _load_yaml(data: bytes) -> object:
    import yaml

    return yaml.safe_load(data.decode())


def get_current_inventory(store: PlanStore, name: str) -> tuple[Inventory, InventoryRef] | None:
    """The current inventory version of `name`, or None when none was pushed."""
    found = store.get_versioned(current_inventory_key(name))
    if found is None:
        return None
    ref = InventoryRef.model_validate(json.loads(found[0]))
    inv = Inventory.model_validate(_load_yaml(store.get_bytes(ref.key)))
    return inv, ref


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
