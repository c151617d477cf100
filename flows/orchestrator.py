"""retrain_on_inventory_change: fingerprint the inventory and run only what is needed.

    inventory fingerprint or training params changed (vs the last trained model)  -> tasks, profile, retrain
    ... or the last published/rejected plan was made for another inventory/model  -> plan + gate + publish
    nothing changed                                                                 -> nothing (summary says so)
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow, get_run_logger
from pydantic import BaseModel, ConfigDict

from dreamshard.fingerprints import (
    PipelineState,
    PublishedPlanState,
    TrainedModelState,
    load_state,
    needs_publishing,
    needs_training,
    params_fingerprint,
    save_state,
)
from dreamshard.io import load_inventory
from flows.profile_flow import profile_flow
from flows.publish_flow import PublishOutcome, plan_and_publish_flow
from flows.requests import OrchestratorRequest, ProfileRequest, PublishRequest, TrainRequest
from flows.tasks import (
    current_inventory_task,
    make_tasks_task,
    retire_stale_measurements_task,
    save_inventory_task,
    workspace_lock,
)
from flows.train_flows import load_configs, train_cost_flow, train_policy_flow

#: params.yaml sections a trained model depends on (a change retrains).
TRAINING_SECTIONS = ("tasks", "topology", "profile", "train_cost", "train_policy")


class OrchestratorSummary(BaseModel):
    model_config = ConfigDict(extra="forbid")

    inventory_name: str
    inventory_fingerprint: str
    profiled: bool = False
    trained: bool = False
    published: bool = False  # a plan was decided (approved or rejected) in this run
    measured: int = 0  # new measurement records
    outcome: PublishOutcome | None = None
    current_plan_id: str | None = None
    reason: str = ""


@flow(name="retrain-on-inventory-change", log_prints=True)
def retrain_on_inventory_change(request: OrchestratorRequest) -> OrchestratorSummary:
    log = get_run_logger()
    ws = request.workspace
    Path(ws.root).mkdir(parents=True, exist_ok=True)
    with workspace_lock(ws.lock):
        cfg = load_configs(request)
        store_uri = request.store_uri or cfg.publish.store_uri
        if request.inventory_path:
            inventory = load_inventory(request.inventory_path)
        else:
            name = request.inventory_name or str((request.params().get("inventory") or {}).get("name", ""))
            inventory = current_inventory_task(store_uri, request.endpoint_url, name)
        fp = inventory.fingerprint()
        params_fp = params_fingerprint(request.params(), TRAINING_SECTIONS)
        state = load_state(ws.root)
        summary = OrchestratorSummary(inventory_name=inventory.name, inventory_fingerprint=fp)
        train = request.force or needs_training(state, fp, params_fp)
        publish = train or needs_publishing(state, fp, params_fp)
        if not publish:
            last = state.published
            summary.current_plan_id = last.plan_id if last else None
            summary.reason = f"inventory {fp[:12]} unchanged since plan {summary.current_plan_id}: nothing to do"
            log.info(summary.reason)
            return summary

        save_inventory_task(inventory, str(ws.inventory))
        if train:
            make_tasks_task(str(ws.inventory), str(ws.tasks), request.params_path)
            retire_stale_measurements_task(str(ws.measurements), fp)
            prof = profile_flow(ProfileRequest(workspace=ws, params_path=request.params_path, backend=request.backend))
            train_cost_flow(TrainRequest(workspace=ws, params_path=request.params_path))
            train_policy_flow(TrainRequest(workspace=ws, params_path=request.params_path))
            state = state.model_copy(
                update={"trained": TrainedModelState(inventory_fingerprint=fp, params_fingerprint=params_fp,
                                                     model_dir=str(ws.model_dir.resolve()))}
            )
            save_state(ws.root, state)
            summary.profiled, summary.trained, summary.measured = True, True, prof.measured

        outcome = plan_and_publish_flow(
            PublishRequest(workspace=ws, params_path=request.params_path, store_uri=store_uri,
                           endpoint_url=request.endpoint_url, backend=request.backend)
        )
        state = state.model_copy(
            update={"published": PublishedPlanState(inventory_fingerprint=fp, model_fingerprint=params_fp,
                                                    plan_id=outcome.plan_id, approved=outcome.approved,
                                                    uri=outcome.key, reason=outcome.reason)}
        )
        save_state(ws.root, state)
        summary.published, summary.outcome = True, outcome
        summary.current_plan_id = outcome.plan_id if outcome.is_current else None
        summary.reason = ("retrained and " if train else "") + ("published" if outcome.approved else "rejected") + \
            f" plan {outcome.plan_id}: {outcome.reason}"
        log.info(summary.reason)
        return summary


__all__ = ["OrchestratorSummary", "PipelineState", "retrain_on_inventory_change"]
