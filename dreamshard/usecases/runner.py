"""What the pipeline needs of whatever executes it (docs/architecture/pipeline.md, "Runners").

`run_pipeline` and `publish_workspace` (dreamshard.usecases.pipeline_run, .pipeline_publish) hold the pipeline's
logic: the stage loop, the decide-once rule, the dispatch choice, the order of the store's writes. They do not know
Prefect. A `Runner` runs each of their steps and answers the few questions that only the executor can:

* `step`: run one step (Prefect: a task run with the step's name, run name, retries and tags);
* `nested`: run a group of steps as one (Prefect: a subflow run, the publish step);
* `review`: pause for a reviewer (Prefect: the UI's pause with a form);
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

from dreamshard.evaluation import Comparison
from dreamshard.profiling.batches import ProfileShard
from dreamshard.values import GateDecision, Inventory, Plan
from dreamshard.values.records import PublishedRef

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


class Review(BaseModel):
    """A reviewer's answer at the review pause."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    approve: bool
    comment: str = ""


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
    """Report: the plan the publish step decided on, with its comparison, decision, store key and explanation."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    plan: Plan
    comparison: Comparison
    decision: GateDecision
    ref: PublishedRef
    store_uri: str
    stats_markdown: str
    inventory: Inventory


RunReport = ProfiledBatches | TrainMetrics | PublishedPlan


class Runner(Protocol):
    """What executes the pipeline's steps (see the module's docstring)."""

    #: Whether `review` can reach a reviewer (a run with publish.require_human needs one).
    can_review: bool

    def step(self, step: Step, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T: ...

    def nested(self, step: Step, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T: ...

    def log(self, message: str) -> None: ...

    def rename(self, name: str) -> None:
        """Name the running run (its inventory version became known inside it)."""

    def review(self, description: str, timeout_s: int) -> Review | None:
        """Pause for a reviewer, showing `description` (markdown); None: nobody answered within `timeout_s`."""

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
    return f"plan {report.plan.plan_id}: {report.decision.shown} at {report.store_uri.rstrip('/')}/{report.ref.key}"


Reviewer = Callable[[str, int], Review | None]


class InProcessRunner:
    """Runs every step in this process, in order, once: no retries, no orchestration API (profiling batches run in
    the stage's own process). The reviewer is `reviewer` (the CLI's: a question at the terminal); without one, a
    run that needs a reviewer is refused before it starts (`pipeline_run.check_runner`). Log lines and one line
    per report go to `log`, and are kept in `lines`."""

    def __init__(self, log: Callable[[str], None] | None = None, reviewer: Reviewer | None = None) -> None:
        self.lines: list[str] = []
        self._log = log
        self._reviewer = reviewer
        self.can_review = reviewer is not None
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

    def review(self, description: str, timeout_s: int) -> Review | None:
        return self._reviewer(description, timeout_s) if self._reviewer is not None else None

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
