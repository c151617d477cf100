"""The Prefect events the pipeline emits about the store: `dreamshard.inventory.changed` after an inventory push
(the orchestrator deployment's trigger listens for it; dreamshard_flows.deploy). The library stores inventories
(dreamshard.store.inventories) and never imports Prefect; emitting lives here."""

from __future__ import annotations

import os

from prefect.events import emit_event

from dreamshard.usecases.pipeline_steps import absolute_uri
from dreamshard.values.records import InventoryRef

#: Event name the orchestrator's deployment trigger matches.
INVENTORY_CHANGED_EVENT = "dreamshard.inventory.changed"


def inventory_resource_id(name: str) -> str:
    """Prefect resource id of an inventory: ``dreamshard.inventory.<name>``."""
    return f"dreamshard.inventory.{name}"


def store_of(ref: InventoryRef) -> str:
    """The store a version was pushed to, absolute (a local path from this process's working directory), or ""
    when its URI does not say (pushed without a store URI)."""
    if ref.uri == ref.key or not ref.uri.endswith("/" + ref.key):
        return ""
    return absolute_uri(ref.uri[: -len(ref.key) - 1])


def emit_inventory_changed(ref: InventoryRef) -> str | None:
    """Emit `dreamshard.inventory.changed` for `ref`; returns the event id, or None if not emitted (no API)."""
    event = emit_event(
        event=INVENTORY_CHANGED_EVENT,
        resource={
            "prefect.resource.id": inventory_resource_id(ref.name),
            "prefect.resource.name": ref.name,
        },
        payload={
            "fingerprint": ref.fingerprint,
            "uri": ref.uri,
            "key": ref.key,
            "inventory_name": ref.name,
            "store_uri": store_of(ref),
        },
    )
    return None if event is None else str(event.id)


def notify_inventory_changed(ref: InventoryRef) -> str | None:
    """The `prefect` notifier (entry point group `dreamshard.notifiers`, called by `dreamshard inventory push`):
    emits the event when a Prefect API is configured, else nothing (returns None)."""
    if not os.environ.get("PREFECT_API_URL"):
        return None
    return emit_inventory_changed(ref)
