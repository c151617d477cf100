"""DreamShardSharder: the learned policy behind the common Sharder interface."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dreamshard.learning.model_store import LoadedModel, load_model, resolve_model_dir
from dreamshard.learning.policy import Episode, plan_with_policy
from dreamshard.sharders.base import Sharder, make_plan
from dreamshard.types import Inventory, Plan, Topology


#: rounds of local search applied to a plan (each round scores all moves / swaps off the bottleneck).
#: OFF by default: on the cpu backend it helped in one of three trainings (geomean 1.24 -> 1.12 x best
#: baseline) and hurt in two (1.09 -> 1.15, 1.10 -> 1.25), because it trusts the cost net exactly where
#: the net is worst (devices holding many tables, which it under-predicts); see bench/results/learning.md.
DEFAULT_REFINE_ROUNDS = 0


class DreamShardSharder(Sharder):
    """Places tables with a trained DreamShard model (greedy argmax, or best of `samples` sampled plans
    plus the greedy one under the cost net), then refined by at most `refine_rounds` rounds of bounded
    local search on the predicted bottleneck device (0 = off). The model is loaded on first use."""

    name = "dreamshard"

    def __init__(self, model_dir: Path | None = None, samples: int = 0, seed: int = 0,
        refine_rounds: int = DEFAULT_REFINE_ROUNDS, **_ignored: Any,
    ) -> None:
        self.model_dir = Path(model_dir) if model_dir is not None else None
        self.samples = int(samples)
        self.seed = int(seed)
        self.refine_rounds = int(refine_rounds)
        self._model: LoadedModel | None = None

    @property
    def model(self) -> LoadedModel:
        if self._model is None:
            self._model = load_model(resolve_model_dir(self.model_dir), require_policy=True)
        return self._model

    def _episode(self, inventory: Inventory, topology: Topology) -> Episode:
        m = self.model
        assert m.policy is not None
        return plan_with_policy(m.policy, m.cost_net, inventory.tables, topology, samples=self.samples, seed=self.seed,
            refine_rounds=self.refine_rounds,
        )

    def place(self, inventory: Inventory, topology: Topology) -> dict[str, int]:
        return self._episode(inventory, topology).placement

    def shard(self, inventory: Inventory, topology: Topology) -> Plan:
        ep = self._episode(inventory, topology)
        return make_plan(
            inventory, topology, ep.placement, self.name, predicted=ep.costs, model_version=self.model.card.version
        )


class LearnedGreedySharder(DreamShardSharder):
    """`dreamshard_lpt`: the learned cost network's single-table predictions as the per-table cost of the
    memory-aware longest-first greedy (no hardware at planning time). It does not use the RL policy: it trusts
    the cost net only where it is most accurate (one table alone on a device) and lets LPT balance the sum.
    The plan records the cost net's predicted per-device costs of the resulting placement."""

    name = "dreamshard_lpt"

    def place(self, inventory: Inventory, topology: Topology) -> dict[str, int]:
        from dreamshard.learning.mdp import single_table_costs
        from dreamshard.sharders.heuristics import GreedySharder

        est = self.model.cost_net
        predicted = dict(zip(inventory.table_names, single_table_costs(est, est.encode(list(inventory.tables)))))
        return GreedySharder(self.name, lambda t: float(predicted[t.name])).place(inventory, topology)

    def shard(self, inventory: Inventory, topology: Topology) -> Plan:
        from dreamshard.learning.mdp import EstimatedMDP

        placement = self.place(inventory, topology)
        mdp = EstimatedMDP(inventory.tables, topology, self.model.cost_net)
        for table in mdp.tables:  # replay the placement in the MDP's order to read the predicted costs
            mdp.step(placement[table.name])
        return make_plan(inventory, topology, placement, self.name, predicted=mdp.predicted_costs(),
                         model_version=self.model.card.version)
