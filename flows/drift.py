"""drift-check: re-measure the current published plan on the backend and compare with the cost it recorded
(dreamshard.usecases.drift). Past `drift.threshold` it emits `dreamshard.plan.drifted`; the retrain deployment's
trigger starts a run that re-profiles and retrains. Every check goes to the history in the store and the
drift-report artifact shows the trend."""

from __future__ import annotations

from pathlib import Path

from dreamshard_flows.artifacts import drift_artifact
from dreamshard_flows.logs import one_line_known_errors
from dreamshard_flows.naming import minute_version, request_field, run_name
from dreamshard_flows.requests import DriftRequest
from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.events import emit_event

from dreamshard.config.settings import pipeline_base, resolve
from dreamshard.evaluation.render import trend_rows
from dreamshard.usecases import drift as drift_uc
from dreamshard.usecases.drift import PLAN_DRIFTED_EVENT, DriftRound, plan_resource_id
from dreamshard.usecases.pipeline_steps import absolute_uri
from dreamshard.values.drift import DriftCheck

one_line_known_errors()  # a DreamshardError in a task or flow is logged as its one line (dreamshard_flows.logs)


def library_request(request: DriftRequest) -> drift_uc.DriftRequest:
    """The flow's parameters as the use case's request (settings resolved once, the params file layered over the
    pipeline's own, the store made absolute)."""
    settings = resolve(request.params_path, {"profile.backend": request.backend}, base=pipeline_base())
    return drift_uc.DriftRequest(
        settings=settings,
        inventory_name=request.inventory_name,
        store=absolute_uri(request.store_uri or settings.publish.store_uri),
        endpoint_url=request.endpoint_url,
        workspace=Path(request.workspace) if request.workspace else None,
    )


def prepare(request: DriftRequest) -> tuple[drift_uc.DriftRequest, drift_uc.DriftTarget]:
    """Params, store, the named inventory's current plan and its inventory, checked comparable with the monitor's
    backend. The CLI calls it before the flow starts, so a bad request is one line, not a failed run's traceback."""
    lib = library_request(request)
    return lib, drift_uc.prepare(lib)


@task(
    name="re-measure-plan",
    task_run_name="{target.plan.inventory_name}-drift-{target.plan.inventory_fingerprint:.12}",
    cache_policy=NO_CACHE,
    tags=["gpu"],
)
def check_task(target: drift_uc.DriftTarget, request: drift_uc.DriftRequest) -> DriftCheck:
    """Measure the plan now on the configured backend (dreamshard.usecases.drift.measure)."""
    return drift_uc.measure(target, request)


def emit_drifted(check: DriftCheck) -> str | None:
    """Emit `dreamshard.plan.drifted` for the plan's inventory; returns the event id (None without an API)."""
    event = emit_event(
        event=PLAN_DRIFTED_EVENT,
        resource={
            "prefect.resource.id": plan_resource_id(check.inventory_name),
            "prefect.resource.name": check.inventory_name,
        },
        payload=check.model_dump(mode="json"),
    )
    return None if event is None else str(event.id)


def drift_run_name() -> str:
    """`<inventory>-drift-<minute>`; `all-drift-<minute>` for a round over every inventory."""
    return run_name(request_field("inventory_name") or "all", "drift", minute_version())


def check_one(target: drift_uc.DriftTarget, lib: drift_uc.DriftRequest) -> DriftCheck:
    """Measure one inventory's current plan, keep the check in its history, show the trend, emit when drifted."""
    log = get_run_logger()
    check = check_task(target, lib)
    history = drift_uc.record(target, check, lib)
    drift_artifact(trend_rows(history), check.inventory_name, check)
    log.info(
        "%s plan %s: %.4g ms now vs %s %.4g ms recorded (%+.1f%%, threshold %.0f%%)%s",
        check.inventory_name,
        check.plan_id,
        check.now_ms,
        check.basis,
        check.now_ms / (1 + check.drift),
        100 * check.drift,
        100 * check.threshold,
        ": DRIFTED" if check.drifted else "",
    )
    if check.drifted:
        event_id = emit_drifted(check)
        log.info("emitted dreamshard.plan.drifted (%s)", event_id)
    return check


@flow(name="drift-check", flow_run_name=drift_run_name, log_prints=True)
def drift_check_flow(request: DriftRequest) -> DriftRound:
    log = get_run_logger()
    lib = library_request(request)
    found = drift_uc.sweep(lib)
    for reason in found.skipped:
        log.info("skipped: %s", reason)
    checks = [check_one(target, lib) for target in found.targets]
    log.info("checked %d inventories, skipped %d", len(checks), len(found.skipped))
    return DriftRound(checks=checks, skipped=found.skipped)
