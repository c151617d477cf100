"""The profile stage's `workers` dispatcher: each batch as a run of the profile-batch deployment on the `gpu` work
pool (docs/architecture.md, "Profiling fan-out").

The library plans, measures and merges the batches (dreamshard.usecases.profile, dreamshard.profiling.batches) and
calls this through the `dreamshard.dispatchers` entry point; this module only watches the deployment runs:

* every batch is one flow run of the deployment; its shard key is deterministic, so a retry overwrites;
* a run that fails, crashes or is cancelled is submitted again (up to `pipeline.batch_attempts` runs);
* a run whose worker stopped heartbeating (the host died or the worker was killed) is marked Crashed and
  submitted again: Prefect labels a flow run with the worker that took it, and the worker's last heartbeat is
  older than three heartbeat intervals (Prefect's own rule for an offline worker);
* batches whose shard already exists in the campaign are not run again (a retried orchestrator run resumes).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import Any
from uuid import UUID

from dreamshard_flows.requests import BatchRequest

from dreamshard.config.stages import PipelineSettings
from dreamshard.errors import PipelineError
from dreamshard.profiling.batches import BatchSpec, read_shard, write_spec
from dreamshard.store.base import PlanStore

#: Prefect's rule for an offline worker: no heartbeat for this many heartbeat intervals.
INACTIVITY_HEARTBEAT_MULTIPLE = 3
WORKER_LABEL = "prefect.worker.name"
#: Flow runs read per API call (the server caps a page).
PAGE = 200

Log = Callable[[str], None]


def _final_name(state: Any) -> str:
    return state.name if state is not None else "?"


def worker_dead(worker: Any, now: datetime) -> bool:
    """Prefect's rule for an offline worker: marked OFFLINE, or silent for three heartbeat intervals."""
    if worker is None:
        return False
    if str(getattr(worker, "status", "")).upper().endswith("OFFLINE"):
        return True
    last = worker.last_heartbeat_time
    interval = worker.heartbeat_interval_seconds or 30
    if last is None:
        return False
    return (now - last).total_seconds() > INACTIVITY_HEARTBEAT_MULTIPLE * interval


def run_on_workers(
    store: PlanStore,
    store_uri: str,
    endpoint_url: str | None,
    specs: Sequence[BatchSpec],
    deployment_name: str,
    attempts: int = 3,
    timeout_s: float = 6 * 3600,
    parent_task_run_id: str | None = None,
    poll_s: float = 1.0,
    log: Log = print,
) -> dict[str, list[str]]:
    """Run every batch without a shard as a run of `deployment_name`; returns {batch id: [flow run ids]}."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
    from prefect.exceptions import ObjectNotFound
    from prefect.states import Crashed

    todo = {s.batch_id: s for s in specs if read_shard(store, s) is None}
    runs: dict[str, list[str]] = {bid: [] for bid in todo}
    if not todo:
        return runs
    with get_client(sync_client=True) as client:
        try:
            deployment = client.read_deployment_by_name(deployment_name)
        except ObjectNotFound:
            raise PipelineError(
                f"no Prefect deployment '{deployment_name}': register it (python -m dreamshard_flows.deploy "
                f"--work-pools) and start a worker (infra/start-worker.sh gpu), or run the batches locally"
            ) from None
        pool = deployment.work_pool_name

        def submit(spec: BatchSpec) -> None:
            request = BatchRequest(store_uri=store_uri, endpoint_url=endpoint_url, spec_key=write_spec(store, spec))
            attempt = len(runs[spec.batch_id]) + 1
            fr = client.create_flow_run_from_deployment(
                deployment.id,
                parameters={"request": request.model_dump(mode="json")},
                name=f"{spec.batch_id}-try{attempt}",
                tags=["dreamshard", "profile-batch", spec.campaign],
                parent_task_run_id=UUID(parent_task_run_id) if parent_task_run_id else None,
            )
            runs[spec.batch_id].append(str(fr.id))

        for spec in todo.values():
            submit(spec)
        log(f"submitted {len(todo)} batches to deployment {deployment_name} (pool {pool})")
        deadline = time.monotonic() + timeout_s
        pending = set(todo)
        while pending:
            if time.monotonic() > deadline:
                raise PipelineError(
                    f"{len(pending)} profiling batches not finished after {timeout_s:.0f} s (pipeline.batch_timeout_s); "
                    f"are workers polling pool '{pool}'? (infra/start-worker.sh {pool})"
                )
            current = {runs[b][-1]: b for b in pending}
            ids = [UUID(i) for i in current]
            flow_runs = [
                fr
                for start in range(0, len(ids), PAGE)
                for fr in client.read_flow_runs(
                    flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=ids[start : start + PAGE])), limit=PAGE
                )
            ]
            workers = None
            now = datetime.now(timezone.utc)
            for fr in flow_runs:
                bid = current[str(fr.id)]
                spec = todo[bid]
                state = fr.state
                retry_reason = None
                if state is not None and state.is_completed():
                    if read_shard(store, spec) is not None:
                        pending.discard(bid)
                        continue
                    retry_reason = "completed without writing its shard"
                elif state is not None and state.is_final():
                    retry_reason = f"ended {_final_name(state)}: {state.message or ''}".strip()
                elif state is not None and (state.is_running() or state.is_pending()):
                    name = (fr.labels or {}).get(WORKER_LABEL)
                    if name:
                        if workers is None:
                            workers = {w.name: w for w in client.read_workers_for_work_pool(pool)}
                        if worker_dead(workers.get(name), now):
                            message = f"worker {name} stopped heartbeating while running batch {bid}"
                            client.set_flow_run_state(fr.id, Crashed(message=message), force=True)
                            retry_reason = message
                if retry_reason is None:
                    continue
                if len(runs[bid]) >= attempts:
                    raise PipelineError(
                        f"profiling batch {bid} failed {attempts} times (pipeline.batch_attempts); last: {retry_reason}"
                    )
                log(f"batch {bid}: {retry_reason}; submitting it again")
                submit(spec)
            if pending:
                time.sleep(poll_s)
    return runs


def dispatch_to_workers(
    store: PlanStore,
    store_uri: str,
    endpoint_url: str | None,
    specs: Sequence[BatchSpec],
    settings: PipelineSettings,
    parent_task_run_id: str | None = None,
    log: Log = print,
) -> dict[str, list[str]]:
    """The `workers` batch dispatcher (entry point group `dreamshard.dispatchers`, called by the library's profile
    stage, dreamshard.usecases.profile.run_batched): every batch as a run of pipeline.profile_deployment."""
    return run_on_workers(
        store,
        store_uri,
        endpoint_url,
        specs,
        settings.profile_deployment,
        attempts=settings.batch_attempts,
        timeout_s=settings.batch_timeout_s,
        parent_task_run_id=parent_task_run_id,
        log=log,
    )
