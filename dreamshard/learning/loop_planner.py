"""What one iteration of the outer loop measures (docs/architecture/learning.md, "Learning"): sampled rollouts of the
current policy (random placements before there is one), where the search planner goes, and small perturbations of the
best measured placements. Deterministic given the iteration and the state."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from dreamshard.config.learning import LoopConfig, SearchConfig, TopologyConfig
from dreamshard.learning.cost_model import CostEnsemble
from dreamshard.learning.planning_cost import PlanningCost, cost_factory
from dreamshard.learning.policy import Policy, mdp_clone, rollout
from dreamshard.learning.train_policy import make_mdps, task_topology
from dreamshard.placement.validate import footprint
from dreamshard.sharders.heuristics import RandomSharder
from dreamshard.values import Inventory, Measurement, Task, Topology


def _perturb(
    placement: dict[str, int], tables: Sequence[Any], topology: Topology, rng: np.random.Generator, moves: int
) -> dict[str, int] | None:
    """`placement` with `moves` random tables moved to random other devices that have room (None if stuck)."""
    cap = topology.usable_memory_bytes
    out = dict(placement)
    used = [0] * topology.num_devices
    need = {t.name: footprint(t, topology) for t in tables}
    for t in tables:
        used[out[t.name]] += need[t.name]
    for _ in range(moves):
        t = tables[int(rng.integers(len(tables)))]
        legal = [d for d in range(topology.num_devices) if d != out[t.name] and used[d] + need[t.name] <= cap]
        if not legal:
            continue
        d = int(rng.choice(legal))
        used[out[t.name]] -= need[t.name]
        used[d] += need[t.name]
        out[t.name] = d
    return out if out != placement else None


#: Where the search planner goes on one task: the best placement under a planning cost (the caller's search,
#: dreamshard.search.candidates.best_placement; the learning package does not import the search, which imports it).
Searcher = Callable[[Inventory, Topology, PlanningCost, Policy | None, SearchConfig], dict[str, int]]


class IterationPlanner:
    """What one iteration measures: (task, topology, placement) triples, deterministic given the state."""

    def __init__(
        self,
        pool: Inventory,
        tasks: Sequence[Task],
        template: TopologyConfig,
        config: LoopConfig,
        comm_models: Sequence[Any],
        searcher: Searcher,
        batch_sizes: Mapping[str, int] | None = None,
    ) -> None:
        self.pool, self.tasks, self.template, self.config = pool, list(tasks), template, config
        self.searcher = searcher
        self.batch_sizes = dict(batch_sizes or {})
        self.comm_models = comm_models
        self.by_name = pool.by_name()

    def _task(self, rng: np.random.Generator) -> Task:
        task = self.tasks[int(rng.integers(len(self.tasks)))]
        if self.config.measure_devices:
            task = task.model_copy(update={"num_devices": int(rng.choice(list(self.config.measure_devices)))})
        return task

    def plan(
        self, iteration: int, ensemble: CostEnsemble | None, policy: Policy | None, records: Sequence[Measurement]
    ) -> list[tuple[Task, dict[str, int]]]:
        cfg = self.config
        rng = np.random.default_rng([cfg.seed, iteration])
        gen = torch.Generator().manual_seed(int(rng.integers(2**31)))
        out: list[tuple[Task, dict[str, int]]] = []
        cost_for = self.cost_factory(ensemble)
        # (1) the policy's sampled rollouts (random placements before there is a policy)
        chosen = [self._task(rng) for _ in range(cfg.placements_per_iteration)]
        if policy is not None and cost_for is not None:
            mdps = make_mdps(self.pool, chosen, cost_for, self.template, self.batch_sizes)
            out += [
                (t, rollout(policy, mdp_clone(m), "sample", gen).placement) for t, m in zip(chosen, mdps, strict=True)
            ]
        else:
            for t in chosen:
                out.append((t, RandomSharder(seed=int(rng.integers(2**31))).place(self._inv(t), self.topology(t))))
        # (2) where the search planner goes
        if cost_for is not None:
            scfg = SearchConfig(
                seed=cfg.seed + iteration,
                samples=2,
                candidates=("policy", "lpt", "dim_greedy", "lookup_greedy", "size_lookup_greedy"),
                refine_top=1,
                refine_rounds=32,
            )
            for _ in range(cfg.search_per_iteration):
                t = self._task(rng)
                topology = self.topology(t)
                out.append((t, self.searcher(self._inv(t), topology, cost_for(topology), policy, scfg)))
        # (3) small perturbations of the best measured placements so far
        best = self._best_measured(records)
        for _ in range(cfg.perturb_per_iteration if best else 0):
            t, placement = best[int(rng.integers(len(best)))]
            moved = _perturb(placement, self._inv(t).tables, self.topology(t), rng, int(rng.integers(1, 4)))
            if moved is not None:
                out.append((t, moved))
        return out

    def cost_factory(self, ensemble: CostEnsemble | None) -> Any:
        return None if ensemble is None else cost_factory(ensemble, self.comm_models, self.config.policy.risk)

    def _best_measured(self, records: Sequence[Measurement]) -> list[tuple[Task, dict[str, int]]]:
        by_task: dict[tuple[str, int], Measurement] = {}
        names = {t.name: t for t in self.tasks}
        whole = set(self.pool.table_names)
        for m in records:
            if m.kind != "placement" or m.task not in names or any(u not in whole for u in m.placement):
                continue  # a measurement of units (row shards, replicas) is no table-wise seed for the policy
            key = (m.task, m.topology.num_devices)
            if key not in by_task or m.overall_ms < by_task[key].overall_ms:
                by_task[key] = m
        return [
            (names[k[0]].model_copy(update={"num_devices": k[1]}), dict(m.placement))
            for k, m in sorted(by_task.items())
        ]

    def _inv(self, task: Task) -> Inventory:
        return self.pool.subset(list(task.tables), name=task.name)

    def topology(self, task: Task) -> Topology:
        return task_topology(self.template, task, self.batch_sizes)
