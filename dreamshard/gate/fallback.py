"""The fallback decision (docs/architecture/pipeline.md, "The production loop"): a plan the gate rejected, for a version
the current plan cannot serve (a table added, removed or reshaped; another topology), would leave the training job
with no servable plan. The best baseline, measured in the same interleaved rounds as the rejected plan and
verified by the gate (its placement recomputed from its sharder), becomes current instead, under its own plan id
and with outcome `fallback`.

Nothing here is taken from a file: the baseline's entry comes from the comparison `gate_plan` has just verified,
and only its placement and measured figures are kept (`gate.trust` clears or recomputes the rest); the plan id is new.
"""

from __future__ import annotations

from dreamshard.evaluation import Comparison
from dreamshard.gate.trust import bound_to_inventory, trusted_plan
from dreamshard.values import Inventory, Plan, new_id, utcnow
from dreamshard.values.decision import GateDecision


def fallback_plan(
    rejected: GateDecision, comparison: Comparison, why: str, inventory: Inventory
) -> tuple[Plan, GateDecision] | None:
    """The best baseline's plan from the verified `comparison` the gate decided `rejected` on, with its decision
    (outcome `fallback`, becomes current); None when the decision is not a rejection or names no baseline.
    `why` says why nothing current can serve the version (`policy.CurrentPlan.nothing_to_keep`); the plan's
    inventory-owned fields come from `inventory` (gate.trust), never from the comparison file."""
    name = rejected.best_baseline
    if rejected.outcome != "rejected" or not name:
        return None
    entries = [r for r in comparison.results if r.sharder == name and r.plan.plan_id != rejected.plan_id]
    if len(entries) != 1 or entries[0].plan.measured is None:
        return None  # gate_plan verified exactly one entry per baseline; anything else is not ours to publish
    entry = entries[0]
    plan = bound_to_inventory(trusted_plan(entry.plan), inventory).model_copy(
        update={
            "plan_id": new_id("plan-"),
            "created_at": utcnow(),
            "measured": entry.plan.measured,
            "measured_by": comparison.backend,
        }
    )
    reason = (
        f"fallback: plan {rejected.plan_id} was rejected and {why}: the best measured baseline {name} "
        f"({entry.overall_ms:.4g} ms, measured with it over {comparison.rounds} interleaved round(s)) becomes "
        f"current for this version"
    )
    decision = GateDecision(
        approved=True,
        outcome="fallback",
        reason=reason,
        plan_id=plan.plan_id,
        plan_cost_ms=entry.overall_ms,
        best_baseline=name,
        best_baseline_ms=rejected.best_baseline_ms,
        improvement=0.0,
        min_improvement=rejected.min_improvement,
        basis=rejected.basis,
        inventory_fingerprint=rejected.inventory_fingerprint,
        evidence=rejected.evidence,
        baselines=rejected.baselines,
        infeasible=rejected.infeasible,
        rounds=rejected.rounds,
        confidence=rejected.confidence,
    )
    return plan, decision
