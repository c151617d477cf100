"""The publish policy: what the gate's decision means, given what the store's current plan can serve
(docs/architecture/pipeline.md, "The production loop").

Inside the noise (inconclusive) or as fast as the best baseline within the equivalence margin (equivalent), the
current plan stays when it can serve the new version's training job. With no current plan, or one that cannot serve
the job (another table schema: a table added, removed or reshaped; another topology), there is nothing to keep: such
a plan becomes current, and a rejected one hands over to the best measured baseline (`fallback.py`). A plan that
places every unit as the current plan does is reported as such: no number of rounds could tell the two apart.
The store is read by the caller (`usecases/publish.py`); everything here works on values.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from dreamshard.evaluation import Comparison
from dreamshard.gate.fallback import fallback_plan
from dreamshard.values import Inventory, Plan
from dreamshard.values.decision import UNDECIDED, GateDecision

#: What the policy made of the gate's decision: `approved` / `rejected` / `equivalent` / `inconclusive` as the gate
#: decided (all but an approval leave the current plan current); `first-plan`: inconclusive or equivalent, and
#: nothing current to keep, so it becomes current; `same-as-current`: inconclusive or equivalent, placing every unit
#: as the current plan does; `fallback`: rejected, nothing current to keep, the best measured baseline becomes
#: current.
PolicyOutcome = Literal[
    "approved", "rejected", "equivalent", "inconclusive", "first-plan", "same-as-current", "fallback"
]


def first_plan_label(outcome: str) -> str:
    """What a first plan that the gate found inconclusive or equivalent is called wherever the decision is shown."""
    return f"current: first plan, {outcome}"


class CurrentPlan(BaseModel):
    """The store's current plan of an inventory, as far as the policy needs it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    inventory_name: str
    plan_id: str | None = None  # None: no plan is current
    cannot_serve: str = ""  # why it cannot serve the judged plan's job ("" when it can)
    same_placement: bool = False  # every unit (table, shard, replica) on the device the judged plan puts it

    @property
    def nothing_to_keep(self) -> str:
        """Why no current plan can serve the job ("" when one can)."""
        if self.plan_id is None:
            return f"no plan is current for '{self.inventory_name}'"
        return self.cannot_serve


def cannot_serve(current: Plan, plan: Plan, current_schema: str | None = None) -> str:
    """Why the current plan cannot serve the job `plan` is for ("" when it can: same table schema, same topology;
    a statistics-only change keeps the schema). `plan`'s schema is the gate's (recomputed from its inventory);
    `current_schema`, the store's for the current plan (`store.inventories.schema_of`), else the plan's own."""
    schema = current_schema or current.schema_fingerprint
    if schema is not None and plan.schema_fingerprint is not None and schema != plan.schema_fingerprint:
        return (
            f"the current plan {current.plan_id} places another table schema "
            f"({schema[:12]}, this version's is {plan.schema_fingerprint[:12]}) and cannot serve it"
        )
    if schema is None and set(current.table_names) != set(plan.table_names):
        return f"the current plan {current.plan_id} places other tables and cannot serve this version"
    if current.topology != plan.topology:
        t = current.topology
        return (
            f"the current plan {current.plan_id} is for {t.num_devices} x {t.device_type} (batch {t.batch_size}) "
            f"and cannot serve this topology"
        )
    return ""


def current_plan(inventory_name: str, current: Plan | None, plan: Plan, current_schema: str | None) -> CurrentPlan:
    """What `current` (the store's current plan; None: none is) can serve of the job `plan` is for."""
    if current is None:
        return CurrentPlan(inventory_name=inventory_name)
    return CurrentPlan(
        inventory_name=inventory_name,
        plan_id=current.plan_id,
        cannot_serve=cannot_serve(current, plan, current_schema),
        same_placement=current.units() == plan.units(),
    )


class PublishVerdict(BaseModel):
    """The policy's answer: what it made of the gate's decision, the decision the store records for the judged
    plan, and with `fallback` the baseline's plan and decision that become current instead."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    outcome: PolicyOutcome
    decision: GateDecision
    fallback: Plan | None = None
    fallback_decision: GateDecision | None = None


def _said(decision: GateDecision, consequence: str) -> str:
    """The decision's finding followed by what the policy makes of it."""
    return f"{decision.finding}, {consequence}" if decision.finding else consequence


def publish_verdict(
    decision: GateDecision,
    current: CurrentPlan,
    comparison: Comparison | None = None,
    inventory: Inventory | None = None,
) -> PublishVerdict:
    """The gate's `decision` on a plan, given the store's `current` plan. A rejection hands over to the fallback
    only with the verified `comparison` it was decided on and the plan's `inventory` (`fallback.fallback_plan`)."""
    why = current.nothing_to_keep
    undecided = decision.outcome in UNDECIDED
    if undecided and why:
        becomes = decision.revised(
            approved=True,
            outcome="approved",
            label=first_plan_label(decision.outcome),
            reason=_said(decision, f"{why}: it becomes current"),
        )
        return PublishVerdict(outcome="first-plan", decision=becomes)
    if undecided and current.same_placement:
        stays = (
            f"the current plan {current.plan_id} stays (this plan places every table as it does: the job keeps its "
            f"state, and no number of rounds could tell the two apart)"
        )
        return PublishVerdict(outcome="same-as-current", decision=decision.revised(reason=_said(decision, stays)))
    found = None
    if decision.outcome == "rejected" and why and comparison is not None and inventory is not None:
        found = fallback_plan(decision, comparison, why, inventory)
    if found is None:
        return PublishVerdict(outcome=decision.outcome, decision=decision)
    fallback, fallback_decision = found
    instead = (
        f"{decision.reason}; the best measured baseline {fallback_decision.best_baseline} becomes current instead "
        f"(plan {fallback.plan_id}: {why})"
    )
    return PublishVerdict(
        outcome="fallback",
        decision=decision.revised(reason=instead),
        fallback=fallback,
        fallback_decision=fallback_decision,
    )
