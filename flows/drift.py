"""drift-check: re-measure the current published plan on the backend and compare with the cost it recorded
(dreamshard.drift). Past `drift.threshold` it emits `dreamshard.plan.drifted`; the retrain deployment's trigger
starts a run that re-profiles and retrains. Every check goes to the history in the store and the drift-report
artifact shows the trend."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from dreamshard.drift import DriftCheck
from dreamshard.profiling import ProfileConfig
from dreamshard.types import Inventory, Plan
from dreamshard_flows.artifacts import drift_artifact
from dreamshard_flows.requests import DriftRequest
from dreamshard_flows.tasks import absolute_uri

if TYPE_CHECKING:
    from dreamshard.pipeline_config import PipelineConfig
    from dreamshard.store.base import PlanStore


def inventory_for(plan: Plan, store_uri: str, endpoint_url: str | None, workspace: str | None) -> Inventory:
    """The plan's own inventory version: from the store (pushed versions), else the workspace's validated copy."""
    from dreamshard.errors import StoreError
    from dreamshard.events import get_inventory_version
    from dreamshard.io import load_inventory
    from dreamshard.store import open_store
    from dreamshard.workspace import INVENTORY

    found = get_inventory_version(open_store(store_uri, endpoint_url=endpoint_url), plan.inventory_name,
                                  plan.inventory_fingerprint)
    if found is not None:
        return found
    if workspace is not None and (Path(workspace) / INVENTORY).is_file():
        inv = load_inventory(Path(workspace) / INVENTORY)
        if inv.fingerprint() == plan.inventory_fingerprint:
            return inv
    raise StoreError(
        f"inventory '{plan.inventory_name}' version {plan.inventory_fingerprint[:12]} of plan {plan.plan_id} is neither "
        f"in {store_uri} nor in the workspace: push it (`dreamshard inventory push`) or pass the workspace"
    )


@task(name="re-measure-plan", cache_policy=NO_CACHE, tags=["gpu"])
def check_task(plan: Plan, inventory: Inventory, profile: ProfileConfig, rounds: int, threshold: float) -> DriftCheck:
    """Measure the plan now on the configured backend (dreamshard.drift.check_drift)."""
    from dreamshard.drift import check_drift

    oracle = profile.oracle()
    try:
        return check_drift(plan, inventory, oracle, rounds, threshold)
    finally:
        oracle.close()


def emit_drifted(check: DriftCheck) -> str | None:
    """Emit `dreamshard.plan.drifted` for the plan's inventory; returns the event id (None without an API)."""
    from prefect.events import emit_event

    from dreamshard.drift import PLAN_DRIFTED_EVENT, plan_resource_id

    event = emit_event(
        event=PLAN_DRIFTED_EVENT,
        resource={"prefect.resource.id": plan_resource_id(check.inventory_name),
                  "prefect.resource.name": check.inventory_name},
        payload=check.model_dump(mode="json"),
    )
    return None if event is None else str(event.id)


def resolve(request: DriftRequest) -> tuple[PipelineConfig, PlanStore, Plan, Inventory]:
    """Params, store, current plan and its inventory, checked comparable with the monitor's backend. The CLI
    calls it before the flow starts, so a bad request is one line, not a failed run's traceback."""
    from dreamshard.drift import require_comparable
    from dreamshard.pipeline_config import load_pipeline_config
    from dreamshard.store import get_current, open_store

    cfg = load_pipeline_config(request.params_path, backend=request.backend)
    store_uri = absolute_uri(request.store_uri or cfg.publish.store_uri)
    store = open_store(store_uri, endpoint_url=request.endpoint_url)
    plan = get_current(store, request.inventory_name)
    require_comparable(plan, cfg.profile.backend)
    return cfg, store, plan, inventory_for(plan, store_uri, request.endpoint_url, request.workspace)


@flow(name="drift-check", log_prints=True)
def drift_check_flow(request: DriftRequest) -> DriftCheck:
    from dreamshard.drift import record_check, trend_rows

    log = get_run_logger()
    cfg, store, plan, inventory = resolve(request)
    check = check_task(plan, inventory, cfg.profile, cfg.drift.rounds, cfg.drift.threshold)
    history = record_check(store, check, keep=cfg.drift.history)
    drift_artifact(trend_rows(history), request.inventory_name, check)
    log.info("plan %s: %.4g ms now vs %s %.4g ms recorded (%+.1f%%, threshold %.0f%%)%s", check.plan_id, check.now_ms,
             check.basis, check.now_ms / (1 + check.drift), 100 * check.drift, 100 * check.threshold,
             ": DRIFTED" if check.drifted else "")
    if check.drifted:
        event_id = emit_drifted(check)
        log.info("emitted dreamshard.plan.drifted (%s)", event_id)
    return check
