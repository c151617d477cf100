"""The drift check: the current published plan of an inventory re-measured on the profile backend and compared
with the cost it recorded (dreamshard.evaluation.drift); every check goes to the store's history. Settings: profile
(backend), drift (rounds, threshold, history), publish (store)."""

from __future__ import annotations

from pathlib import Path

from dreamshard.documents import load_inventory
from dreamshard.errors import StoreError
from dreamshard.evaluation.drift import PLAN_DRIFTED_EVENT as PLAN_DRIFTED_EVENT  # what the flows emit
from dreamshard.evaluation.drift import DriftCheck, check_drift, record_check, require_comparable
from dreamshard.evaluation.drift import plan_resource_id as plan_resource_id
from dreamshard.evaluation.drift import trend_rows as trend_rows
from dreamshard.pipeline.workspace import INVENTORY
from dreamshard.store import get_current, get_inventory_version
from dreamshard.store.base import PlanStore
from dreamshard.usecases.base import Request, Result
from dreamshard.usecases.stored import open_plan_store
from dreamshard.values import Inventory, Plan


class DriftRequest(Request):
    inventory_name: str
    store: str | None = None  # None: publish.store_uri
    endpoint_url: str | None = None
    workspace: Path | None = None  # a workspace whose data/inventory.yaml may hold the plan's inventory


class DriftTarget(Result):
    """What a check measures: the store, the current plan and its own inventory version."""

    store: PlanStore
    plan: Plan
    inventory: Inventory


class DriftResult(Result):
    check: DriftCheck
    history: list[DriftCheck]


def inventory_for(plan: Plan, store: PlanStore, workspace: Path | None) -> Inventory:
    """The plan's own inventory version: from the store (pushed versions), else the workspace's validated copy."""
    found = get_inventory_version(store, plan.inventory_name, plan.inventory_fingerprint)
    if found is not None:
        return found
    if workspace is not None and (workspace / INVENTORY).is_file():
        inv = load_inventory(workspace / INVENTORY)
        if inv.fingerprint() == plan.inventory_fingerprint:
            return inv
    raise StoreError(
        f"inventory '{plan.inventory_name}' version {plan.inventory_fingerprint[:12]} of plan {plan.plan_id} is "
        f"neither in {store.location} nor in the workspace: push it (`dreamshard inventory push`) or pass the workspace"
    )


def prepare(request: DriftRequest) -> DriftTarget:
    """Store, current plan and its inventory, checked comparable with the monitor's backend: one-line errors
    before anything is measured (the flow's CLI calls this before Prefect starts)."""
    store = open_plan_store(request.settings, request.store, request.endpoint_url)
    plan = get_current(store, request.inventory_name)
    require_comparable(plan, request.settings.profile.backend, request.settings.profile.statistic)
    return DriftTarget(store=store, plan=plan, inventory=inventory_for(plan, store, request.workspace))


def measure(target: DriftTarget, request: DriftRequest) -> DriftCheck:
    """The plan measured now (median of drift.rounds) against its recorded cost."""
    d = request.settings.drift
    oracle = request.settings.oracle()
    try:
        return check_drift(target.plan, target.inventory, oracle, d.rounds, d.threshold)
    finally:
        oracle.close()


def record(target: DriftTarget, check: DriftCheck, request: DriftRequest) -> list[DriftCheck]:
    return record_check(target.store, check, keep=request.settings.drift.history)


def run(request: DriftRequest) -> DriftResult:
    target = prepare(request)
    check = measure(target, request)
    return DriftResult(check=check, history=record(target, check, request))
