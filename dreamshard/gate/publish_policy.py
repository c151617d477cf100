"""The publish policy: what the gate's decision means for the store's current plan (docs/architecture/gate.md, "The
publish policy"). Constraints and the job come first: a current plan that breaks the version's constraints or cannot
serve its job never stays.

* approved: the plan becomes current (change `approval`).
* The current plan serves the job (`Incumbent.serves`): every other decision leaves it current; a plan that places
  every unit as it does is reported as such (no number of rounds could tell the two apart).
* Nothing current can stay as it is (none is current, or it cannot serve: another schema or topology, or it breaks
  a constraint, which the reason names). When its extension was measured (`current+new`: the old tables where they
  are, the new ones placed around them, a table whose layout breaks a new constraint placed again), it stands in
  for the current plan: the judged plan replaces it only by an approval (beating it, moves charged, as it must beat
  a current plan that serves), and otherwise the extension becomes current (`fallback`), never a fresh plan that
  moves the job's tables. Without one, a plan inside the noise or equivalent becomes current (`first-plan`,
  `replaces`), and a rejected one hands over to the best measured baseline, every figure charged its moves
  (`fallback`).
Everything here works on values: the judgement (`decide.Judgement`) and the incumbent (`incumbent.Incumbent`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from dreamshard.gate.decide import Judgement
from dreamshard.gate.fallback import fallback_plan
from dreamshard.gate.incumbent import Incumbent
from dreamshard.sharders.extend import EXTENDED
from dreamshard.values import Plan
from dreamshard.values.decision import UNDECIDED, GateDecision
from dreamshard.values.review import Change

#: What the policy made of the gate's decision: `approved` / `rejected` / `equivalent` / `inconclusive` as the gate
#: decided (all but an approval leave a serving current plan current); `first-plan`: inside the noise or equivalent
#: with nothing current, it becomes current; `replaces`: the same with a current plan that cannot serve the version;
#: `same-as-current`: it places every unit as the current plan does; `fallback`: something else becomes current
#: instead (the incumbent extended, or the best measured baseline).
PolicyOutcome = Literal[
    "approved", "rejected", "equivalent", "inconclusive", "first-plan", "replaces", "same-as-current", "fallback"
]


def first_plan_label(outcome: str) -> str:
    """What a first plan that the gate found inconclusive or equivalent is called wherever the decision is shown."""
    return f"current: first plan, {outcome}"


class PublishVerdict(BaseModel):
    """The policy's answer: what it made of the decision, the decision the store records for the judged plan, the
    change it makes to what is current (None: none), and with `fallback` the plan and decision that become current
    instead of the judged plan."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    outcome: PolicyOutcome
    decision: GateDecision
    change: Change | None = None
    fallback: Plan | None = None
    fallback_decision: GateDecision | None = None


def _said(decision: GateDecision, consequence: str) -> str:
    """The decision's finding followed by what the policy makes of it."""
    return f"{decision.finding}, {consequence}" if decision.finding else consequence


def _becomes(decision: GateDecision, incumbent: Incumbent) -> PublishVerdict:
    """An undecided plan with nothing to keep: it becomes current (first plan, or in place of one that cannot stay)."""
    why = incumbent.nothing_to_keep
    first = incumbent.plan_id is None
    becomes = decision.revised(
        approved=True,
        outcome="approved",
        label=first_plan_label(decision.outcome) if first else f"current: replaces, {decision.outcome}",
        reason=_said(decision, f"{why}: it becomes current"),
    )
    if first:
        return PublishVerdict(outcome="first-plan", decision=becomes, change="first-plan")
    return PublishVerdict(outcome="replaces", decision=becomes, change="replaces")


def _instead(j: Judgement, label: str, why: str, incumbent: Incumbent) -> PublishVerdict:
    """`label`'s plan becomes current in place of the judged one (`fallback.fallback_plan`)."""
    found = fallback_plan(j, label, why, incumbent)
    d = j.decision
    if found is None:
        return PublishVerdict(outcome=d.outcome, decision=d)
    plan, decided = found
    named = "the current plan extended to this version" if label == EXTENDED else f"the best measured baseline {label}"
    instead = f"{d.reason}; {named} becomes current instead (plan {plan.plan_id}: {why})"
    return PublishVerdict(
        outcome="fallback",
        decision=d.revised(reason=instead),
        change="fallback",
        fallback=plan,
        fallback_decision=decided,
    )


def publish_verdict(j: Judgement, incumbent: Incumbent) -> PublishVerdict:
    """What the gate's decision in `j` means, given the `incumbent` (module docstring)."""
    d = j.decision
    note = f" ({incumbent.constraint}: the current plan cannot stay)" if incumbent.constraint else ""
    if d.approved:
        return PublishVerdict(outcome="approved", decision=d.revised(reason=d.reason + note), change="approval")
    if incumbent.serves:
        current = incumbent.plan
        if d.outcome in UNDECIDED and current is not None and current.units() == j.plan.units():
            stays = (
                f"the current plan {incumbent.plan_id} stays (this plan places every table as it does: the job keeps "
                f"its state, and no number of rounds could tell the two apart)"
            )
            return PublishVerdict(outcome="same-as-current", decision=d.revised(reason=_said(d, stays)))
        return PublishVerdict(outcome=d.outcome, decision=d)
    if EXTENDED in j.samples and incumbent.extension is not None:  # the current plan, extended, stays
        return _instead(j, EXTENDED, incumbent.nothing_to_keep, incumbent)
    if d.outcome in UNDECIDED:
        return _becomes(d, incumbent)
    if d.outcome == "rejected" and d.best_baseline and d.best_baseline in j.plans:
        return _instead(j, d.best_baseline, incumbent.nothing_to_keep, incumbent)
    return PublishVerdict(outcome=d.outcome, decision=d)
