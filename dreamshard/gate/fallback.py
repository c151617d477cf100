"""The fallback decision (docs/architecture/gate.md, "The publish policy"): the judged plan does not become current,
and the current plan cannot stay (none is current, a table was added, removed or reshaped, another topology, or it
breaks a constraint). A contender measured in the same interleaved rounds becomes current instead, under its own
plan id and with outcome `fallback`: the incumbent extended to the version (its old tables where they are) first,
else the best measured baseline, each charged its moves from the current plan.

Nothing here is taken from a file: the contender's plan is the one the gate verified (a baseline's placement
recomputed from its sharder, the extension built by the gate), and only its placement and measured figures are
kept (`gate.trust` clears or recomputes the rest); the plan id is new.
"""

from __future__ import annotations

import statistics

from dreamshard.gate.decide import JUDGED, Judgement
from dreamshard.gate.incumbent import Incumbent
from dreamshard.gate.trust import bound_to_inventory, trusted_plan
from dreamshard.sharders.extend import EXTENDED
from dreamshard.values import Plan, new_id, utcnow
from dreamshard.values.decision import GateDecision


def _measured(j: Judgement, contender: Plan) -> tuple[Plan | None, float]:
    """The comparison's entry that places as `contender` does: its plan (with measured costs) and its median."""
    units = contender.units()
    for r in j.comparison.results:
        if r.plan.units() == units and r.plan.plan_id != j.plan.plan_id and r.plan.measured is not None:
            return r.plan, statistics.median(r.samples_ms)
    return None, 0.0


def _what(label: str, j: Judgement, incumbent: Incumbent) -> str:
    if label != EXTENDED:
        return f"the best measured baseline {label}"
    charge = j.charges.get(label)
    added = len(charge.diff.added) if charge is not None else 0
    return (
        f"the current plan {incumbent.plan_id} extended to this version (its tables where they are"
        + (f", {added} new placed around them" if added else "")
        + ")"
    )


def fallback_plan(j: Judgement, label: str, why: str, incumbent: Incumbent) -> tuple[Plan, GateDecision] | None:
    """The plan of contender `label` (a baseline, or the incumbent's extension) as the judgement verified and
    measured it, under a new id, with its decision (outcome `fallback`, becomes current); None when `label` names
    no contender the comparison measured. `why` says why the judged plan does not become current and the current
    plan cannot stay."""
    contender = j.plans.get(label)
    if contender is None or label == JUDGED:
        return None
    measured, median = _measured(j, contender)
    if measured is None:
        return None
    plan = bound_to_inventory(trusted_plan(contender), j.inventory).model_copy(
        update={
            "plan_id": new_id("plan-"),
            "created_at": utcnow(),
            "measured": measured.measured,
            "measured_by": j.comparison.backend,
            "world": j.plan.world,  # the world the comparison charged (with its proxy note)
        }
    )
    d = j.decision
    charge = j.charges.get(label)
    moves = f", moving {charge.moved} of the current plan's tables" if charge is not None else ""
    reason = (
        f"fallback: plan {d.plan_id} does not become current and {why}: {_what(label, j, incumbent)} "
        f"({median:.4g} ms measured with it over {j.comparison.rounds} interleaved round(s){moves}) becomes current "
        f"for this version" + (f"; {d.proxy}" if d.proxy else "")
    )
    decision = GateDecision(
        approved=True,
        outcome="fallback",
        reason=reason,
        plan_id=plan.plan_id,
        plan_cost_ms=median,
        best_baseline=d.best_baseline,
        best_baseline_ms=d.best_baseline_ms,
        improvement=0.0,
        min_improvement=d.min_improvement,
        basis=d.basis,
        inventory_fingerprint=d.inventory_fingerprint,
        evidence=d.evidence,
        baselines=d.baselines,
        infeasible=d.infeasible,
        references=d.references,
        rounds=d.rounds,
        confidence=d.confidence,
        proxy=d.proxy,
        world=d.world,
    )
    return plan, decision
