"""profile-batch: measure one profiling batch and write its shard (the `gpu` work pool runs these; one worker
per GPU host). The batch's spec and its shard are objects in the plan store's storage, so any host can run it."""

from __future__ import annotations

from typing import Any

from dreamshard_flows.logs import one_line_known_errors
from dreamshard_flows.requests import BatchRequest
from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.runtime import flow_run

from dreamshard.usecases import profile as profile_uc

one_line_known_errors()  # a DreamshardError in a task or flow is logged as its one line (dreamshard_flows.logs)


@task(name="measure-batch", cache_policy=NO_CACHE, tags=["gpu"])
def measure_batch_task(request: BatchRequest, flow_run_id: str) -> dict[str, Any]:
    """Measure the batch's planned items on the backend of its spec and write its shard
    (dreamshard.usecases.profile.measure_batch). A shard already written is kept as it is."""
    done = profile_uc.measure_batch(request.store_uri, request.endpoint_url, request.spec_key, flow_run_id)
    return done.model_dump(mode="json", exclude={"warnings"})


@flow(name="profile-batch", retries=1, retry_delay_seconds=2, log_prints=True)
def profile_batch_flow(request: BatchRequest) -> dict[str, Any]:
    out = measure_batch_task(request, str(flow_run.id or ""))
    w = out["worker"]
    get_run_logger().info(
        "batch %s: %d records by %s@%s pid %s -> %s",
        out["batch_id"],
        out["records"],
        w["worker"] or "local",
        w["host"],
        w["pid"],
        out["shard"],
    )
    return out
