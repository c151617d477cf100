"""replan-on-inventory-change: the production loop's fast path (dreamshard.usecases.replan). A new inventory
version (`dreamshard inventory push` emits `dreamshard.inventory.changed`) is planned with the current production
model, gated against the baselines measured interleaved, and published, with no profiling or training. When the
version is outside the model's training ranges nothing is published and `dreamshard.retrain.due` is emitted: the
retrain deployment (`retrain-on-inventory-change/nightly-and-when-due`) listens for it."""

from __future__ import annotations

from pathlib import Path

from dreamshard_flows.artifacts import replan_artifact
from dreamshard_flows.logs import one_line_known_errors
from dreamshard_flows.naming import minute_version, rename_flow_run, request_field, run_name
from dreamshard_flows.requests import ReplanRequest
from dreamshard_flows.review import PrefectReviewer
from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.events import emit_event

from dreamshard.config.job import host_overrides
from dreamshard.config.settings import resolve
from dreamshard.config.world import world_overrides
from dreamshard.usecases import replan as replan_uc
from dreamshard.usecases.pipeline_steps import absolute_uri
from dreamshard.usecases.progress import progress_lines

one_line_known_errors()  # a DreamshardError in a task or flow is logged as its one line (dreamshard_flows.logs)

RETRAIN_DUE_EVENT = "dreamshard.retrain.due"


def retrain_resource_id(inventory_name: str) -> str:
    return f"dreamshard.retrain.{inventory_name}"


def library_request(request: ReplanRequest) -> replan_uc.ReplanRequest:
    told = {
        **host_overrides(request.devices, request.hosts, request.devices_per_host),
        **world_overrides(request.world),
        "topology.memory_per_device_gb": request.memory_gb,
    }
    settings = resolve(request.params_path, {**told, "profile.backend": request.backend})
    return replan_uc.ReplanRequest(
        settings=settings,
        inventory_name=request.inventory_name,
        store=absolute_uri(request.store_uri or settings.publish.store_uri),
        endpoint_url=request.endpoint_url,
        model=Path(request.model) if request.model else None,
        workspace=Path(request.workspace),
        force=request.force,
    )


@task(name="replan", cache_policy=NO_CACHE, tags=["gpu"])
def replan_task(request: replan_uc.ReplanRequest) -> replan_uc.ReplanResult:
    """Plan (search + verify on the backend), gate, publish: dreamshard.usecases.replan.run, its reviewer the
    Prefect UI's pause (publish.require_human), a log line at least every 30 s saying what it measures."""
    with progress_lines(get_run_logger().info, "replan") as progress:
        return replan_uc.run(request.model_copy(update={"progress": progress}), PrefectReviewer())


def emit_retrain_due(result: replan_uc.ReplanResult) -> str | None:
    event = emit_event(
        event=RETRAIN_DUE_EVENT,
        resource={
            "prefect.resource.id": retrain_resource_id(result.inventory_name),
            "prefect.resource.name": result.inventory_name,
        },
        payload={
            "inventory_name": result.inventory_name,
            "fingerprint": result.fingerprint,
            "reason": "; ".join(result.retrain_reasons)[:2000],
        },
    )
    return None if event is None else str(event.id)


def replan_run_name() -> str:
    """`<inventory>-replan-<minute>` until the run knows the version it planned (then renamed to it)."""
    return run_name(request_field("inventory_name") or "inventory", "replan", minute_version())


@flow(name="replan-on-inventory-change", flow_run_name=replan_run_name, log_prints=True)
def replan_on_inventory_change(request: ReplanRequest) -> replan_uc.ReplanResult:
    log = get_run_logger()
    log.info("why: %s", request.reason)
    result = replan_task(library_request(request))
    rename_flow_run(run_name(result.inventory_name, "replan", result.fingerprint))
    for line in result.warnings:  # the plan's notes: a world that is not the job's, inputs out of range
        log.warning(line)
    replan_artifact(result, request.reason)
    log.info("%s: %s %s: %s", result.outcome, result.inventory_name, result.fingerprint[:12], result.reason)
    if result.outcome == "retrain-due":
        log.info("emitted %s (%s)", RETRAIN_DUE_EVENT, emit_retrain_due(result))
    return result
