"""Plans explained: the stats report of a plan and what-if changes to it (dreamshard.explain.report), predicted
by the learned cost of a model (settings.model_dir's lookup) and, with `measure`, measured interleaved."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from dreamshard.config.settings import model_dir
from dreamshard.documents import INVENTORY_SUFFIXES, check_outputs, load_inventory, load_plan, save_inventory, save_plan
from dreamshard.errors import InputFileError
from dreamshard.evaluation.compare import check_plan_for, measure_interleaved, median_costs
from dreamshard.explain.reasons import placement_reasons
from dreamshard.explain.report import plan_stats, planning_cost_for
from dreamshard.explain.whatif import WhatIf, is_file_spec, parse_added, parse_changes, what_if
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
    inventory: Path
    plan: Path
    moves: list[str] = []  # UNIT:DEVICE
    swaps: list[str] = []  # A,B
    add_tables: list[str] = []  # KEY=VALUE specs (whatif.SPEC_KEYS) or inventory files of tables to add
    remove_tables: list[str] = []
    model: Path | None = None
    measure: bool = False  # also measure the plan and the changed plan, interleaved (evaluate.rounds)
    explain: bool = False  # why each unit of the changed plan is on its device
    out: Path | None = None  # write the changed plan
    inventory_out: Path | None = None  # write the changed inventory (required with `out` when tables change)


class WhatIfResult(Result):
    whatif: WhatIf
    measured_before: Costs | None = None
    measured_after: Costs | None = None
    reasons: list[list[UnitReason]] | None = None  # `explain`: per device of the changed plan


def run_whatif(request: WhatIfRequest, progress: Callable[[str], None] | None = None) -> WhatIfResult:
    s = request.settings
    files = [p for p in request.add_tables if is_file_spec(p)]
    check_outputs(
        {
            "--inventory": request.inventory,
            "--plan": request.plan,
            "--model": request.model,
            **{f"--add-table {p}": p for p in files},
        },
        {"--out": request.out, "--inventory-out": request.inventory_out},
    )
    tables_change = bool(request.add_tables or request.remove_tables)
    if request.out is not None and tables_change and request.inventory_out is None:
        raise InputFileError(
            "--out with --add-table/--remove-table needs --inventory-out too: the changed plan is a "
            "plan of the changed inventory; nothing was written"
        )
    if request.inventory_out is not None and request.inventory_out.suffix.lower() not in INVENTORY_SUFFIXES:
        raise InputFileError(f"--inventory-out {request.inventory_out}: name it .yaml, .yml or .json")
    inv = load_inventory(request.inventory)
    plan = load_plan(request.plan)
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
    if request.inventory_out is not None:
        save_inventory(result.inventory, request.inventory_out)
    if request.out is not None:
        save_plan(changed, request.out)
    return WhatIfResult(whatif=result, measured_before=before, measured_after=after, reasons=reasons)
