"""Prefect tasks: each calls one dreamshard library function (plus reading/writing its own files).

Business logic lives in the library; these wrappers only add retries, caching, tags and logging.
Library imports are inside the tasks so importing the flows stays cheap and a missing optional
backend fails the task that needs it, with the library's typed error.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from dreamshard.types import Inventory, Plan, TaskSet, Topology


@contextmanager
def workspace_lock(path: str | Path) -> Iterator[None]:
    """Exclusive advisory lock on `path` (a file in the workspace): DVC calls and pipeline runs that share
    one workspace never run concurrently. Blocks until the holder releases it; released on process exit."""
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


# ---------------------------------------------------------------- inventory and tasks


@task(name="load-inventory", cache_policy=NO_CACHE)
def load_inventory_task(path: str) -> Inventory:
    from dreamshard.io import load_inventory

    return load_inventory(path)


@task(name="save-inventory", cache_policy=NO_CACHE)
def save_inventory_task(inventory: Inventory, path: str) -> str:
    from dreamshard.io import save_inventory

    return str(save_inventory(inventory, path))


@task(name="make-tasks", cache_policy=NO_CACHE)
def make_tasks_task(inventory_path: str, out_path: str, params_path: str) -> TaskSet:
    """Split the pool into train / held-out tasks and save them (dreamshard.learning.stages.make_tasks_file,
    behind `dreamshard tasks`)."""
    from dreamshard.learning.stages import make_tasks_file

    return make_tasks_file(Path(inventory_path), Path(out_path), Path(params_path))


# ---------------------------------------------------------------- profiling


@task(name="retire-stale-measurements", cache_policy=NO_CACHE)
def retire_stale_measurements_task(path: str, inventory_fingerprint: str) -> int:
    """Set aside records measured for another inventory version (dreamshard.fingerprints)."""
    from dreamshard.fingerprints import retire_stale_measurements

    return retire_stale_measurements(path, inventory_fingerprint)


def profile_batch_cache_key(context: Any, parameters: dict[str, Any]) -> str | None:
    """Inventory fingerprint + batch (its task names) + settings + the output file's identity.

    A restarted run whose batch already completed into the same JSONL reuses that result instead of even
    opening the oracle. The file's inode is part of the key so a deleted or replaced file never hits a
    stale entry; no file yet means no caching (the JSONL resume is the primary mechanism anyway).
    """
    out = Path(parameters["out_path"])
    if not out.exists():
        return None
    inv: Inventory = parameters["inventory"]
    taskset: TaskSet = parameters["tasks"]
    payload = "|".join(
        [
            inv.fingerprint(),
            ",".join(t.name for t in taskset.train),
            parameters["profile_config"].model_dump_json(),
            parameters["topology"].model_dump_json(),
            str(out.resolve()),
            str(out.stat().st_ino),
        ]
    )
    return "profile-batch-" + hashlib.sha256(payload.encode()).hexdigest()[:32]


@task(
    name="profile-batch",
    tags=["gpu"],
    retries=2,
    retry_delay_seconds=5,
    cache_key_fn=profile_batch_cache_key,
    cache_expiration=timedelta(days=7),
    persist_result=True,
)
def profile_batch_task(
    inventory: Inventory, tasks: TaskSet, topology: Topology, profile_config: Any, out_path: str
) -> dict[str, Any]:
    """Measure one batch of training tasks into the shared JSONL (dreamshard.profiling.profile_inventory).

    The JSONL resume (deterministic measurement ids, skipped when present) is the primary restart
    mechanism; the task cache only avoids even opening the oracle for a finished batch.
    """
    from dreamshard.profiling import profile_inventory

    cfg = profile_config
    oracle = cfg.oracle()
    try:
        summary = profile_inventory(
            inventory, topology, cfg.num_placements, Path(out_path), oracle, seed=cfg.seed, tasks=tasks, progress=False
        )
    finally:
        oracle.close()
    return summary.model_dump(mode="json")


# ---------------------------------------------------------------- planning, comparison, gate, store


@task(name="plan", cache_policy=NO_CACHE)
def plan_task(inventory: Inventory, topology: Topology, sharder: str, options: dict[str, Any]) -> Plan:
    from dreamshard.sharders import get_sharder

    return get_sharder(sharder, **options).shard(inventory, topology)


@task(name="compare-sharders", cache_policy=NO_CACHE, tags=["gpu"])
def compare_task(
    inventory: Inventory,
    topology: Topology,
    sharders: list[str],
    profile_config: Any,
    rounds: int,
    sharder_options: dict[str, Any],
    extra_plans: list[Plan] | None = None,
) -> Any:
    """Measure every contender interleaved on one backend (dreamshard.evaluation.compare_sharders)."""
    from dreamshard.evaluation import compare_sharders

    cfg = profile_config
    oracle = cfg.oracle()
    try:
        return compare_sharders(
            inventory, topology, sharders, oracle, rounds=rounds, sharder_options=sharder_options, progress=None,
            seed=cfg.seed, extra_plans=tuple(extra_plans or ()),
        )
    finally:
        oracle.close()


@task(name="gate", cache_policy=NO_CACHE)
def gate_task(plan: Plan, baselines: dict[str, float], min_improvement: float) -> Any:
    from dreamshard.gate import evaluate_gate

    return evaluate_gate(plan, baselines, min_improvement)


@task(name="publish-plan", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=2)
def publish_task(store_uri: str, endpoint_url: str | None, plan: Plan, decision: Any) -> Any:
    """Approved: versioned upload, verify, move `current`. Rejected: kept under rejected/ with the reason."""
    from dreamshard.store import open_store, publish_or_reject

    return publish_or_reject(open_store(store_uri, endpoint_url=endpoint_url), plan, decision)


@task(name="current-plan", cache_policy=NO_CACHE)
def current_plan_task(store_uri: str, endpoint_url: str | None, inventory_name: str) -> Plan | None:
    from dreamshard.errors import StoreError
    from dreamshard.store import get_current, open_store

    try:
        return get_current(open_store(store_uri, endpoint_url=endpoint_url), inventory_name)
    except StoreError:
        return None


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


# ---------------------------------------------------------------- DVC (optional: reproduce the DVC pipeline from Prefect)


def dvc_lock_path(repo: str | Path) -> Path:
    return Path(repo) / ".dvc" / "tmp" / "dreamshard-flows.lock"


@task(name="dvc-repro", cache_policy=NO_CACHE)
def dvc_repro_task(repo: str, targets: list[str] | None = None) -> str:
    """`dvc repro [targets]` in `repo`, never two at once in one workspace (file lock; DVC's own lock
    would fail the second caller instead of waiting)."""
    from dreamshard.dvc_remote import run_dvc

    with workspace_lock(dvc_lock_path(repo)):
        return run_dvc(["repro", *(targets or [])], repo, timeout_s=None)
