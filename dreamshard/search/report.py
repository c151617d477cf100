"""What one learned sharder's `shard_with_report` call returns beside its plan (dreamshard.search.sharders)."""

from __future__ import annotations

from dataclasses import dataclass

from dreamshard.learning.model_store import ModelCard
from dreamshard.learning.planning_cost import PlanningCost
from dreamshard.values import Plan
from dreamshard.values.search_result import SearchResult


@dataclass(frozen=True)
class ShardReport:
    """What one `shard_with_report` call did, beside its plan."""

    plan: Plan
    card: ModelCard  # the model that planned: version, training backend, training ranges
    search: SearchResult | None = None  # `dreamshard`: every scored candidate, best first, and the failed sources
    cost: PlanningCost | None = None  # the planning cost the plan was searched on (calibrated, when asked)

    @property
    def learned_from_simulation(self) -> bool:
        """The model learned from a simulated backend: its predicted costs say nothing of hardware."""
        return self.card.learned_from_simulation

    @property
    def out_of_range(self) -> tuple[str, ...]:
        """Inputs outside the model's training ranges (also recorded in `plan.out_of_range`)."""
        return tuple(self.plan.out_of_range)

    @property
    def warnings(self) -> tuple[str, ...]:
        """One line per thing the user should know: each out-of-range input, and simulated predictions."""
        lines = [f"outside the model's training ranges: {item}" for item in self.out_of_range]
        if self.learned_from_simulation:
            lines.append(
                f"predicted costs are SIMULATED: model {self.card.version} learned from the {self.card.backend} backend"
            )
        return tuple(lines)
