"""retrain-on-inventory-change: the orchestrator. It executes dvc.yaml's stages in a workspace repository with
DVC's change detection only (docs/architecture/pipeline.md, "One stage graph"):

    prepare the workspace (stage graph, params, input inventory, remote; a new inventory: the current plan as the
                           incumbent the plan stage starts from)
    for each stage in dvc.yaml order that `dvc status` reports changed:   dvc repro --single-item STAGE  (one task)
    git commit dvc.lock  ->  dvc push  ->  publish-plan (gate, lineage, store; tags the commit)

Each step is a use-case call (dreamshard.usecases.pipeline_steps), and so is each rule between them: the params
lookup, which stages run, and that a plan is decided once (`next_step`). `force` re-runs every stage;
`reprofile` (the drift trigger) re-measures: profile and what follows.
"""

from __future__ import annotations

from pathlib import Path

from dreamshard_flows.artifacts import metrics_artifact, profile_batches_artifact
from dreamshard_flows.logs import one_line_known_errors
from dreamshard_flows.naming import minute_version, rename_flow_run, request_field, run_name
from dreamshard_flows.publish import publish_workspace_plan
from dreamshard_flows.requests import OrchestratorRequest, WorkspacePublishRequest
from dreamshard_flows.stage_tasks import (
    commit_task,
    current_inventory_task,
    current_plan_task,
    prepare_workspace_task,
    push_inventory_task,
    push_task,
    stage_task,
    status_task,
)
from prefect import flow, get_run_logger
from prefect.runtime import flow_run

from dreamshard.usecases import pipeline_steps as steps
from dreamshard.usecases.pipeline_steps import RunSetup, RunSummary

one_line_known_errors()  # a DreamshardError in a task or flow is logged as its one line (dreamshard_flows.logs)


def _api_url() -> str | None:
    from prefect.settings import PREFECT_API_URL

    value = PREFECT_API_URL.value()
    return str(value) if value else None


def _workers_alive(deployment_name: str) -> bool:
    """Whether a worker of the deployment's work pool is alive (Prefect's heartbeat rule, `fanout.worker_dead`)."""
    from datetime import datetime, timezone

    from dreamshard_flows.fanout import worker_dead
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    try:
        with get_client(sync_client=True) as client:
            pool = client.read_deployment_by_name(deployment_name).work_pool_name
            workers = client.read_workers_for_work_pool(pool) if pool else []
    except ObjectNotFound:
        return False
    now = datetime.now(timezone.utc)
    return any(not worker_dead(w, now) and w.last_heartbeat_time for w in workers)


def resolve_dispatch(requested: str, deployment_name: str) -> str:
    """Where the profiling batches run (`pipeline_steps.dispatch_for`, asked of this Prefect API)."""
    return steps.dispatch_for(requested, _api_url(), lambda: _workers_alive(deployment_name))


def stage_env(store_uri: str, endpoint_url: str | None, campaign: str, dispatch: str) -> dict[str, str]:
    """`pipeline_steps.stage_env` with this Prefect API (what a workers-dispatched profile stage submits to)."""
    return steps.stage_env(store_uri, endpoint_url, campaign, dispatch, _api_url() if dispatch == "workers" else None)


def _run_stages(root: str, request: OrchestratorRequest, env: dict[str, str], summary: RunSummary) -> list[str]:
    """Every stage that `dvc status` says changed (or that the request forces), in dvc.yaml order; each task run
    named `<inventory>-<stage>-<version>`."""
    ran: list[str] = []
    stale = status_task(root)
    who = (summary.inventory_name, summary.inventory_fingerprint)
    for stage in steps.stages(root):
        if steps.runs(stage, stale, request.force, request.reprofile):
            stage_task(root, stage, steps.forced(stage, request.force, request.reprofile), env, *who)
            ran.append(stage)
            stale = steps.stale_stages(root)  # what this stage's new outputs made stale downstream
    return ran


def _start(root: str, request: OrchestratorRequest, setup: RunSetup) -> tuple[RunSummary, dict[str, str]]:
    """Prepare the workspace for the run's inventory: the summary so far and the stages' environment."""
    log = get_run_logger()
    name = request.inventory_name or setup.settings.inventory.name
    inventory = current_inventory_task(request.inventory_path, setup.store_uri, request.endpoint_url, name)
    job = setup.settings.topology_for_job(inventory.job)  # what the plan stage plans for
    incumbent = current_plan_task(setup.store_uri, request.endpoint_url, inventory.name, job)
    changed = prepare_workspace_task(root, setup.params_text, inventory, setup.remote, incumbent)
    campaign = str(flow_run.id or "local")
    dispatch = resolve_dispatch(request.dispatch, setup.settings.pipeline.profile_deployment)
    push_inventory_task(setup.store_uri, request.endpoint_url, inventory)  # the version this run's plan is for
    log.info("workspace %s (%s); profiling batches run %s", root, ", ".join(changed) or "unchanged", dispatch)
    rename_flow_run(run_name(inventory.name, "pipeline", inventory.fingerprint()))
    summary = RunSummary(
        inventory_name=inventory.name,
        inventory_fingerprint=inventory.fingerprint(),
        workspace=root,
        dispatch=dispatch,
        campaign=campaign,
        why=request.reason,
    )
    return summary, stage_env(setup.store_uri, request.endpoint_url, campaign, dispatch)


def _artifacts(summary: RunSummary, setup: RunSetup, endpoint_url: str | None) -> None:
    if "profile" in summary.ran:
        shards = steps.campaign_shards(setup.store_uri, endpoint_url, summary.campaign)
        profile_batches_artifact(shards, summary.inventory_name)
    if "train" in summary.ran and (metrics := steps.train_metrics(summary.workspace)) is not None:
        metrics_artifact("train-metrics", metrics, summary.inventory_name)


def pipeline_run_name() -> str:
    """`<inventory>-pipeline-<minute>` until the run knows its inventory version (`_start` renames it)."""
    return run_name(request_field("inventory_name") or "current", "pipeline", minute_version())


@flow(name="retrain-on-inventory-change", flow_run_name=pipeline_run_name, log_prints=True)
def retrain_on_inventory_change(request: OrchestratorRequest) -> RunSummary:
    log = get_run_logger()
    log.info("why: %s", request.reason)
    root = Path(request.workspace).resolve()
    with steps.workspace_lock(root / steps.LOCK_FILE):
        setup = steps.run_setup(
            root,
            request.params_path,
            request.backend,
            request.store_uri,
            (request.dvc_remote, request.dvc_remote_endpoint),
            allow_simulated=request.allow_simulated,
        )
        summary, env = _start(str(root), request, setup)
        summary.ran = _run_stages(str(root), request, env, summary)
        _artifacts(summary, setup, request.endpoint_url)
        committed = commit_task(str(root), steps.commit_message(summary)) if steps.uncommitted(str(root)) else None
        summary.git_revision = steps.revision(str(root))
        step = steps.next_step(str(root), summary, committed)
        summary.current_plan_id = step.current_plan_id
        if step.action != "stop":
            push_task(str(root))
            summary.pushed = True
        if step.action != "publish":
            summary.reason = step.reason
            log.info(summary.reason)
            return summary
        outcome = publish_workspace_plan(
            WorkspacePublishRequest(
                workspace=str(root),
                store_uri=setup.store_uri,
                endpoint_url=request.endpoint_url,
                require_human=request.require_human,
                flow_run_id=summary.campaign,
            )
        )
        summary = steps.published(summary, committed, outcome)
        log.info(summary.reason)
        return summary
