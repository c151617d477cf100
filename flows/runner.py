"""The pipeline's `Runner` (dreamshard.usecases.runner) on Prefect: each step a task run, the publish step a subflow
run, its reviewer the UI's pause (flows/review.py), each report an artifact (docs/architecture/pipeline.md,
"Runners")."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timezone
from typing import ParamSpec, TypeVar

from dreamshard_flows.artifacts import metrics_artifact, profile_batches_artifact, publish_plan_artifacts
from dreamshard_flows.fanout import batch_runs, worker_dead
from dreamshard_flows.logs import one_line_known_errors
from dreamshard_flows.naming import rename_flow_run
from dreamshard_flows.review import PrefectReviewer
from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from dreamshard.usecases.review import Reviewer
from dreamshard.usecases.runner import ProfiledBatches, PublishedPlan, RunReport, Step, TrainMetrics

P = ParamSpec("P")
T = TypeVar("T")

one_line_known_errors()  # a DreamshardError in a task or flow is logged as its one line (dreamshard_flows.logs)


def _batch_runs(report: ProfiledBatches) -> dict[str, list[tuple[str, str]]]:
    """The deployment runs of the report's batches (`fanout.batch_runs`); none when they ran in the stage's process."""
    from prefect.client.orchestration import get_client

    campaigns = {s.campaign for s in report.shards if s.worker.flow_run_id}
    with get_client(sync_client=True) as client:
        return {b: r for campaign in sorted(campaigns) for b, r in batch_runs(client, campaign).items()}


class PrefectRunner:
    """Runs the pipeline's steps as Prefect task runs inside the calling flow run (see the module's docstring)."""

    def __init__(self, reviewer: Reviewer | None = None) -> None:
        self.reviewer: Reviewer = reviewer if reviewer is not None else PrefectReviewer()

    def step(self, step: Step, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """`fn` as a task run named `step.name` (run name `step.label`), with the step's retries and tags."""
        label = step.label
        as_task = task(
            name=step.name,
            task_run_name=(lambda: label) if label else None,
            retries=step.retries,
            retry_delay_seconds=step.retry_delay_s,
            tags=list(step.tags),
            cache_policy=NO_CACHE,
        )(fn)
        return as_task(*args, **kwargs)

    def nested(self, step: Step, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """`fn` as a subflow run named `step.name` (its steps are its own task runs)."""

        def body() -> T:
            return fn(*args, **kwargs)

        body.__name__ = step.name.replace("-", "_")
        return flow(name=step.name, log_prints=True, validate_parameters=False)(body)()

    def log(self, message: str) -> None:
        get_run_logger().info("%s", message)

    def rename(self, name: str) -> None:
        rename_flow_run(name)

    def show(self, report: RunReport) -> None:
        if isinstance(report, ProfiledBatches):
            profile_batches_artifact(report.shards, report.inventory_name, _batch_runs(report))
        elif isinstance(report, TrainMetrics):
            metrics_artifact("train-metrics", report.metrics, report.inventory_name)
        elif isinstance(report, PublishedPlan):
            publish_plan_artifacts(report.publication, report.store_uri, report.stats_markdown)

    def run_id(self) -> str | None:
        from prefect.runtime import flow_run

        return str(flow_run.id) if flow_run.id else None

    def step_id(self) -> str | None:
        from prefect.runtime import task_run

        return str(task_run.id) if task_run.id else None

    def api_url(self) -> str | None:
        from prefect.settings import PREFECT_API_URL

        value = PREFECT_API_URL.value()
        return str(value) if value else None

    def workers_alive(self, deployment: str) -> bool:
        """Whether a worker of the deployment's work pool is alive (Prefect's heartbeat rule, `fanout.worker_dead`)."""
        from prefect.client.orchestration import get_client
        from prefect.exceptions import ObjectNotFound

        try:
            with get_client(sync_client=True) as client:
                pool = client.read_deployment_by_name(deployment).work_pool_name
                workers = client.read_workers_for_work_pool(pool) if pool else []
        except ObjectNotFound:
            return False
        now = datetime.now(timezone.utc)
        return any(not worker_dead(w, now) and w.last_heartbeat_time for w in workers)
