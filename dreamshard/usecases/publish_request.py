"""What every door hands the publish use case (docs/architecture/gate.md, "One publish path"): a plan to gate and
publish (`PublishRequest`: `plans publish`, `replan`, the pipeline's publish step, the replan flow), a rollback
(`RollbackRequest`: `plans rollback`) or a reviewer's answer to a pending change (`AnswerRequest`: `plans approve`,
`plans decline`). Values only: the doors read the files."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from dreamshard.evaluation import Comparison
from dreamshard.usecases.base import Request
from dreamshard.values import Inventory, Plan, Topology
from dreamshard.values.lineage import Lineage
from dreamshard.values.progress import Progress


class StoreChoice(Request):
    """The plan store a request works on (None: publish.store_uri), its S3 endpoint, and whether the caller asks
    for a reviewer on top of publish.require_human (True adds one; nothing removes the team's)."""

    store: str | None = None
    endpoint_url: str | None = None
    require_human: bool | None = None


class PublishRequest(StoreChoice):
    """A plan to gate and, by the team's policy and its reviewer, to make current."""

    plan: Plan  # as read: a plan file is data, taken through `gate.trust.trust_plan`
    inventory: Inventory | None = None  # None: the version pushed to the store with the plan's fingerprint
    comparison: Comparison | None = None  # a comparison holding this plan and the baselines
    comparison_source: str = "comparison"  # where it was read (`read_comparison`): the decision's evidence
    measure: bool = False  # the gate measures the plan and the baselines itself
    baselines: tuple[str, ...] = ()  # baselines added to publish.baselines; never fewer
    baseline_spec: str | None = None  # `--sharders`: more baselines, a comma list, 'heuristics' or 'all'
    model: Path | None = None  # the model that made the plan: its out-of-range check is added to the plan's
    backend: str | None = None  # with a comparison: the backend it must have been measured on
    # the topology the caller plans for (a replan told --devices); None: the job the inventory records, if any
    topology: Topology | None = None
    lineage: Lineage | None = None  # what produced the plan (the pipeline's run: the only door that knows it)
    review_note: str = ""  # markdown a reviewer reads besides the decision (where the run's reports are)
    # what the gate's own measurement is doing, a line at a time (dreamshard.values.progress)
    progress: Progress | None = Field(default=None, exclude=True)


class RollbackRequest(StoreChoice):
    """Make an earlier approved plan current again: `to` (an approved plan id), else the one before the current."""

    inventory: str
    to: str | None = None


class AnswerRequest(StoreChoice):
    """A reviewer's answer to a change kept pending (`plans approve PLAN_ID`, `plans decline PLAN_ID`)."""

    plan_id: str
    inventory: str | None = None  # None: whichever inventory holds the pending plan
    approve: bool
    comment: str = Field(default="", max_length=2000)
    reviewer: str = Field(default="", max_length=200)
