"""What the pipeline needs of whatever executes it (docs/architecture/pipeline.md, "Runners").

`run_pipeline` and `publish_workspace` (dreamshard.usecases.pipeline_run, .pipeline_publish) hold the pipeline's
logic: the stage loop, the decide-once rule, the dispatch choice, the order of the store's writes. They do not know
Prefect. A `Runner` runs each of their steps and answers the few questions that only the executor can:

* `step`: run one step (Prefect: a task run with the step's name, run name, retries and tags);
* `nested`: run a group of steps as one (Prefect: a subflow run, the publish step);
* `reviewer`: who answers before a plan becomes current (dreamshard.usecases.review; Prefect: the UI's pause);
* `show`: keep a report of the run (Prefect: an artifact);
* `run_id`, `step_id`, `api_url`, `workers_alive`: what the profiling dispatch needs (the campaign, the parent of
  the batches' runs, the server the workers poll, whether a worker is alive).

`flows/runner.py` implements it with Prefect; `InProcessRunner` runs everything in this process, for a run
without a Prefect server (`dreamshard pipeline run --runner in-process`) and for tests.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import ParamSpec, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from dreamshard.profiling.batches import ProfileShard
from dreamshard.usecases.publication import Publication
from dreamshard.usecases.review import NoReviewer, Reviewer

P = ParamSpec("P")
T = TypeVar("T")


class Step(BaseModel):
    """One step as the runner shows it: its kind (`name`, the same for every run of it), this run's label
    (`label`, e.g. `<inventory>-<stage>-<version>`), and what the runner retries on failure."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    label: str | None = None
    retries: int = Field(default=0, ge=0)
    retry_delay_s: float = Field(default=0.0, ge=0)
    tags: tuple[str, ...] = ()


class ProfiledBatches(BaseModel):
    """Report: which worker measured which batch of the run's profile stage."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    inventory_name: str
    shards: list[ProfileShard]


class TrainMetrics(BaseModel):
    """Report: the train stage's metrics (a mapping, or a list of rows)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    inventory_name: str
    metrics: JsonValue


class PublishedPlan(BaseModel):
    """Report: what the publish step did (`publication`: the judged plan, its comparison and decision, where it is
    stored, the moves) with the store it went to and the plan's stats report (markdown)."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    publication: Publication
    store_uri: str
    stats_markdown: str


RunReport = ProfiledBatches | TrainMetrics | PublishedPlan


class Runner(Protocol):
    """What executes the pipeline's steps (see the module's docstring)."""

    #: Who answers before a plan becomes current (publish.require_human; `NoReviewer`: the change waits, pending).
    reviewer: Reviewer

    def step(self, step: Step, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T: ...

    def nested(self, step: Step, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T: ...

    def log(self, message: str) -> None: ...

    def rename(self, name: str) -> None:
        """Name the running run (its inventory version became known inside it)."""

    def show(self, report: RunReport) -> None: ...

    def run_id(self) -> str | None:
        """The running run's id (the profiling campaign, the lineage's run); None outside a run."""

    def step_id(self) -> str | None:
        """The running step's id (the parent of the profiling batches' runs); None when it has none."""

    def api_url(self) -> str | None:
        """The orchestration API that workers poll; None: there is none, batches run in the stage's process."""

    def workers_alive(self, deployment: str) -> bool:
        """Whether a worker of `deployment`'s work pool is alive."""


def _describe(report: RunReport) -> str:
    if isinstance(report, ProfiledBatches):
        return f"profiled {len(report.shards)} batch(es) for {report.inventory_name}"
    if isinstance(report, TrainMetrics):
        return f"train metrics of {report.inventory_name}: {report.metrics}"
    p = report.publication
    where = f" at {report.store_uri.rstrip('/')}/{p.ref.key}" if p.ref is not None else ""
    return f"plan {p.plan_id}: {p.status}{where}"


class InProcessRunner:
    """Runs every step in this process, in order, once: no retries, no orchestration API (profiling batches run in
    the stage's own process). The reviewer is `reviewer` (the CLI's: the terminal when it can answer); without one,
    a change that needs a reviewer waits, pending (`NoReviewer`). Log lines and one line per report go to `log`,
    and are kept in `lines`."""

    def __init__(self, log: Callable[[str], None] | None = None, reviewer: Reviewer | None = None) -> None:
        self.lines: list[str] = []
        self._log = log
        self.reviewer: Reviewer = reviewer if reviewer is not None else NoReviewer()
        self._id = uuid.uuid4().hex
        self.names: list[str] = []  # what the run was named, in order
        self.steps: list[str] = []  # each step run, as `name` or `name:label`

    def step(self, step: Step, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        self.steps.append(f"{step.name}:{step.label}" if step.label else step.name)
        return fn(*args, **kwargs)

    def nested(self, step: Step, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        return self.step(step, fn, *args, **kwargs)

    def log(self, message: str) -> None:
        self.lines.append(message)
        if self._log is not None:
            self._log(message)

    def rename(self, name: str) -> None:
        self.names.append(name)

    def show(self, report: RunReport) -> None:
        self.log(_describe(report))

    def run_id(self) -> str | None:
        return self._id

    def step_id(self) -> str | None:
        return None

    def api_url(self) -> str | None:
        return None

    def workers_alive(self, deployment: str) -> bool:
        return False
