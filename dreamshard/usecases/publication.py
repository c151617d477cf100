"""What one call of the publish use case did (`Publication`): the one result type every door reads, whether the
call gated a plan (`plans publish`, `replan`, the pipeline's publish step, the replan flow), rolled back, or
answered a pending change (`plans approve`, `plans decline`) (docs/architecture/gate.md, "One publish path")."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from dreamshard.evaluation import Comparison
from dreamshard.gate.publish_policy import PolicyOutcome
from dreamshard.placement.diff import PlanDiff
from dreamshard.usecases.base import Result
from dreamshard.values import GateDecision, Inventory, Plan
from dreamshard.values.records import PublishedRef
from dreamshard.values.review import Change, Review

#: What became of the call:
#: `published`: the judged plan became current; `fallback`: another plan became current in its place (the incumbent
#: extended, or the best measured baseline); `rolled-back`: an earlier plan became current again; `kept`: nothing
#: current changed (the gate kept the current plan, or rejected the plan and the current one serves); `pending`:
#: the change waits for a reviewer (`plans approve PLAN_ID`); `declined`: a reviewer said no, nothing changed;
#: `already-decided` / `already-pending`: the store held this plan's decision, or its pending change: nothing
#: measured or written.
Status = Literal[
    "published", "fallback", "rolled-back", "kept", "pending", "declined", "already-decided", "already-pending"
]
#: The statuses after which something else is current than before.
CHANGED: tuple[Status, ...] = ("published", "fallback", "rolled-back")


class Publication(Result):
    """What one publish, rollback or answer did (module docstring). The plan, comparison and inventory it decided on
    ride along for the doors' reports and are left out of its JSON."""

    inventory_name: str
    status: Status
    reason: str  # one line: what happened and why
    plan_id: str | None = None  # the judged plan (a rollback's or an answer's: the plan it concerns)
    decision: GateDecision | None = None  # the judged plan's recorded decision (None: a rollback)
    outcome: PolicyOutcome | None = None  # what the publish policy made of the gate's decision
    change: Change | None = None  # what the call made (or would make) current
    ref: PublishedRef | None = None  # where the judged plan is stored
    fallback_ref: PublishedRef | None = None  # the plan made current (or kept pending) in the judged plan's place
    fallback_decision: GateDecision | None = None
    pending_ref: PublishedRef | None = None  # status pending: where the change waits (`plans approve` takes its id)
    review: Review | None = None  # the reviewer's answer, when one was asked and answered
    asked: bool = False  # a reviewer was asked (publish.require_human)
    reviewer: str = ""  # who could answer (`Reviewer.where`), when one was asked
    previous_plan_id: str | None = None  # what was current before the call
    current_plan_id: str | None = None  # what is current after it
    # the judged plan against the plan that was current: every moved table from -> to, with why (JSON: always,
    # whether or not the plan became current); None when nothing was current
    diff: PlanDiff | None = None
    moves_why: str = ""  # what pays for the moves (the measured gain over publish.move_horizon_steps)
    plan: Plan | None = Field(default=None, exclude=True)  # the judged plan, with its measured costs
    comparison: Comparison | None = Field(default=None, exclude=True)
    inventory: Inventory | None = Field(default=None, exclude=True)

    @property
    def changed(self) -> bool:
        """Whether another plan is current after the call than before."""
        return self.status in CHANGED

    @property
    def judged_is_current(self) -> bool:
        """Whether the judged plan (or the rollback's target) is current after the call."""
        return self.current_plan_id is not None and self.current_plan_id == self.plan_id

    @property
    def waiting_id(self) -> str | None:
        """The plan id `plans approve` takes when the change waits for a reviewer."""
        return self.pending_ref.plan_id if self.pending_ref is not None else None
