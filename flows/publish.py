"""publish-plan: the step after the DVC stages, outside DVC, as a flow of its own (a deployment, and the
orchestrator's subflow): the library's publish step (dreamshard.usecases.pipeline_publish.publish_workspace) under
the `PrefectRunner`. It gates the workspace's data/plan.json against data/comparison.json with the workspace's
publish params through the one publish use case, waits for a reviewer when publish.require_human says so (the
Prefect UI's pause; no answer in time: the change waits, pending), attaches the plan's lineage, publishes it (or
keeps it as rejected / inconclusive) and tags the workspace commit with the decision. A plan id the store already
decided for this inventory version keeps that decision."""

from __future__ import annotations

from pathlib import Path

from dreamshard_flows.logs import one_line_known_errors
from dreamshard_flows.naming import minute_version, request_field, run_name
from dreamshard_flows.requests import WorkspacePublishRequest
from dreamshard_flows.runner import PrefectRunner
from prefect import flow

from dreamshard.usecases.pipeline_publish import WorkspacePublish, publish_workspace
from dreamshard.usecases.publication import Publication

one_line_known_errors()  # a DreamshardError in a task or flow is logged as its one line (dreamshard_flows.logs)

__all__ = ["Publication", "publish_workspace_plan"]


def publish_run_name() -> str:
    """`<workspace>-publish-<minute>`: the run a reviewer looks for is named, never Prefect's random name."""
    workspace = Path(str(request_field("workspace") or "workspace")).name or "workspace"
    return run_name(workspace, "publish", minute_version())


@flow(name="publish-plan", flow_run_name=publish_run_name, log_prints=True)
def publish_workspace_plan(request: WorkspacePublishRequest) -> Publication:
    publish = WorkspacePublish(
        workspace=Path(request.workspace),
        store=request.store_uri,
        endpoint_url=request.endpoint_url,
        require_human=request.require_human,
        run_id=request.flow_run_id,
    )
    return publish_workspace(publish, PrefectRunner())
