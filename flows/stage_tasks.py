"""Prefect tasks of the orchestrator and its publish step: each is one use-case call
(dreamshard.usecases.pipeline_steps, dreamshard.usecases.pipeline_publish). A failure surfaces as the library's
typed error."""

from __future__ import annotations

from typing import Any

from dreamshard_flows.logs import one_line_known_errors
from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.runtime import task_run

from dreamshard.usecases import pipeline_publish as publish_uc
from dreamshard.usecases import pipeline_steps as steps
from dreamshard.usecases.publish import GateResult
from dreamshard.values import GateDecision, Inventory, Plan, Topology
from dreamshard.values.lineage import Lineage
from dreamshard.values.records import PublishedRef
from dreamshard.values.remote import RemoteSpec

one_line_known_errors()  # a DreamshardError in a task or flow is logged as its one line (dreamshard_flows.logs)


@task(name="prepare-workspace", cache_policy=NO_CACHE)
def prepare_workspace_task(
    root: str, params: str | None, inventory: Inventory, remote: RemoteSpec, incumbent: Plan | None = None
) -> list[str]:
    """Create or update the workspace (stage graph, params, input inventory, remote, incumbent): what changed."""
    return steps.prepare_workspace(root, params, inventory, remote, incumbent)


@task(name="dvc-status", cache_policy=NO_CACHE)
def status_task(root: str) -> dict[str, Any]:
    """`dvc status`: the stages whose dependencies, params or outputs changed."""
    return steps.stale_stages(root)


@task(name="dvc-stage", task_run_name="{inventory}-{stage}-{version:.12}", cache_policy=NO_CACHE, tags=["dvc"])
def stage_task(root: str, stage: str, force: bool, env: dict[str, str], inventory: str, version: str) -> str:
    """`dvc repro --single-item STAGE`: the stage's command from dvc.yaml, recorded in dvc.lock. Each line of its
    output reaches the flow log as the stage writes it, and a heartbeat line when it is silent (at least every
    dreamshard.pipeline.stream.HEARTBEAT_S). The run is named `<inventory>-<stage>-<version>`."""
    log = get_run_logger()
    env = {**env, "DREAMSHARD_PARENT_TASK_RUN_ID": str(task_run.id or "")}
    out = steps.run_stage(root, stage, force, env, on_line=lambda line: log.info("%s", line))
    log.info("stage %s done", stage)
    return out


@task(name="git-commit", cache_policy=NO_CACHE)
def commit_task(root: str, message: str) -> str | None:
    return steps.commit(root, message)


@task(name="dvc-push", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=5)
def push_task(root: str) -> str:
    """`dvc push`: the run's data and model reach the remote before a plan that depends on them is published."""
    return steps.push(root)


@task(name="current-inventory", cache_policy=NO_CACHE)
def current_inventory_task(
    inventory_path: str | None, store_uri: str, endpoint_url: str | None, inventory_name: str
) -> Inventory:
    """The inventory the run plans for: the file given, else the store's current version."""
    return steps.run_inventory(inventory_path, store_uri, endpoint_url, inventory_name)


@task(name="current-plan", cache_policy=NO_CACHE)
def current_plan_task(
    store_uri: str, endpoint_url: str | None, inventory_name: str, topology: Topology | None = None
) -> Plan | None:
    """The incumbent a new version is planned from (None: none yet): the plan the job of `topology` runs now (the
    current plan when no topology is given)."""
    return steps.current_plan(store_uri, endpoint_url, inventory_name, topology)


@task(name="push-inventory", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=2)
def push_inventory_task(store_uri: str, endpoint_url: str | None, inventory: Inventory) -> None:
    """The inventory version the run plans for goes to the store (and becomes its current version)."""
    steps.store_inventory(store_uri, endpoint_url, inventory)


@task(name="gate", cache_policy=NO_CACHE)
def gate_task(setup: publish_uc.PublishSetup) -> tuple[GateResult, bool]:
    """The gate's decision on data/plan.json (or the store's recorded one: second element True)."""
    return publish_uc.gate_workspace_plan(setup)


@task(name="lineage", cache_policy=NO_CACHE)
def lineage_task(root: str, flow_run_id: str | None) -> Lineage:
    return publish_uc.lineage(root, flow_run_id)


@task(name="publish-plan", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=2)
def publish_task(
    store_uri: str, endpoint_url: str | None, plan: Plan, decision: GateDecision, lineage: Lineage | None
) -> PublishedRef:
    """Store the plan (with the run's lineage) and its decision: approved, current; else kept under rejected/."""
    return publish_uc.store_decision(store_uri, endpoint_url, plan, decision, lineage)
