"""profile_flow: measure placements of every training task, one Prefect task per batch of tasks.

Restarting a killed run re-measures nothing that reached the JSONL (deterministic measurement ids);
a batch that completed is also a cache hit keyed by the inventory fingerprint and the batch.
"""

from __future__ import annotations

from typing import Any

from prefect import flow, get_run_logger
from pydantic import BaseModel, ConfigDict

from dreamshard.io import load_inventory
from dreamshard.types import TaskSet
from flows.artifacts import profile_artifact
from flows.requests import ProfileRequest
from flows.tasks import profile_batch_task
from flows.train_flows import load_configs


class ProfileOutcome(BaseModel):
    model_config = ConfigDict(extra="forbid")

    out_path: str
    batches: int
    measured: int  # new records written by this run
    skipped: int  # records already present (resumed)
    backend: str


def batches_of(taskset: TaskSet, tasks_per_batch: int) -> list[TaskSet]:
    """Split the training tasks into consecutive batches (same split on every run: stable cache keys)."""
    train = list(taskset.train)
    return [
        taskset.model_copy(update={"train": tuple(train[i : i + tasks_per_batch])})
        for i in range(0, len(train), tasks_per_batch)
    ]


@flow(name="profile", log_prints=True)
def profile_flow(request: ProfileRequest) -> ProfileOutcome:
    """Profile the workspace inventory's training tasks into the workspace measurements JSONL."""
    log = get_run_logger()
    ws = request.workspace
    cfg = load_configs(request)
    inventory = load_inventory(ws.inventory)
    taskset = TaskSet.model_validate_json(ws.tasks.read_text())
    topology = cfg.topology.topology(cfg.tasks.train_devices)
    summaries: list[dict[str, Any]] = []
    for batch in batches_of(taskset, request.tasks_per_batch):
        summaries.append(profile_batch_task(inventory, batch, topology, cfg.profile, str(ws.measurements)))
    outcome = ProfileOutcome(
        out_path=str(ws.measurements),
        batches=len(summaries),
        measured=sum(s["measured"] for s in summaries),
        skipped=sum(s["skipped"] for s in summaries),
        backend=cfg.profile.backend,
    )
    profile_artifact(summaries, inventory.name)
    log.info("profiled %s: %d new records, %d resumed", inventory.name, outcome.measured, outcome.skipped)
    return outcome
