"""The plans a comparison measures (dreamshard.evaluation.compare): each named sharder's plan of the inventory,
timed, and the plans a caller hands in, each checked against the inventory and the topology, none twice."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dreamshard.errors import InfeasiblePlacementError, PlanError
from dreamshard.evaluation.interleave import check_plan_for
from dreamshard.sharders import get_sharder
from dreamshard.values import Inventory, Plan, Topology

Progress = Callable[[str], None]


def plan_contenders(
    inventory: Inventory,
    topology: Topology,
    names: Sequence[str],
    options: Mapping[str, Mapping[str, Any]],
    say: Progress,
) -> tuple[list[tuple[Plan, float]], dict[str, InfeasiblePlacementError]]:
    """Each sharder's plan with its planning seconds, and the sharders that cannot place the inventory (among them
    those whose plan breaks a constraint they cannot be asked to honour: BrokenConstraintError)."""
    plans: list[tuple[Plan, float]] = []
    infeasible: dict[str, InfeasiblePlacementError] = {}
    for name in names:
        say(f"planning with {name}")
        t0 = time.perf_counter()
        try:
            plan = get_sharder(name, **dict(options.get(name, {}))).shard(inventory, topology)
        except InfeasiblePlacementError as e:
            infeasible[name] = e
            say(f"{name} cannot place this inventory: {e}")
            continue
        plans.append((plan, time.perf_counter() - t0))
    return plans, infeasible


def add_given(inventory: Inventory, topology: Topology, plans: list[tuple[Plan, float]], given: Sequence[Plan]) -> None:
    """The plans a caller hands `compare_sharders` joined to the sharders' (each checked, none twice)."""
    for p in given:
        check_plan_for(inventory, p, topology)
        if any(p.plan_id == q.plan_id for q, _ in plans):
            raise PlanError(
                f"plan {p.plan_id} is given twice; measure each plan once (a comparison listing a plan "
                f"twice is refused by the publish gate)"
            )
        plans.append((p, 0.0))
