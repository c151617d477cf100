"""Plans explained: the stats report of a plan and what-if changes to it (dreamshard.explain.report), predicted
by the learned cost of a model (settings.model_dir's lookup) and, with `measure`, measured interleaved."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from dreamshard.config.settings import model_dir
from dreamshard.evaluation.compare import check_plan_for, measure_interleaved, median_costs
from dreamshard.explain.reasons import placement_reasons
from dreamshard.explain.report import plan_stats, planning_cost_for
from dreamshard.explain.whatif import WhatIf, parse_added, parse_changes, what_if
from dreamshard.usecases.base import Request, Result
from dreamshard.values import Costs, Inventory, Plan
from dreamshard.values.reports import PlanStats, UnitReason


def reasons_of(inventory: Inventory, plan: Plan, model: Path | None) -> list[list[UnitReason]]:
    """Per device, why each unit is there (`plan --explain`), under the same learned cost as the stats."""
    return placement_reasons(inventory, plan, planning_cost_for(model_dir(model), plan.topology))


def stats_of(inventory: Inventory, plan: Plan, model: Path | None) -> PlanStats:
    """The stats report of `plan` under the model found from `model` (the door `plan --stats`, `evaluate --stats`
    and `plans show --stats` share)."""
    return plan_stats(inventory, plan, planning_cost_for(model_dir(model), plan.topology))


class WhatIfRequest(Request):
    inventory: Inventory
    plan: Plan
    moves: list[str] = []  # UNIT:DEVICE
    swaps: list[str] = []  # A,B
    add_tables: list[str] = []  # KEY=VALUE specs (whatif.SPEC_KEYS) or inventory files of tables to add
    remove_tables: list[str] = []
    model: Path | None = None
    measure: bool = False  # also measure the plan and the changed plan, interleaved (evaluate.rounds)
    explain: bool = False  # why each unit of the changed plan is on its device


class WhatIfResult(Result):
    whatif: WhatIf
    changed: Plan  # the changed plan (with its measured costs, when measured)
    measured_before: Costs | None = None
    measured_after: Costs | None = None
    reasons: list[list[UnitReason]] | None = None  # `explain`: per device of the changed plan


def run_whatif(request: WhatIfRequest, progress: Callable[[str], None] | None = None) -> WhatIfResult:
    """What the changes would do to the plan (predicted, and measured when asked); writing the changed plan and
    inventory is the door's (`whatif_files`)."""
    s = request.settings
    inv, plan = request.inventory, request.plan
    check_plan_for(inv, plan)
    moves, swaps = parse_changes(request.moves, request.swaps)
    added = parse_added(inv, request.add_tables)
    cost = planning_cost_for(model_dir(request.model), plan.topology)
    result = what_if(inv, plan, cost, moves, swaps, added=added, removed=request.remove_tables)
    before = after = None
    changed = result.plan
    if request.measure:
        oracle = s.oracle()
        try:
            both = measure_interleaved(
                inv,
                [plan, changed],
                oracle,
                s.evaluate.rounds,
                seed=s.profile.seed,
                progress=progress,
                inventories=[inv, result.inventory],
            )
            before, after = median_costs(both[0]), median_costs(both[1])
            changed = changed.model_copy(update={"measured": after, "measured_by": oracle.info})
        finally:
            oracle.close()
    reasons = placement_reasons(result.inventory, changed, cost) if request.explain else None
    return WhatIfResult(whatif=result, changed=changed, measured_before=before, measured_after=after, reasons=reasons)
