"""A reviewer's part in making a plan current (docs/architecture/gate.md, "Reviewers"): the change a decision would
make, the question it asks when the team's policy wants a human (publish.require_human), the answer, and the change
kept pending when nobody could answer."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from dreamshard.values.ids import utcnow

#: What a decision would do to the store's current plan:
#: `approval`: the gate approved the plan (it beat every baseline and the current plan);
#: `first-plan`: inside the noise or equivalent, and nothing was current, so it becomes the first;
#: `replaces`: inside the noise or equivalent, and the current plan cannot serve this version (another schema or
#: topology, or it breaks a constraint of the version), so it takes its place;
#: `fallback`: the plan was rejected and the current plan cannot serve this version: the incumbent extended to it,
#: or the best measured baseline, becomes current instead;
#: `rollback`: an earlier approved plan becomes current again.
Change = Literal["approval", "first-plan", "replaces", "fallback", "rollback"]


class ReviewQuestion(BaseModel):
    """What a reviewer is asked before a plan becomes current: one line (`headline`) and the whole case in markdown
    (`details`: the decision, its interval and evidence, the moves), answered within `timeout_s`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    inventory_name: str
    plan_id: str  # the plan that would become current
    change: Change
    current_plan_id: str | None = None  # what is current now (None: nothing)
    headline: str
    details: str
    timeout_s: int = Field(default=3600, ge=1)


class Review(BaseModel):
    """A reviewer's answer: make the plan current (`approve`) or not, with a comment, who answered and where."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    approve: bool
    comment: str = Field(default="", max_length=2000)
    reviewer: str = Field(default="", max_length=200)  # who answered, as the answering door knows them
    via: str = Field(default="", max_length=100)  # where: the Prefect UI, the terminal, `plans approve`
    answered_at: datetime = Field(default_factory=utcnow)

    def said(self) -> str:
        """The answer in words, for a decision's reason: "approved by alice via the terminal: looks good"."""
        who = f" by {self.reviewer}" if self.reviewer else ""
        where = f" via {self.via}" if self.via else ""
        note = f": {self.comment}" if self.comment else ""
        return f"{'approved' if self.approve else 'declined'}{who}{where}{note}"


class PendingChange(BaseModel):
    """A change kept waiting for a reviewer (publish.require_human, nobody could answer): what it would make current,
    against which current plan it was decided (approving it later is refused once another plan became current), and
    the question it asks. `dreamshard plans approve PLAN_ID` answers it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    change: Change
    against_plan_id: str | None = None  # the current plan when it was decided (None: nothing was current)
    headline: str
    asked_at: datetime = Field(default_factory=utcnow)
