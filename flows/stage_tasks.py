"""Prefect tasks of the orchestrator: each is one library call (a workspace step, a DVC stage, the gate, the store).

A failure surfaces as the library's typed error.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.runtime import task_run

from dreamshard.config.settings import Settings, installed_pipeline_file
from dreamshard.errors import StoreError
from dreamshard.gate import GateDecision
from dreamshard.pipeline.workspace import COMPARISON, INVENTORY, PLAN, PipelineWorkspace, RemoteSpec
from dreamshard.store import InventoryRef, PublishedRef, get_current_inventory, open_store, push_inventory
from dreamshard.usecases import publish as publish_uc
from dreamshard.usecases.stored import current_or_none
from dreamshard.values import Inventory, Plan

DVC_YAML = installed_pipeline_file("dvc.yaml")
PARAMS_YAML = installed_pipeline_file("params.yaml")
#: Where the workspace lock lives inside a workspace (git-ignored).
LOCK_FILE = ".pipeline.lock"


@contextmanager
def workspace_lock(path: str | Path) -> Iterator[None]:
    """Exclusive advisory lock on `path`: two pipeline runs never work in one workspace at once (DVC's own lock
    would fail the second one instead of waiting). Blocks until the holder releases it; released on exit."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with open(p, "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            fh.seek(0)
            fh.truncate()
            fh.write(f"{os.getpid()}\n")
            fh.flush()
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def absolute_uri(uri: str, base: Path | None = None) -> str:
    """A local store or remote path made absolute (stage commands run with the workspace as working directory)."""
    if "://" in uri and not uri.startswith("file://"):
        return uri
    p = Path(uri.removeprefix("file://")).expanduser()
    return str(p if p.is_absolute() else ((base or Path.cwd()) / p).resolve())


@task(name="prepare-workspace", cache_policy=NO_CACHE)
def prepare_workspace_task(
    root: str, params: str | None, inventory: Inventory, remote: RemoteSpec, incumbent: Plan | None = None
) -> list[str]:
    """Create or update the workspace: the installed stage graph, the run's params, the input inventory, the
    remote, the code link, and, when the inventory changed, the incumbent (`incumbent`, the plan current now, the
    new version is planned from; dreamshard.pipeline.incumbent). Returns what changed."""
    ws = PipelineWorkspace(root)
    changed = ["created"] if ws.init(DVC_YAML.read_text(), params or PARAMS_YAML.read_text(), remote) else []
    if ws.sync_text("dvc.yaml", DVC_YAML.read_text()):
        changed.append("dvc.yaml")
    if params is not None and ws.sync_text("params.yaml", params):
        changed.append("params.yaml")
    ws.set_remote(remote)
    new_inventory = ws.write_inventory(inventory)
    if new_inventory:
        changed.append("inventory")
    if ws.write_incumbent(incumbent, inventory.name, replace=new_inventory):
        changed.append(f"incumbent {incumbent.plan_id}" if incumbent is not None else "incumbent (none current)")
    return changed


@task(name="dvc-status", cache_policy=NO_CACHE)
def status_task(root: str) -> dict[str, Any]:
    """`dvc status`: the stages whose dependencies, params or outputs changed."""
    return PipelineWorkspace(root).status()


@task(name="dvc-stage", task_run_name="{stage}", cache_policy=NO_CACHE, tags=["dvc"])
def stage_task(root: str, stage: str, force: bool, env: dict[str, str]) -> str:
    """`dvc repro --single-item STAGE`: the stage's command from dvc.yaml, recorded in dvc.lock."""
    out = PipelineWorkspace(root).repro(
        stage, force=force, env={**env, "DREAMSHARD_PARENT_TASK_RUN_ID": str(task_run.id or "")}
    )
    get_run_logger().info("%s", "\n".join(out.strip().splitlines()[-40:]))
    return out


@task(name="git-commit", cache_policy=NO_CACHE)
def commit_task(root: str, message: str) -> str | None:
    return PipelineWorkspace(root).commit(message)


@task(name="dvc-push", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=5)
def push_task(root: str) -> str:
    """`dvc push`: the run's data and model reach the remote before a plan that depends on them is published."""
    return PipelineWorkspace(root).push()


@task(name="current-inventory", cache_policy=NO_CACHE)
def current_inventory_task(store_uri: str, endpoint_url: str | None, inventory_name: str) -> Inventory:
    found = get_current_inventory(open_store(store_uri, endpoint_url=endpoint_url), inventory_name)
    if found is None:
        raise StoreError(
            f"no inventory '{inventory_name}' in {store_uri}: push one with `dreamshard inventory push INV --store URI`"
        )
    return found[0]


@task(name="current-plan", cache_policy=NO_CACHE)
def current_plan_task(store_uri: str, endpoint_url: str | None, inventory_name: str) -> Plan | None:
    """The plan current for the inventory now (None: none yet): the incumbent a new version is planned from."""
    return current_or_none(open_store(store_uri, endpoint_url=endpoint_url), inventory_name)


@task(name="push-inventory", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=2)
def push_inventory_task(store_uri: str, endpoint_url: str | None, inventory: Inventory) -> InventoryRef:
    """The inventory version a run plans for goes to the store (`inventories/<name>/<fingerprint>.yaml`, current):
    the store's current inventory and current plan never disagree because a run forgot to push it."""
    return push_inventory(open_store(store_uri, endpoint_url=endpoint_url), inventory, store_uri=store_uri)


@task(name="gate", cache_policy=NO_CACHE)
def gate_task(
    root: str, settings: Settings, store_uri: str | None = None, endpoint_url: str | None = None
) -> tuple[publish_uc.GateResult, bool]:
    """Verify data/plan.json against the workspace inventory and data/comparison.json, then decide
    (dreamshard.usecases.publish.gate): the plan to store carries the comparison's measured costs; a rejected plan
    for a version no current plan can serve carries the fallback (the best measured baseline). When the store
    (`store_uri`) already holds a decision for this plan id and inventory version, that one is returned instead
    (second element True): one decision per plan."""
    ws = PipelineWorkspace(root)
    store = open_store(store_uri, endpoint_url=endpoint_url) if store_uri is not None else None
    if store is not None:
        done = publish_uc.recorded(store, ws.path(PLAN))
        if done is not None:
            return done, True
    gated = publish_uc.gate(
        publish_uc.PublishRequest(
            settings=settings, plan=ws.path(PLAN), comparison=ws.path(COMPARISON), inventory=ws.path(INVENTORY)
        ),
        store,
    )
    return gated, False


@task(name="lineage", cache_policy=NO_CACHE)
def lineage_task(root: str, flow_run_id: str | None) -> Any:
    return PipelineWorkspace(root).lineage(flow_run_id)


@task(name="publish-plan", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=2)
def publish_task(store_uri: str, endpoint_url: str | None, plan: Plan, decision: GateDecision) -> PublishedRef:
    """Approved: versioned upload, verify, move `current`. Rejected / inconclusive: kept under rejected/ with the
    reason. A plan id the store already decided for this inventory version keeps that decision."""
    return publish_uc.store_decision(open_store(store_uri, endpoint_url=endpoint_url), plan, decision)
