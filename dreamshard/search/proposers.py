"""The search's candidate sources as parts (docs/architecture/learning.md, "Measured steps"): each a `Proposer`
that places the free units of an inventory around the fixed ones, under the planning cost, or says why it proposes
nothing (`NoProposal`). `PROPOSERS` has one for every `CandidateSource` (a test keeps them in step); the search
(dreamshard.search.candidates) asks those its config lists, in order."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from dreamshard.config.learning import SearchConfig
from dreamshard.learning.mdp import single_table_costs
from dreamshard.learning.planning_cost import PlanningCost
from dreamshard.learning.policy import Policy
from dreamshard.search.constrained_policy import constrained_plan
from dreamshard.sharders import HEURISTICS, get_sharder, options_for
from dreamshard.sharders.base import TableWiseSharder
from dreamshard.sharders.heuristics import GreedySharder
from dreamshard.values import Inventory, Topology
from dreamshard.values.search_result import CANDIDATE_SOURCES, LPT, CandidateSource


class NoProposal(Exception):
    """A candidate source that proposes no placement for this inventory, and why (a skipped or absent planner)."""


@dataclass(frozen=True)
class Proposal:
    """What a proposer places: the units of `inventory` on `topology` under `cost`, around the `fixed` ones."""

    inventory: Inventory
    topology: Topology
    cost: PlanningCost
    policy: Policy | None
    config: SearchConfig
    fixed: Mapping[str, int] = field(default_factory=dict)


#: A candidate source: the placement it proposes ({unit: device}); NoProposal says why it proposes none.
Proposer = Callable[[Proposal], dict[str, int]]


def lpt_placement(
    inventory: Inventory, topology: Topology, cost: PlanningCost, fixed: Mapping[str, int] | None = None
) -> dict[str, int]:
    """Memory-aware longest-first greedy on the cost net's predicted single-table costs (around `fixed` units)."""
    single = single_table_costs(cost, cost.encode(list(inventory.tables)))
    predicted = {t.name: float(c) for t, c in zip(inventory.tables, single, strict=True)}
    return GreedySharder(LPT, lambda t: predicted[t.name]).place_units(inventory, topology, fixed or {})


def policy_proposal(p: Proposal) -> dict[str, int]:
    """The RL policy: its argmax and sampled rollouts, the best predicted (rollouts capped by the planning budget)."""
    if p.policy is None:
        raise NoProposal("the model has no policy")
    samples = min(p.config.samples, max(0, p.config.max_rollout_tables // max(1, p.inventory.num_tables) - 1))
    return constrained_plan(
        p.policy, p.cost, p.inventory.tables, p.topology, p.fixed, samples=samples, seed=p.config.seed
    )


def lpt_proposal(p: Proposal) -> dict[str, int]:
    """LPT on the learned single-table costs."""
    return lpt_placement(p.inventory, p.topology, p.cost, p.fixed)


def torchrec_proposal(p: Proposal) -> dict[str, int]:
    """TorchRec's planner restricted to table-wise (a search candidate places whole units; the units are already
    split); skipped over the planning-time budget, and where it cannot place around fixed units or constraints."""
    if p.inventory.num_tables > p.config.torchrec_max_tables:
        raise NoProposal(
            f"skipped: {p.inventory.num_tables} tables > search.torchrec_max_tables "
            f"{p.config.torchrec_max_tables} (planning-time budget)"
        )
    if p.fixed or any(t.constraints is not None for t in p.inventory.tables):
        raise NoProposal("skipped: TorchRec's planner places no unit around fixed units nor within constraints")
    return _place("torchrec_tw_cw", p)


def heuristic_proposal(name: str) -> Proposer:
    """A built-in heuristic's placement of the units, around the fixed ones (its seed: the search's)."""

    def propose(p: Proposal) -> dict[str, int]:
        return _place(name, p)

    return propose


def _place(name: str, p: Proposal) -> dict[str, int]:
    """Sharder `name`'s placement of the units (the options shared by every candidate sharder: each takes its own,
    random the seed, TorchRec's `column_wise`)."""
    sharder = get_sharder(name, **options_for(name, {"seed": p.config.seed, "column_wise": "never"}))
    if isinstance(sharder, TableWiseSharder):
        return sharder.place_units(p.inventory, p.topology, p.fixed)
    return sharder.place(p.inventory, p.topology)


#: Every candidate source's proposer.
PROPOSERS: dict[CandidateSource, Proposer] = {
    "policy": policy_proposal,
    "lpt": lpt_proposal,
    "torchrec": torchrec_proposal,
    **{name: heuristic_proposal(name) for name in CANDIDATE_SOURCES if name in HEURISTICS},
}
