"""The profile stage's `workers` dispatcher: each batch as a run of the profile-batch deployment on the `gpu` work
pool (docs/architecture/pipeline.md, "Profiling fan-out").

The library plans, measures and merges the batches (dreamshard.usecases.profile, dreamshard.profiling.dispatch) and
calls this through the `dreamshard.dispatchers` entry point with the stage's batches
(dreamshard.usecases.profile_batches.Batches); this module only watches the deployment runs:

* every batch is one flow run of the deployment; its shard key is deterministic, so a retry overwrites;
* a run that fails, crashes or is cancelled is submitted again (up to `pipeline.batch_attempts` runs);
* a run whose worker stopped heartbeating (the host died or the worker was killed) is marked Crashed and
  submitted again: Prefect labels a flow run with the worker that took it, and the worker's last heartbeat is
  older than three heartbeat intervals (Prefect's own rule for an offline worker);
* batches whose shard already exists in the campaign are not run again (a retried orchestrator run resumes).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any
from uuid import UUID

from dreamshard_flows.naming import run_name
from dreamshard_flows.requests import BatchRequest

from dreamshard.config.stages import PipelineSettings
from dreamshard.errors import PipelineError
from dreamshard.usecases.profile_batches import Batches
from dreamshard.values.batches import BatchRef

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


def batch_run_name(spec: BatchRef, attempt: int) -> str:
    """`<inventory>-profile-<batch id>-try<attempt>`: which inventory's batch, and which attempt at it."""
    return run_name(spec.inventory or "inventory", "profile", f"{spec.batch_id}-try{attempt}")


def batch_runs(client: Any, campaign: str) -> dict[str, list[tuple[str, str]]]:
    """{batch id: [(run name, state name), ...] in the order they were submitted}: every deployment run of the
    campaign's batches (read back by their tags; the batch from the spec its request names)."""
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterTags
    from prefect.client.schemas.sorting import FlowRunSort

    out: dict[str, list[tuple[str, str]]] = {}
    tags = FlowRunFilterTags(all_=["profile-batch", campaign])
    for start in range(0, 100 * PAGE, PAGE):
        page = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(tags=tags), sort=FlowRunSort.EXPECTED_START_TIME_ASC, limit=PAGE, offset=start
        )
        for fr in page:
            key = str(((fr.parameters or {}).get("request") or {}).get("spec_key") or "")
            batch = key.rsplit("/", 1)[-1].removesuffix(".spec.json")
            if batch:
                out.setdefault(batch, []).append((fr.name, _final_name(fr.state)))
        if len(page) < PAGE:
            break
    return out


class _Watch:
    """The deployment runs of one profile stage: which run each batch is on, and submitting a batch (again)."""

    def __init__(
        self,
        client: Any,
        batches: Batches,
        where: tuple[str, str | None],
        deployment: Any,
        parent_task_run_id: str | None,
    ) -> None:
        self.client, self.batches, self.deployment = client, batches, deployment
        self.store_uri, self.endpoint_url = where  # how a worker reaches the store
        self.parent = UUID(parent_task_run_id) if parent_task_run_id else None
        self.runs: dict[str, list[str]] = {}

    def submit(self, spec: BatchRef) -> None:
        """One flow run of the deployment for the batch (its spec written first), named `batch_run_name`, tagged with
        its campaign and inventory."""
        request = BatchRequest(
            store_uri=self.store_uri, endpoint_url=self.endpoint_url, spec_key=self.batches.submit(spec)
        )
        attempt = len(self.runs.setdefault(spec.batch_id, [])) + 1
        fr = self.client.create_flow_run_from_deployment(
            self.deployment.id,
            parameters={"request": request.model_dump(mode="json")},
            name=batch_run_name(spec, attempt),
            tags=["dreamshard", "profile-batch", spec.campaign, *([spec.inventory] if spec.inventory else [])],
            parent_task_run_id=self.parent,
        )
        self.runs[spec.batch_id].append(str(fr.id))

    def latest_runs(self, pending: set[str]) -> list[Any]:
        """The latest flow run of every pending batch, read a page at a time."""
        from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

        ids = [UUID(self.runs[b][-1]) for b in pending]
        return [
            fr
            for start in range(0, len(ids), PAGE)
            for fr in self.client.read_flow_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=ids[start : start + PAGE])), limit=PAGE
            )
        ]

    def retry_reason(self, fr: Any, spec: BatchRef, workers: Callable[[], dict[str, Any]], now: datetime) -> str:
        """Why the batch's run must be submitted again ("" when it is fine: done, or still going on a live
        worker); a run whose worker stopped heartbeating is marked Crashed first."""
        from prefect.states import Crashed

        state = fr.state
        if state is not None and state.is_completed():
            return "" if self.batches.written(spec) else "completed without writing its shard"
        if state is not None and state.is_final():
            return f"ended {_final_name(state)}: {state.message or ''}".strip()
        name = (fr.labels or {}).get(WORKER_LABEL)
        if state is None or not (state.is_running() or state.is_pending()) or not name:
            return ""
        if not worker_dead(workers().get(name), now):
            return ""
        message = f"worker {name} stopped heartbeating while running batch {spec.batch_id}"
        self.client.set_flow_run_state(fr.id, Crashed(message=message), force=True)
        return message


def run_on_workers(
    batches: Batches,
    store_uri: str,
    endpoint_url: str | None,
    deployment_name: str,
    attempts: int = 3,
    timeout_s: float = 6 * 3600,
    parent_task_run_id: str | None = None,
    poll_s: float = 1.0,
    log: Log = print,
) -> dict[str, list[str]]:
    """Run every batch without a shard as a run of `deployment_name`; returns {batch id: [flow run ids]}."""
    from prefect.client.orchestration import get_client

    todo = {b.batch_id: b for b in batches.pending()}
    if not todo:
        return {}
    with get_client(sync_client=True) as client:
        deployment = _deployment(client, deployment_name)
        pool = deployment.work_pool_name
        watch = _Watch(client, batches, (store_uri, endpoint_url), deployment, parent_task_run_id)
        for spec in todo.values():
            watch.submit(spec)
        log(f"submitted {len(todo)} batches to deployment {deployment_name} (pool {pool})")
        deadline = time.monotonic() + timeout_s
        pending = set(todo)
        while pending:
            if time.monotonic() > deadline:
                raise PipelineError(
                    f"{len(pending)} profiling batches not finished after {timeout_s:.0f} s "
                    f"(pipeline.batch_timeout_s); are workers polling pool '{pool}'? (infra/start-worker.sh {pool})"
                )
            _poll(watch, todo, pending, pool, attempts, log)
            if pending:
                time.sleep(poll_s)
    return watch.runs


def _deployment(client: Any, deployment_name: str) -> Any:
    from prefect.exceptions import ObjectNotFound

    try:
        return client.read_deployment_by_name(deployment_name)
    except ObjectNotFound:
        raise PipelineError(
            f"no Prefect deployment '{deployment_name}': register it (python -m dreamshard_flows.deploy "
            f"--work-pools) and start a worker (infra/start-worker.sh gpu), or run the batches locally"
        ) from None


def _poll(watch: _Watch, todo: dict[str, BatchRef], pending: set[str], pool: str, attempts: int, log: Log) -> None:
    """One look at the pending batches' runs: a finished batch leaves `pending`, a failed one is submitted again
    (PipelineError after `attempts` runs)."""
    current = {watch.runs[b][-1]: b for b in pending}
    found: list[dict[str, Any]] = []

    def workers() -> dict[str, Any]:  # read once per look, and only when a run is on a worker
        if not found:
            found.append({w.name: w for w in watch.client.read_workers_for_work_pool(pool)})
        return found[0]

    now = datetime.now(timezone.utc)
    for fr in watch.latest_runs(pending):
        bid = current[str(fr.id)]
        spec = todo[bid]
        reason = watch.retry_reason(fr, spec, workers, now)
        if not reason:
            if fr.state is not None and fr.state.is_completed():
                pending.discard(bid)
            continue
        if len(watch.runs[bid]) >= attempts:
            raise PipelineError(
                f"profiling batch {bid} failed {attempts} times (pipeline.batch_attempts); last: {reason}"
            )
        log(f"batch {bid}: {reason}; submitting it again")
        watch.submit(spec)


def dispatch_to_workers(
    batches: Batches,
    store_uri: str,
    endpoint_url: str | None,
    settings: PipelineSettings,
    parent_task_run_id: str | None = None,
    log: Log = print,
) -> dict[str, list[str]]:
    """The `workers` batch dispatcher (entry point group `dreamshard.dispatchers`, called by the library's profile
    stage, dreamshard.usecases.profile.run_batched): every batch as a run of pipeline.profile_deployment."""
    return run_on_workers(
        batches,
        store_uri,
        endpoint_url,
        settings.profile_deployment,
        attempts=settings.batch_attempts,
        timeout_s=settings.batch_timeout_s,
        parent_task_run_id=parent_task_run_id,
        log=log,
    )
