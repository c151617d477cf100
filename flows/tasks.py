"""Prefect tasks of the orchestrator: each is one library call (a workspace step, a DVC stage, the gate, the store).

Library imports are inside the tasks so importing the flows stays cheap and a failure surfaces as the
library's typed error.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from dreamshard.types import Inventory, Plan
from dreamshard.workspace import PipelineWorkspace, RemoteSpec

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


def pipeline_path(name: str) -> Path:
    """dvc.yaml / params.yaml as shipped with the installed package (the repository's own files)."""
    return Path(str(resources.files("dreamshard_flows") / "pipeline" / name))


def pipeline_file(name: str) -> str:
    return pipeline_path(name).read_text()


def absolute_uri(uri: str, base: Path | None = None) -> str:
    """A local store or remote path made absolute (stage commands run with the workspace as working directory)."""
    if "://" in uri and not uri.startswith("file://"):
        return uri
    p = Path(uri.removeprefix("file://")).expanduser()
    return str(p if p.is_absolute() else ((base or Path.cwd()) / p).resolve())


def params_text(params_path: str | None, backend: str | None) -> str | None:
    """The params.yaml text a run uses: the file as it is, or with profile.backend overridden."""
    if params_path is None:
        return None
    text = Path(params_path).read_text()
    if not backend:
        return text
    import yaml

    from dreamshard.pipeline_config import load_pipeline_config

    load_pipeline_config(params_path, backend=backend)  # a bad backend name fails here, in one line
    data = yaml.safe_load(text) or {}
    data.setdefault("profile", {})["backend"] = backend
    return yaml.safe_dump(data, sort_keys=False)


@task(name="prepare-workspace", cache_policy=NO_CACHE)
def prepare_workspace_task(root: str, params: str | None, inventory: Inventory, remote: RemoteSpec) -> list[str]:
    """Create or update the workspace: the installed stage graph, the run's params, the input inventory, the
    remote, the code link. Returns what changed."""
    ws = PipelineWorkspace(root)
    changed = ["created"] if ws.init(pipeline_file("dvc.yaml"), params or pipeline_file("params.yaml"), remote) else []
    if ws.sync_text("dvc.yaml", pipeline_file("dvc.yaml")):
        changed.append("dvc.yaml")
    if params is not None and ws.sync_text("params.yaml", params):
        changed.append("params.yaml")
    ws.set_remote(remote)
    if ws.write_inventory(inventory):
        changed.append("inventory")
    return changed


@task(name="dvc-status", cache_policy=NO_CACHE)
def status_task(root: str) -> dict[str, Any]:
    """`dvc status`: the stages whose dependencies, params or outputs changed."""
    return PipelineWorkspace(root).status()


@task(name="dvc-stage", task_run_name="{stage}", cache_policy=NO_CACHE, tags=["dvc"])
def stage_task(root: str, stage: str, force: bool, env: dict[str, str]) -> str:
    """`dvc repro --single-item STAGE`: the stage's command from dvc.yaml, recorded in dvc.lock."""
    from prefect.runtime import task_run

    out = PipelineWorkspace(root).repro(stage, force=force,
                                        env={**env, "DREAMSHARD_PARENT_TASK_RUN_ID": str(task_run.id or "")})
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
    from dreamshard.errors import StoreError
    from dreamshard.events import get_current_inventory
    from dreamshard.store import open_store

    found = get_current_inventory(open_store(store_uri, endpoint_url=endpoint_url), inventory_name)
    if found is None:
        raise StoreError(
            f"no inventory '{inventory_name}' in {store_uri}: push one with `dreamshard inventory push INV --store URI`"
        )
    return found[0]


@task(name="gate", cache_policy=NO_CACHE)
def gate_task(root: str, min_improvement: float) -> tuple[Plan, Any]:
    """Verify data/plan.json against the workspace inventory and data/comparison.json, then decide
    (dreamshard.gate.gate_comparison_file): the plan to store carries the comparison's measured costs."""
    from dreamshard.gate import gate_comparison_file
    from dreamshard.io import load_inventory, load_plan
    from dreamshard.workspace import COMPARISON, INVENTORY, PLAN

    ws = PipelineWorkspace(root)
    return gate_comparison_file(load_plan(ws.path(PLAN)), load_inventory(ws.path(INVENTORY)), ws.path(COMPARISON),
                                min_improvement)


@task(name="lineage", cache_policy=NO_CACHE)
def lineage_task(root: str, flow_run_id: str | None) -> Any:
    return PipelineWorkspace(root).lineage(flow_run_id)


@task(name="publish-plan", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=2)
def publish_task(store_uri: str, endpoint_url: str | None, plan: Plan, decision: Any) -> Any:
    """Approved: versioned upload, verify, move `current`. Rejected: kept under rejected/ with the reason."""
    from dreamshard.store import open_store, publish_or_reject

    return publish_or_reject(open_store(store_uri, endpoint_url=endpoint_url), plan, decision)
