"""retrain-on-inventory-change: the orchestrator, a Prefect flow around the library's pipeline run
(dreamshard.usecases.pipeline_run.run_pipeline, docs/architecture/pipeline.md, "One stage graph"). The stage loop,
the dispatch choice and the decide-once rule are the library's; this flow reads its request (the door: an
inventory file, when given), names the run, and runs each step as a task run (`PrefectRunner`)."""

from __future__ import annotations

from pathlib import Path

from dreamshard_flows.logs import one_line_known_errors
from dreamshard_flows.naming import minute_version, request_field, run_name
from dreamshard_flows.requests import OrchestratorRequest
from dreamshard_flows.runner import PrefectRunner
from prefect import flow

from dreamshard.documents import load_inventory
from dreamshard.errors import DreamshardError
from dreamshard.usecases.pipeline_run import PipelineRun, run_pipeline
from dreamshard.usecases.pipeline_steps import RunSummary

one_line_known_errors()  # a DreamshardError in a task or flow is logged as its one line (dreamshard_flows.logs)


def pipeline_run(request: OrchestratorRequest) -> PipelineRun:
    """The flow's parameters as the library's request (the inventory file, when one is named, read here)."""
    return PipelineRun(
        workspace=Path(request.workspace),
        params=Path(request.params_path) if request.params_path else None,
        inventory=load_inventory(request.inventory_path) if request.inventory_path else None,
        inventory_name=request.inventory_name,
        store=request.store_uri,
        endpoint_url=request.endpoint_url,
        dvc_remote=request.dvc_remote,
        dvc_remote_endpoint=request.dvc_remote_endpoint,
        backend=request.backend,
        allow_simulated=request.allow_simulated,
        world=request.world,
        dispatch=request.dispatch,
        force=request.force,
        reprofile=request.reprofile,
        require_human=request.require_human,
        reason=request.reason,
    )


def pipeline_run_name() -> str:
    """`<inventory>-pipeline-<minute>` until the run knows its inventory version (the run renames itself): the
    request's inventory name, else the name in its inventory file, else `current` (the store's current version)."""
    name = request_field("inventory_name")
    path = request_field("inventory_path")
    if not name and path:
        try:
            name = load_inventory(path).name
        except DreamshardError:
            name = None  # the run itself refuses the file, in one line
    return run_name(name or "current", "pipeline", minute_version())


@flow(name="retrain-on-inventory-change", flow_run_name=pipeline_run_name, log_prints=True)
def retrain_on_inventory_change(request: OrchestratorRequest) -> RunSummary:
    return run_pipeline(pipeline_run(request), PrefectRunner())
