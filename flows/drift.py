"""drift-check: measure the current published plan interleaved with its reference plan on the backend and compare
plan / reference with the same ratio when the plan was published (dreamshard.usecases.drift). A plan that drifted
(the ratio's whole interval beyond `drift.threshold`) emits `dreamshard.plan.drifted`, labelled with the path its
check chose: `replan` (the hardware and the model's ranges unchanged) starts `replan-on-drift`, the fast path;
`retrain` starts `retrain-on-drift`, which re-profiles and retrains. Every check goes to the history in the store and
the drift-report artifact shows the trend; the measuring logs a line at least every 30 s."""

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
from dreamshard.evaluation.render import drift_line, trend_rows
from dreamshard.usecases import drift as drift_uc
from dreamshard.usecases.drift import DRIFT_PATH_LABEL, PLAN_DRIFTED_EVENT, DriftRound, plan_resource_id
from dreamshard.usecases.pipeline_steps import absolute_uri
from dreamshard.usecases.progress import progress_lines
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
        model=Path(request.model) if request.model else None,
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
    """Measure the plan and its reference now on the configured backend (dreamshard.usecases.drift.measure), the
    rounds measured in the log at least every 30 s."""
    label = f"{target.plan.inventory_name} drift"
    with progress_lines(get_run_logger().info, label) as progress:
        return drift_uc.measure(target, request, progress)


def emit_drifted(check: DriftCheck) -> str | None:
    """Emit `dreamshard.plan.drifted` for the plan's inventory; returns the event id (None without an API)."""
    event = emit_event(
        event=PLAN_DRIFTED_EVENT,
        resource={
            "prefect.resource.id": plan_resource_id(check.inventory_name),
            "prefect.resource.name": check.inventory_name,
            DRIFT_PATH_LABEL: check.path,  # which deployment's trigger matches: replan-on-drift or retrain-on-drift
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
    log.info("%s", drift_line(check))
    if check.drifted:
        event_id = emit_drifted(check)
        log.info("emitted %s for the %s path (%s)", PLAN_DRIFTED_EVENT, check.path, event_id)
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
