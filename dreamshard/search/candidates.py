"""Search on the learned cost at plan time (docs/architecture/learning.md, "Learning").

Candidates come from every source we have (dreamshard.search.proposers, one `Proposer` each) -- the RL policy
(greedy argmax and sampled rollouts), LPT on the cost net's predicted single-table costs, every heuristic and
TorchRec's planner -- and from the caller's `seeds` (a
re-plan's current plan adapted to the new inventory, `insertion.adapted_placement`). All are scored by the
pessimistic planning cost (dreamshard.learning.planning_cost); the best few and every seed are improved by local
search (dreamshard.search.local). The result is never predicted worse than any candidate. No hardware is used;
dreamshard.measured.verify measures the best candidates when asked to.

Every source places the free units around the `fixed` ones (row blocks and replicas of the tables cut so,
dreamshard.placement.layout) and within each unit's `devices` constraint; TorchRec's planner, which cannot place
around fixed units nor pin a table, proposes nothing then.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import torch

from dreamshard.config.learning import SearchConfig
from dreamshard.errors import InfeasiblePlacementError, PlanError, UnknownSharderError
from dreamshard.learning.estimator import device_states
from dreamshard.learning.planning_cost import PlanningCost
from dreamshard.learning.policy import Policy
from dreamshard.learning.threads import single_threaded
from dreamshard.search.local import refine_placement, unit_limits
from dreamshard.search.proposers import PROPOSERS, NoProposal, Proposal
from dreamshard.values import Inventory, Topology
from dreamshard.values.search_result import SEARCHED, Candidate, SearchResult, origin


class _Scorer:
    """Scores placements of one inventory's units under one PlanningCost (units encoded once); knows each unit's
    memory (device and host), whether it may move (not `fixed`) and where it may go."""

    def __init__(self, inventory: Inventory, cost: PlanningCost, fixed: Mapping[str, int] | None = None) -> None:
        self.tables = list(inventory.tables)
        self.cost = cost
        with torch.no_grad():
            self.states = cost.encode(self.tables)
        limits = unit_limits(inventory, cost.topology, fixed or {})
        self.sizes, self.host_sizes = limits.sizes, limits.host_sizes
        self.movable, self.allowed = limits.movable, limits.allowed

    def actions(self, placement: dict[str, int]) -> list[int]:
        return [int(placement[t.name]) for t in self.tables]

    def score(self, actions: Sequence[int]) -> float:
        with torch.no_grad():
            return float(self.cost.overall(device_states(self.states, list(actions), self.cost.topology.num_devices)))

    def placement(self, actions: Sequence[int]) -> dict[str, int]:
        return {t.name: int(a) for t, a in zip(self.tables, actions, strict=True)}

    def candidate(self, source: str, placement: dict[str, int]) -> Candidate:
        return Candidate(source, placement, self.score(self.actions(placement)))


@single_threaded
def search(
    inventory: Inventory,
    topology: Topology,
    cost: PlanningCost,
    policy: Policy | None,
    config: SearchConfig,
    seeds: Mapping[str, Mapping[str, int]] | None = None,
    fixed: Mapping[str, int] | None = None,
) -> SearchResult:
    """The best placement found under `cost` (see the module docstring), among the sources' candidates and
    `seeds` ({source: placement of every unit}, legal placements the caller vouches for); `fixed`: the units whose
    device is decided. Raises InfeasiblePlacementError only when no source could place the inventory."""
    t0 = time.perf_counter()
    seeds = seeds or {}
    fixed = fixed or {}
    scorer = _Scorer(inventory, cost, fixed)
    asked = Proposal(inventory, topology, cost, policy, config, fixed)
    found: list[Candidate] = []
    failed: dict[str, str] = {}
    last_error: InfeasiblePlacementError | None = None
    for source in config.candidates:
        try:
            found.append(scorer.candidate(source, PROPOSERS[source](asked)))
        except NoProposal as e:
            failed[source] = str(e)
        except InfeasiblePlacementError as e:
            failed[source] = str(e)
            if last_error is None or source != "torchrec":  # TorchRec's wording names its own planner
                last_error = e
        except PlanError as e:  # a planner-specific refusal (e.g. TorchRec's planner found no plan)
            failed[source] = str(e)
        except UnknownSharderError as e:  # an optional planner not installed here (TorchRec's): not a candidate
            failed[source] = str(e)
    found += [scorer.candidate(source, dict(placement)) for source, placement in seeds.items()]
    if not found:
        if last_error is not None:
            raise last_error
        raise InfeasiblePlacementError(
            inventory.tables[0].name,
            inventory.tables[0].size_gb,
            topology.memory_per_device_gb,
            "no candidate source placed the inventory",
        )
    found.sort(key=lambda c: c.predicted_ms)
    refined = _refined(found, seeds, scorer, cost, topology, config)
    everything = _distinct(found + refined, seeds, scorer)
    return SearchResult(best=everything[0], candidates=everything, failed=failed, wall_s=time.perf_counter() - t0)


def best_placement(
    inventory: Inventory, topology: Topology, cost: PlanningCost, policy: Policy | None, config: SearchConfig
) -> dict[str, int]:
    """The search's best placement (the training loop's `Searcher`: where the search planner goes on a task)."""
    return dict(search(inventory, topology, cost, policy, config).best.placement)


def _refined(
    found: list[Candidate],
    seeds: Mapping[str, Mapping[str, int]],
    scorer: _Scorer,
    cost: PlanningCost,
    topology: Topology,
    config: SearchConfig,
) -> list[Candidate]:
    """Local search from the `refine_top` best candidates and from every seed: the placements it improved."""
    refined: list[Candidate] = []
    if config.refine_rounds <= 0:
        return refined
    seen: set[tuple[int, ...]] = set()
    seeded = [c for c in found[config.refine_top :] if c.source in seeds]  # always searched from
    for cand in [*found[: config.refine_top], *seeded]:
        start = scorer.actions(cand.placement)
        if tuple(start) in seen:
            continue
        seen.add(tuple(start))
        new = refine_placement(
            cost,
            scorer.states,
            scorer.sizes,
            start,
            topology,
            max_rounds=config.refine_rounds,
            min_gain=0.0,
            movable=scorer.movable,
            allowed=scorer.allowed,
            host_sizes=scorer.host_sizes,
        )
        if new != start:
            refined.append(Candidate(f"{cand.source}{SEARCHED}", scorer.placement(new), scorer.score(new)))
    return refined


def _distinct(candidates: list[Candidate], seeds: Mapping[str, Mapping[str, int]], scorer: _Scorer) -> list[Candidate]:
    """One entry per distinct placement, best predicted first. A seed's name wins a tie (the same placement as
    another source's is still the current plan: verify keeps it by default and it moves nothing)."""
    out: list[Candidate] = []
    seen: set[tuple[int, ...]] = set()
    for c in sorted(candidates, key=lambda c: (c.predicted_ms, origin(c.source) not in seeds)):
        key = tuple(scorer.actions(c.placement))
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out
