"""retrain-on-inventory-change: the orchestrator. It executes dvc.yaml's stages in a workspace repository with
DVC's change detection only (docs/architecture.md, "One stage graph"):

    prepare the workspace (stage graph, params, input inventory, remote; a new inventory: the current plan as the
                           incumbent the plan stage starts from)
    for each stage in dvc.yaml order that `dvc status` reports changed:   dvc repro --single-item STAGE  (one task)
    git commit dvc.lock  ->  dvc push  ->  publish-plan (gate, lineage, store; tags the commit)

Nothing changed (no stage to run, nothing to commit, and data/plan.json already has a decision tag) -> nothing runs.
A plan is decided once: a run that changes no plan (e.g. only params outside the stages) commits and pushes, but
does not publish the same plan id again.
`force` re-runs every stage; `reprofile` (the drift trigger) re-measures: profile and what follows.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dreamshard_flows.artifacts import metrics_artifact, profile_batches_artifact
from dreamshard_flows.publish import PublishOutcome, plan_decision, publish_workspace_plan
from dreamshard_flows.requests import OrchestratorRequest, PublishRequest
from dreamshard_flows.stage_tasks import (
    LOCK_FILE,
    absolute_uri,
    commit_task,
    current_inventory_task,
    current_plan_task,
    prepare_workspace_task,
    push_inventory_task,
    push_task,
    stage_task,
    status_task,
    workspace_lock,
)
from prefect import flow, get_run_logger
from prefect.runtime import flow_run
from pydantic import BaseModel, ConfigDict, Field

from dreamshard.config.settings import params_text, resolve
from dreamshard.documents import load_inventory
from dreamshard.errors import ConfigError
from dreamshard.pipeline.workspace import PARAMS, PipelineWorkspace, RemoteSpec
from dreamshard.profiling.batches import list_shards
from dreamshard.store import open_store


class OrchestratorSummary(BaseModel):
    model_config = ConfigDict(extra="forbid")

    inventory_name: str
    inventory_fingerprint: str
    workspace: str
    ran: list[str] = Field(default_factory=list)  # stages run, in order
    dispatch: str = "local"  # where profiling batches ran
    campaign: str = ""  # the profiling campaign (this flow run's id)
    git_revision: str | None = None
    pushed: bool = False
    outcome: PublishOutcome | None = None
    current_plan_id: str | None = None
    reason: str = ""
    why: str = ""  # what started the run (the schedule, a retrain that is due, drift, a person)

    @property
    def published(self) -> bool:
        return self.outcome is not None


def resolve_dispatch(requested: str, deployment_name: str) -> str:
    """`auto`: the workers when a Prefect server is configured, the profile-batch deployment exists and a worker
    of its pool is alive (else the batches would wait for nobody)."""
    from prefect.settings import PREFECT_API_URL

    if requested == "workers" and not PREFECT_API_URL.value():
        raise ConfigError(
            "dispatch 'workers' needs a Prefect server the workers poll: start infra/start-prefect.sh "
            "and export PREFECT_API_URL=http://127.0.0.1:4200/api, or use --dispatch local"
        )
    if requested != "auto":
        return requested
    if not PREFECT_API_URL.value():
        return "local"  # an ephemeral API: no worker can reach it
    from datetime import datetime, timezone

    from dreamshard_flows.fanout import worker_dead
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    try:
        with get_client(sync_client=True) as client:
            pool = client.read_deployment_by_name(deployment_name).work_pool_name
            workers = client.read_workers_for_work_pool(pool) if pool else []
    except ObjectNotFound:
        return "local"
    now = datetime.now(timezone.utc)
    return "workers" if any(not worker_dead(w, now) and w.last_heartbeat_time for w in workers) else "local"


def stage_env(store_uri: str, endpoint_url: str | None, campaign: str, dispatch: str) -> dict[str, str]:
    """What a stage's command needs beyond dvc.yaml: where profiling shards go and how batches run
    (read by `dreamshard profile-stage`; nothing here changes a stage's result)."""
    env = {
        "DREAMSHARD_PROFILE_STORE": store_uri,
        "DREAMSHARD_PROFILE_CAMPAIGN": campaign,
        "DREAMSHARD_PROFILE_DISPATCH": dispatch,
    }
    if endpoint_url:
        env["DREAMSHARD_PROFILE_ENDPOINT"] = endpoint_url
    if dispatch == "workers":
        from prefect.settings import PREFECT_API_URL

        env["PREFECT_API_URL"] = str(PREFECT_API_URL.value())
    return env


def _train_metrics(ws: Any) -> Any:
    for rel in ("metrics/train.json", "models/dreamshard/metrics.json"):
        p = ws.path(rel)
        if p.is_file():
            return json.loads(p.read_text())
    return None


@flow(name="retrain-on-inventory-change", log_prints=True)
def retrain_on_inventory_change(request: OrchestratorRequest) -> OrchestratorSummary:
    log = get_run_logger()
    log.info("why: %s", request.reason)
    root = Path(request.workspace).resolve()
    root.mkdir(parents=True, exist_ok=True)
    ws = PipelineWorkspace(root)
    with workspace_lock(root / LOCK_FILE):
        params_file = request.params_path or (str(ws.path(PARAMS)) if ws.path(PARAMS).is_file() else None)
        cfg = resolve(params_file, {"profile.backend": request.backend})
        cfg.check_pipeline()
        store_uri = absolute_uri(request.store_uri or cfg.publish.store_uri)
        if request.inventory_path:
            inventory = load_inventory(request.inventory_path)
        else:
            inventory = current_inventory_task(
                store_uri, request.endpoint_url, request.inventory_name or cfg.inventory.name
            )
        remote = RemoteSpec(
            url=request.dvc_remote or cfg.pipeline.dvc_remote,
            endpoint_url=request.dvc_remote_endpoint or cfg.pipeline.dvc_remote_endpoint,
        ).resolved()
        incumbent = current_plan_task(store_uri, request.endpoint_url, inventory.name)
        changed = prepare_workspace_task(
            str(root),
            params_text(request.params_path, {"profile.backend": request.backend}) if request.params_path else None,
            inventory,
            remote,
            incumbent,
        )
        campaign = str(flow_run.id or "local")
        dispatch = resolve_dispatch(request.dispatch, cfg.pipeline.profile_deployment)
        env = stage_env(store_uri, request.endpoint_url, campaign, dispatch)
        summary = OrchestratorSummary(
            inventory_name=inventory.name,
            inventory_fingerprint=inventory.fingerprint(),
            workspace=str(root),
            dispatch=dispatch,
            campaign=campaign,
            why=request.reason,
        )
        push_inventory_task(store_uri, request.endpoint_url, inventory)  # the version this run's plan is for
        log.info("workspace %s (%s); profiling batches run %s", root, ", ".join(changed) or "unchanged", dispatch)

        status = status_task(str(root))
        for stage in ws.stages():
            force = request.force or (request.reprofile and stage == "profile")
            if force or stage in status:
                stage_task(str(root), stage, force, env)
                summary.ran.append(stage)
                status = ws.status()  # what this stage's new outputs made stale downstream
        if "profile" in summary.ran:
            shards = list_shards(open_store(store_uri, endpoint_url=request.endpoint_url), campaign)
            profile_batches_artifact(shards, inventory.name)
        if "train" in summary.ran and (metrics := _train_metrics(ws)) is not None:
            metrics_artifact("train-metrics", metrics, inventory.name)

        committed = None
        if ws.dirty():  # this run's lock, or one a crashed run left uncommitted
            committed = commit_task(
                str(root),
                f"pipeline run {campaign}: {', '.join(summary.ran) or 'no stage'} "
                f"({inventory.name} {summary.inventory_fingerprint[:12]})",
            )
        summary.git_revision = ws.head()
        # A plan is decided once (plan ids are unique in the store): the publish step runs for a plan that has no
        # decision tag yet, i.e. after the plan stage ran, or when a run stopped before publishing.
        plan_id, tag = plan_decision(ws)
        if tag is not None:
            summary.current_plan_id = plan_id if tag.startswith("published/") else None
        if tag is not None and not summary.ran and committed is None:
            summary.reason = (
                f"inventory {summary.inventory_fingerprint[:12]}: no stage changed; plan {plan_id} "
                f"was decided ({tag}) at {(summary.git_revision or '')[:12]}; nothing to do"
            )
            log.info(summary.reason)
            return summary

        push_task(str(root))
        summary.pushed = True
        if tag is not None:
            summary.reason = (
                f"ran {', '.join(summary.ran) or 'no stage'}; committed and pushed; plan {plan_id} was "
                f"already decided ({tag}): nothing to publish (re-plan with --force for a new decision)"
            )
            log.info(summary.reason)
            return summary
        outcome = publish_workspace_plan(
            PublishRequest(
                workspace=str(root),
                store_uri=store_uri,
                endpoint_url=request.endpoint_url,
                require_human=request.require_human,
                flow_run_id=campaign,
            )
        )
        summary.outcome = outcome
        summary.current_plan_id = outcome.plan_id if outcome.is_current else outcome.fallback_plan_id
        summary.reason = (
            (f"ran {', '.join(summary.ran)}; " if summary.ran else "no stage changed; ")
            + ("committed, " if committed else "")
            + f"pushed; {'published' if outcome.approved else 'rejected'} plan {outcome.plan_id}: {outcome.reason}"
        )
        log.info(summary.reason)
        return summary
