"""Moves as a cost in a re-plan (docs/architecture/pipeline.md, "The production loop": moves as a cost).

A re-plan starts from the plan the job runs now (the incumbent): its placement, adapted to the new inventory (an
added table placed where it fits, `current_seed`), is one of the search's candidates (`current`). Every table a
candidate places otherwise than the incumbent is resharded by the training job: its weights and optimizer state
are sent once. `MovePolicy.ranked` orders the candidates by their predicted step time plus that move spread over
`horizon_steps` training steps, and drops those that move more than `max_fraction` of the incumbent's tables (the
adapted incumbent moves none and always stays): an added table moves nothing else unless that pays off within the
horizon.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from dreamshard.placement.device_memory import optimizer_bytes
from dreamshard.search.insertion import adapted_placement
from dreamshard.values import Inventory, Plan, Topology, parse_unit
from dreamshard.values.search_result import Candidate, SearchResult

if TYPE_CHECKING:  # pragma: no cover
    from dreamshard.learning.planning_cost import PlanningCost

#: The default horizon (training steps) a move is spread over, as the gate's (publish.move_horizon_steps).
DEFAULT_HORIZON_STEPS = 10_000


def current_seed(
    incumbent: Plan | None, inventory: Inventory, topology: Topology, cost: PlanningCost, fixed: Mapping[str, int]
) -> tuple[dict[str, int] | None, str]:
    """The incumbent's placement adapted to `inventory`'s units (the `current` candidate's seed), or None and why
    it cannot be ("" without an incumbent)."""
    if incumbent is None:
        return None, ""
    if incumbent.topology.num_devices != topology.num_devices:
        n = incumbent.topology.num_devices
        return None, f"plan {incumbent.plan_id} has {n} devices, this topology {topology.num_devices}"
    adapted = adapted_placement(incumbent.units(), inventory, topology, cost, fixed)
    if adapted is None:
        return None, f"plan {incumbent.plan_id} shares no unit with this inventory, or a unit finds no room"
    return adapted, ""


def layouts(units: Mapping[str, int]) -> dict[str, tuple[tuple[str, int], ...]]:
    """Per table: its units and their devices, sorted (a table's sharding type shows in its unit names)."""
    out: dict[str, list[tuple[str, int]]] = {}
    for unit, device in units.items():
        out.setdefault(parse_unit(unit).table, []).append((unit, int(device)))
    return {t: tuple(sorted(u)) for t, u in out.items()}


@dataclass(frozen=True)
class MovePolicy:
    """How a re-plan weighs moving the job's tables: their bytes at `ms_per_mb`, spread over `horizon_steps` steps
    (0: moves are free), and the largest share of the incumbent's tables a plan may move (1.0: any)."""

    horizon_steps: int = DEFAULT_HORIZON_STEPS
    max_fraction: float = 1.0
    ms_per_mb: float = 1.0

    def moved(self, incumbent: Mapping[str, int], placement: Mapping[str, int]) -> list[str]:
        """Tables in both placements that `placement` lays out otherwise than `incumbent`."""
        before, after = layouts(incumbent), layouts(placement)
        return [t for t in after if t in before and before[t] != after[t]]

    def move_ms(self, tables: list[str], inventory: Inventory, optimizer: str) -> float:
        """ms to send the weights and optimizer state of `tables` once (`inventory`: the tables, or their units)."""
        moved = set(tables)
        units = [u for u in inventory.tables if parse_unit(u.name).table in moved]
        return sum(u.size_bytes + optimizer_bytes(u, optimizer) for u in units) / 1e6 * self.ms_per_mb

    def step_penalty_ms(self, tables: list[str], inventory: Inventory, optimizer: str) -> float:
        """The move spread over the horizon: ms per training step (0 with a horizon of 0: moves are free)."""
        if self.horizon_steps <= 0 or not tables:
            return 0.0
        return self.move_ms(tables, inventory, optimizer) / self.horizon_steps

    def penalties(self, candidates: Sequence[Candidate], incumbent: Plan, inventory: Inventory) -> list[float]:
        """Each candidate's move from `incumbent` as ms per step (`step_penalty_ms`): what a re-ranking adds to
        its predictions (`dreamshard.search.unknown_stats.robust_rerank`)."""
        old, optimizer = incumbent.units(), incumbent.topology.optimizer
        return [self.step_penalty_ms(self.moved(old, c.placement), inventory, optimizer) for c in candidates]

    def ranked(self, result: SearchResult, incumbent: Plan, inventory: Inventory) -> SearchResult:
        """`result` with its candidates ordered by predicted step time plus the step penalty of their moves from
        `incumbent` (ties: the search's order), those moving more than `max_fraction` of the incumbent's tables
        (in both inventories) dropped, and why each dropped one went in `failed`. The candidates keep their
        predictions; only their order changes."""
        old = incumbent.units()
        shared = len([t for t in layouts(old) if t in {x.name for x in inventory.tables}])
        optimizer = incumbent.topology.optimizer
        scored: list[tuple[float, int, Candidate]] = []
        failed = dict(result.failed)
        for i, c in enumerate(result.candidates):
            moved = self.moved(old, c.placement)
            if shared and len(moved) / shared > self.max_fraction + 1e-12:
                cap = f"plan.max_move_fraction {self.max_fraction:g}"
                failed[c.source] = f"moves {len(moved)} of {shared} tables > {cap}"
                continue
            scored.append((c.predicted_ms + self.step_penalty_ms(moved, inventory, optimizer), i, c))
        if not scored:  # every candidate moves too much: the one that moves the fewest
            fewest = min(result.candidates, key=lambda c: len(self.moved(old, c.placement)))
            scored = [(fewest.predicted_ms, 0, fewest)]
        ordered = [c for _, _, c in sorted(scored, key=lambda x: (x[0], x[1]))]
        return replace(result, best=ordered[0], candidates=ordered, failed=failed)
