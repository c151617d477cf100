"""profile-batch: measure one profiling batch and write its shard (the `gpu` work pool runs these; one worker
per GPU host). The batch's spec and its shard are objects in the plan store's storage, so any host can run it."""

from __future__ import annotations

from typing import Any

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.runtime import flow_run

from dreamshard_flows.requests import BatchRequest


@task(name="measure-batch", cache_policy=NO_CACHE, tags=["gpu"])
def measure_batch_task(request: BatchRequest, flow_run_id: str) -> dict[str, Any]:
    """Measure the batch's planned items on the backend of its spec and write its shard
    (dreamshard.profiling.batches.run_batch / write_shard). A shard already written is kept as it is."""
    from dreamshard.profiling.batches import WorkerInfo, read_shard, read_spec, run_batch, write_shard
    from dreamshard.store import open_store

    store = open_store(request.store_uri, endpoint_url=request.endpoint_url)
    spec = read_spec(store, request.spec_key)
    done = read_shard(store, spec)
    if done is None:
        oracle = spec.profile.oracle()
        try:
            done = run_batch(spec, oracle, WorkerInfo.here(flow_run_id))
        finally:
            oracle.close()
        write_shard(store, done, spec)
    return {"batch_id": spec.batch_id, "records": len(done.records), "shard": spec.shard_key,
            "worker": done.worker.model_dump()}


@flow(name="profile-batch", retries=1, retry_delay_seconds=2, log_prints=True)
def profile_batch_flow(request: BatchRequest) -> dict[str, Any]:
    out = measure_batch_task(request, str(flow_run.id or ""))
    w = out["worker"]
    get_run_logger().info("batch %s: %d records by %s@%s pid %s -> %s", out["batch_id"], out["records"],
                          w["worker"] or "local", w["host"], w["pid"], out["shard"])
    return out
