"""Plans explained: the stats report of a plan and what-if changes to it (dreamshard.learning.explain), predicted
by the learned cost of a model (settings.model_dir's lookup) and, with `measure`, measured interleaved."""

from __future__ import annotations

from pathlib import Path

from dreamshard.evaluation.compare import check_plan_for, measure_interleaved, median_costs
from dreamshard.io import check_outputs, load_inventory, load_plan, save_plan
from dreamshard.learning.explain import PlanStats, WhatIf, parse_changes, plan_stats, planning_cost_for, what_if
from dreamshard.learning.reasons import UnitReason, placement_reasons
from dreamshard.settings import model_dir
from dreamshard.types import Costs, Inventory, Plan
from dreamshard.usecases.base import Request, Result


def reasons_of(inventory: Inventory, plan: Plan, model: Path | None) -> list[list[UnitReason]]:
    """Per device, why each unit is there (`plan --explain`), under the same learned cost as the stats."""
    return placement_reasons(inventory, plan, planning_cost_for(model_dir(model), plan.topology))


def stats_of(inventory: Inventory, plan: Plan, model: Path | None) -> PlanStats:
    """The stats report of `plan` under the model found from `model` (the door `plan --stats`, `evaluate --stats`
    and `plans show --stats` share)."""
    return plan_stats(inventory, plan, planning_cost_for(model_dir(model), plan.topology))


class WhatIfRequest(Request):
    inventory: Path
    plan: Path
    moves: list[str] = []  # UNIT:DEVICE
    swaps: list[str] = []  # A,B
    model: Path | None = None
    measure: bool = False  # also measure the plan and the changed plan, interleaved (evaluate.rounds)
    out: Path | None = None  # write the changed plan


class WhatIfResult(Result):
    whatif: WhatIf
    measured_before: Costs | None = None
    measured_after: Costs | None = None


def run_whatif(request: WhatIfRequest) -> WhatIfResult:
    s = request.settings
    check_outputs({"--inventory": request.inventory, "--plan": request.plan, "--model": request.model},
                  {"--out": request.out})
    inv = load_inventory(request.inventory)
    plan = load_plan(request.plan)
    check_plan_for(inv, plan)
    moves, swaps = parse_changes(request.moves, request.swaps)
    result = what_if(inv, plan, planning_cost_for(model_dir(request.model), plan.topology), moves, swaps)
    before = after = None
    changed = result.plan
    if request.measure:
        oracle = s.oracle()
        try:
            both = measure_interleaved(inv, [plan, changed], oracle, s.evaluate.rounds, seed=s.profile.seed)
            before, after = median_costs(both[0]), median_costs(both[1])
            changed = changed.model_copy(update={"measured": after, "measured_by": oracle.info})
        finally:
            oracle.close()
    if request.out is not None:
        save_plan(changed, request.out)
    return WhatIfResult(whatif=result, measured_before=before, measured_after=after)
