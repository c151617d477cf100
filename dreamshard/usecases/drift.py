"""The drift check: the current published plan of an inventory re-measured on the profile backend and compared
with the cost it recorded (dreamshard.evaluation.drift); every check goes to the store's history. Without a named
inventory the monitor checks every inventory of the store that has a current plan (`sweep`); an inventory with none
yet is a skip with its reason, not a failure. Settings: profile (backend), drift (rounds, threshold, history),
publish (store)."""

from __future__ import annotations

from pathlib import Path

from dreamshard.documents import load_inventory
from dreamshard.errors import ConfigError, StoreError
from dreamshard.evaluation.drift import check_drift, record_check, require_comparable
from dreamshard.pipeline.workspace import INVENTORY
from dreamshard.store import LocalPlanStore, get_current, get_inventory_version, get_pointer, list_inventories
from dreamshard.store.base import PlanStore
from dreamshard.usecases.base import Request, Result
from dreamshard.usecases.stored import open_plan_store
from dreamshard.values import Inventory, Plan
from dreamshard.values.drift import DriftCheck

#: Event the retrain deployment's trigger listens for.
PLAN_DRIFTED_EVENT = "dreamshard.plan.drifted"


def plan_resource_id(inventory_name: str) -> str:
    """Prefect resource id of an inventory's published plan: ``dreamshard.plan.<inventory>``."""
    return f"dreamshard.plan.{inventory_name}"


class DriftRequest(Request):
    inventory_name: str | None = None  # None: every inventory of the store with a current plan
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


class DriftSweep(Result):
    """What the monitor checks this round: a target per inventory with a current plan, a reason per skip."""

    targets: list[DriftTarget]
    skipped: list[str]


def _target(store: PlanStore, name: str, request: DriftRequest) -> DriftTarget:
    plan = get_current(store, name)
    require_comparable(plan, request.settings.profile.backend, request.settings.profile.statistic)
    return DriftTarget(store=store, plan=plan, inventory=inventory_for(plan, store, request.workspace))


def prepare(request: DriftRequest) -> DriftTarget:
    """Store, current plan of the named inventory and its inventory, checked comparable with the monitor's backend:
    one-line errors before anything is measured (the flow's CLI calls this before Prefect starts)."""
    if request.inventory_name is None:
        raise ConfigError("a single drift check needs an inventory name (sweep() checks every inventory)")
    store = open_plan_store(request.settings, request.store, request.endpoint_url)
    return _target(store, request.inventory_name, request)


def sweep(request: DriftRequest) -> DriftSweep:
    """The targets of one monitor round: the named inventory, else every inventory of the store; one without a
    current plan (a fresh install, an inventory pushed but never published) is skipped with the reason. Any other
    problem (a plan measured on another backend, its inventory version lost) is the inventory's error."""
    store = open_plan_store(request.settings, request.store, request.endpoint_url, existing=False)
    if isinstance(store, LocalPlanStore) and not Path(store.location).is_dir():  # a fresh install: nothing published
        return DriftSweep(targets=[], skipped=[f"no plan store at {store.location} yet: nothing to check"])
    names = [request.inventory_name] if request.inventory_name else list_inventories(store)
    targets: list[DriftTarget] = []
    skipped: list[str] = []
    for name in names:
        if get_pointer(store, name) is None:
            skipped.append(f"inventory '{name}' has no current plan in {store.location} yet: nothing to check")
        else:
            targets.append(_target(store, name, request))
    if not names:
        skipped.append(f"no inventory in {store.location} has a current plan yet: nothing to check")
    return DriftSweep(targets=targets, skipped=skipped)


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


class DriftRound(Result):
    """One monitor round: the checks made (one per inventory with a current plan) and why others were skipped."""

    checks: list[DriftCheck]
    skipped: list[str]
