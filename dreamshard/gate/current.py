"""The current plan as a contender (docs/architecture/gate.md, "The publish gate"): a new plan replaces a current plan
that can serve its job only when it beats that plan too, by the margin and beyond the noise, on the same
measurements. The current plan is measured beside the baselines under the label `current` (`compare --current`,
the evaluate stage, or the gate's own measurement) and found in a comparison by its placement, never by its label.
"""

from __future__ import annotations

from dreamshard.errors import DreamshardError, PlanError
from dreamshard.evaluation import Comparison, SharderResult
from dreamshard.gate.publish_policy import cannot_serve
from dreamshard.placement.diff import plan_diff
from dreamshard.placement.make_plan import make_plan
from dreamshard.values import Inventory, Plan, Topology

#: The contender label of the store's current plan in a comparison and in the gate's decision.
CURRENT = "current"


def current_contender(current: Plan, inventory: Inventory) -> Plan:
    """The current plan's placement as a plan of `inventory` (a version with the same table schema: statistics may
    have changed), labelled `current`, keeping the current plan's id. PlanError when the placement no longer fits
    this version (memory, constraints): then the current plan cannot serve it."""
    try:
        plan = make_plan(
            inventory,
            current.topology,
            current.placement,
            CURRENT,
            column_shards=current.column_shards,
            row_shards=current.row_shards,
            data_parallel=current.data_parallel,
            kernels=current.kernels,
            cache_load_factors=current.cache_load_factors,
        )
    except (DreamshardError, ValueError) as e:
        raise PlanError(f"the current plan {current.plan_id} does not fit this inventory version: {e}") from None
    return plan.model_copy(update={"plan_id": current.plan_id})


def serving_contender(
    current: Plan, inventory: Inventory, topology: Topology, schema: str | None = None
) -> Plan | None:
    """`current` as the contender of `inventory` on `topology` (`current_contender`) when it can serve that job: the
    same table schema (`schema`: the store's record of the current plan's, else the plan's own), the same topology,
    and a placement that still fits. None when it cannot: nothing current is kept, so there is nothing to beat."""
    if current.topology != topology:
        return None
    try:
        rival = current_contender(current, inventory)
    except PlanError:
        return None
    return None if cannot_serve(current, rival, schema) else rival


def current_samples(comparison: Comparison, own: SharderResult, current: Plan, source: str) -> list[float]:
    """The per-round samples of the comparison's contender that places every unit as `current` does (any label:
    a baseline that places the same is the same plan). PlanError when the comparison did not measure it."""
    units = current.units()
    for r in comparison.results:
        if r is not own and r.plan.units() == units:
            return list(r.samples_ms)
    raise PlanError(
        f"{source} does not measure the current plan {current.plan_id} of '{current.inventory_name}', which can "
        f"serve this job: a plan replaces it only when it beats it on the same measurements; compare with "
        f"the incumbent's file (`dreamshard plans incumbent --inventory {current.inventory_name} -o FILE`), or "
        f"publish with the gate's own measurement"
    )


def less_the_move(
    samples: list[float], current: Plan, plan: Plan, inventory: Inventory, horizon: int
) -> tuple[list[float], str]:
    """The current plan's per-round figures less what moving to `plan` costs each step (its moved weights and
    optimizer state sent once, `placement.diff.plan_diff`, spread over `horizon` steps; publish.move_horizon_steps),
    and the clause saying so ("" when nothing moves or `horizon` is 0). A figure never drops below a millionth of
    itself: a move no horizon pays off leaves the current plan unbeatable."""
    if horizon <= 0:
        return samples, ""
    diff = plan_diff(current, plan, inventory)
    if not diff.moved:
        return samples, ""
    per_step = diff.move_ms / horizon
    said = (
        f"the current plan's figures less the move ({len(diff.moved)} tables, {diff.move_ms:.0f} ms at "
        f"{diff.ms_per_mb:.3f} ms/MB over publish.move_horizon_steps {horizon}: {per_step:.4g} ms a step)"
    )
    return [max(x - per_step, x * 1e-6) for x in samples], said
