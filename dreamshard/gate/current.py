"""The incumbent's figures in a comparison (docs/architecture/gate.md, "The incumbent"): a new plan replaces a current
plan that can serve its job only when it beats it too, by the margin and beyond the noise, on the same measurements.
The incumbent's contender (the current plan as it is, labelled `current`, or its extension, `current+new`) is
measured beside the baselines (`compare --current`, the evaluate stage, or the gate's own measurement) and found in
a comparison by its placement, never by its label."""

from __future__ import annotations

from dreamshard.errors import PlanError
from dreamshard.evaluation import Comparison, SharderResult
from dreamshard.values import Plan


def current_samples(comparison: Comparison, own: SharderResult, contender: Plan, source: str) -> list[float]:
    """The per-round samples of the comparison's contender that places every unit as `contender` does (any label:
    a baseline that places the same is the same plan). PlanError when the comparison did not measure it."""
    units = contender.units()
    for r in comparison.results:
        if r is not own and r.plan.units() == units:
            return list(r.samples_ms)
    what = "the current plan" if contender.sharder == "current" else "the current plan extended to this version"
    raise PlanError(
        f"{source} does not measure {what} ({contender.plan_id} of '{contender.inventory_name}'), which the gate "
        f"weighs this plan against: a plan replaces it only when it beats it on the same measurements; compare "
        f"with the incumbent's file (`dreamshard plans incumbent --inventory {contender.inventory_name} -o CUR`, "
        f"then `dreamshard compare -i INV --plan PLAN --current CUR --out CMP`), or publish with the gate's own "
        f"measurement"
    )
