"""The plan store a command works on (--store, else publish.store_uri of the settings) and plans in it: by id, the
current one, and the one a job of a given topology runs now."""

from __future__ import annotations

from pathlib import Path

from dreamshard.config.settings import Settings
from dreamshard.errors import ConfigError, StoreError
from dreamshard.store import get_current, open_store, show
from dreamshard.store.base import PlanStore
from dreamshard.store.keys import current_key
from dreamshard.store.local import LocalPlanStore
from dreamshard.store.lookup import approved_plan_for
from dreamshard.values import Plan, Topology


def open_plan_store(
    settings: Settings, store: str | None, endpoint_url: str | None, existing: bool = True
) -> PlanStore:
    """The plan store; a local one must already exist unless `existing` is False (publish creates it), so a
    mistyped --store is an error rather than an empty listing."""
    s = open_store(store or settings.publish.store_uri, endpoint_url=endpoint_url)
    if existing and isinstance(s, LocalPlanStore) and not Path(s.location).is_dir():
        raise StoreError(f"no plan store at {s.location} (no such directory): check --store, or publish a plan first")
    return s


def stored_plan(store: PlanStore, plan_id: str, inventory: str | None, command: str = "show") -> Plan:
    """A stored plan by id, or the current one of `inventory` when plan_id is 'current' (checksum-verified)."""
    if plan_id == "current":
        if not inventory:
            raise ConfigError(f"`plans {command} current` needs --inventory NAME")
        return get_current(store, inventory)
    return show(store, plan_id, inventory)


def current_or_none(store: PlanStore, inventory: str) -> Plan | None:
    """The current plan of `inventory`, or None when there is none yet (or its pointer is broken, which
    `plans fsck` reports): what a new version is planned from (dreamshard.pipeline.incumbent). A name no store key
    can hold is a StoreError, not "none"."""
    current_key(inventory)
    try:
        return get_current(store, inventory)
    except StoreError:
        return None


def job_incumbent(store: PlanStore, inventory: str, topology: Topology, current: Plan | None = None) -> Plan | None:
    """The plan the job of `topology` runs now, which a new version's search starts from: the current plan of
    `inventory` (`current`, when the caller read it) when it is for that world size, else the latest approved plan
    of the inventory that is (dreamshard.store.lookup; None: none is)."""
    current = current if current is not None else current_or_none(store, inventory)
    if current is not None and current.topology.num_devices == topology.num_devices:
        return current
    return approved_plan_for(store, None, topology.num_devices, inventory=inventory).plan
