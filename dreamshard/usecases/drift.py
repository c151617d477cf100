"""The drift check: the current published plan of an inventory measured interleaved with a reference plan on the
profile backend, the ratio plan / reference compared with the same ratio when the plan was published
(dreamshard.evaluation.drift); a drifted plan's check says which path it calls for (the fast path's replan, or a
retrain) and why. Every check goes to the store's history. Without a named inventory the monitor checks every
inventory of the store that has a current plan (`sweep`); an inventory with none yet is a skip with its reason, not a
failure. Settings: profile (backend), drift (rounds, confidence, threshold, reference_sharders, history), publish
(store; the gate's timing_passes and timing_clock, so the ratio is measured as the gate measured it)."""

from __future__ import annotations

import contextlib
from pathlib import Path

from pydantic import Field

from dreamshard.config.settings import model_dir
from dreamshard.documents import load_inventory
from dreamshard.errors import ConfigError, StoreError
from dreamshard.evaluation.drift import (
    DriftReference,
    baseline_reference,
    calibration_reference,
    choose_path,
    hardware_change,
    judge_drift,
    measure_paired,
    read_history,
    record_check,
    require_comparable,
)
from dreamshard.gate.bounds import ratio_bound
from dreamshard.learning.model_store import PACKAGED_DIR, load_card
from dreamshard.pipeline.workspace import INVENTORY
from dreamshard.store import LocalPlanStore, get_current, get_inventory_version, get_pointer, list_inventories
from dreamshard.store.base import PlanStore
from dreamshard.store.plans import recorded_decision
from dreamshard.usecases.base import Request, Result
from dreamshard.usecases.replan import production_model
from dreamshard.usecases.stored import open_plan_store
from dreamshard.values import GateDecision, Inventory, Plan
from dreamshard.values.drift import DriftCheck
from dreamshard.values.progress import Progress

#: Event the drift deployments' triggers listen for.
PLAN_DRIFTED_EVENT = "dreamshard.plan.drifted"
#: The event's resource label saying which path the check chose (`replan` or `retrain`): each deployment's trigger
#: matches its own.
DRIFT_PATH_LABEL = "dreamshard.drift.path"


def plan_resource_id(inventory_name: str) -> str:
    """Prefect resource id of an inventory's published plan: ``dreamshard.plan.<inventory>``."""
    return f"dreamshard.plan.{inventory_name}"


class DriftRequest(Request):
    inventory_name: str | None = None  # None: every inventory of the store with a current plan
    store: str | None = None  # None: publish.store_uri
    endpoint_url: str | None = None
    workspace: Path | None = None  # a workspace whose data/inventory.yaml may hold the plan's inventory, and whose
    # trained model is the production model a replan would plan with (as `usecases.replan.production_model`)
    model: Path | None = None  # the production model (default: the workspace's, else settings.model_dir's lookup)


class DriftTarget(Result):
    """What a check measures: the store, the current plan, its own inventory version, the gate's decision on it
    (None: the store holds none) and the inventory's kept checks (a calibration reference's anchor)."""

    store: PlanStore
    plan: Plan
    inventory: Inventory
    decision: GateDecision | None = None
    history: list[DriftCheck] = Field(default_factory=list)


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
    recorded = recorded_decision(store, plan)
    return DriftTarget(
        store=store,
        plan=plan,
        inventory=inventory_for(plan, store, request.workspace),
        decision=recorded[1].gate if recorded is not None else None,
        history=read_history(store, name),
    )


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


def reference(target: DriftTarget, request: DriftRequest) -> DriftReference:
    """What the plan is measured beside: the gate's best baseline, re-planned, else the first of
    drift.reference_sharders that places the inventory differently (dreamshard.evaluation.drift)."""
    seed = request.settings.profile.seed
    found = baseline_reference(target.plan, target.inventory, target.decision, seed)
    sharders = request.settings.drift.reference_sharders
    return found or calibration_reference(target.plan, target.inventory, sharders, target.history, seed)


def measure(target: DriftTarget, request: DriftRequest, progress: Progress | None = None) -> DriftCheck:
    """The plan and its reference measured interleaved (drift.rounds, timed as the gate times: publish.timing_passes
    and publish.timing_clock), judged on the ratio's interval; a drifted check says its path. `progress` gets a line
    per measurement."""
    s = request.settings
    ref = reference(target, request)
    oracle = s.oracle()
    try:
        gated = not oracle.info.is_simulated
        timing = (
            oracle.timing_as(s.publish.timing_passes, s.publish.timing_clock) if gated else contextlib.nullcontext()
        )
        with timing:
            paired = measure_paired(
                target.inventory, target.plan, ref.plan, oracle, s.drift.rounds, s.profile.seed, progress
            )
        info = oracle.info
    finally:
        oracle.close()
    bound = ratio_bound(paired.plan_ms, paired.reference_ms, s.drift.confidence)
    check = judge_drift(target.plan, ref, paired, bound, s.drift.confidence, s.drift.threshold, info)
    if not check.drifted:
        return check
    return choose_path(check, hardware_change(target.plan.measured_by, info), _outside(target, request))


def _outside(target: DriftTarget, request: DriftRequest) -> list[str]:
    """Where the plan's inventory lies outside the training ranges of the model a replan would plan with."""
    found = model_dir(production_model(request.model, request.workspace))
    card = load_card(found if found is not None else PACKAGED_DIR)
    return card.out_of_range(target.inventory.tables, target.plan.topology)


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
