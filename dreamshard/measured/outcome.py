"""What the search hands the measured steps after it (dreamshard.measured.steps): the search's candidates, how to make
their plans, and what the search cost, the figure the plan stage's budget is a multiple of."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from dreamshard.learning.planning_cost import PlanningCost
from dreamshard.values import AccessAssumptions, Inventory, Plan, Topology
from dreamshard.values.search_result import Candidate, SearchResult


@dataclass(frozen=True)
class SearchOutcome:
    """What the search found, for the steps after it: the inventory, its topology, the scored candidates, the
    planning cost, the plan of the best candidate (`plan`), how to make the plan of any other (`plan_of`), what it
    assumed about missing access statistics, the seconds the search took (the search-only plan's time:
    plan.stage_budget is a multiple of it) and the most tables TorchRec's planner is asked to plan
    (search.torchrec_max_tables; None: any)."""

    inventory: Inventory
    topology: Topology
    searched: SearchResult
    cost: PlanningCost
    plan: Plan
    plan_of: Callable[[Candidate], Plan]
    assumptions: AccessAssumptions | None = None
    search_s: float = 0.0
    torchrec_max_tables: int | None = None
