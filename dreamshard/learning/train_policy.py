"""REINFORCE on the estimated MDP: no hardware in the loop, rewards from the cost estimator
(docs/architecture/learning.md, "Learning").

Each update plays `episodes_per_update` sampled episodes, split over a few training tasks; returns are
standardised within each task's group (batch-standardised; tasks of different size have different cost
scales, so a plain batch-wide standardisation would credit "was a small task" instead of "placed well"),
falling back to the whole batch when a task has a single episode. Loss = -mean(A * log pi(a|s)) under the
masked distribution - entropy_weight * mean entropy; Adam.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict

from dreamshard.config.learning import PolicyTrainConfig, TopologyConfig
from dreamshard.errors import ConfigError
from dreamshard.learning.estimator import CostEstimator
from dreamshard.learning.mdp import EstimatedMDP
from dreamshard.learning.model_store import warm_start
from dreamshard.learning.policy import Episode, Policy, PolicySpec, episode_log_probs, mdp_clone, rollout
from dreamshard.learning.progress import progress_bar
from dreamshard.learning.threads import single_threaded
from dreamshard.values import Inventory, Task, Topology
from dreamshard.values.progress import Progress


class PolicyUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    mean_cost_ms: float  # mean predicted overall cost of the update's episodes
    entropy: float  # mean per-step entropy of the masked action distribution


class PolicyMetrics(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    episodes: int
    updates: tuple[PolicyUpdate, ...]
    greedy_cost_ms: dict[str, float] = {}  # per training task, after training (predicted)

    @property
    def mean_cost_ms(self) -> float | None:
        return self.updates[-1].mean_cost_ms if self.updates else None

    @property
    def entropy(self) -> float | None:
        return self.updates[-1].entropy if self.updates else None


def _standardise(returns: np.ndarray, groups: list[int]) -> np.ndarray:
    adv = np.zeros_like(returns)
    g = np.asarray(groups)
    for k in set(groups):
        sel = g == k
        r = returns[sel]
        if sel.sum() > 1 and r.std() > 1e-12:
            adv[sel] = (r - r.mean()) / r.std()
        elif sel.sum() == 1 and len(returns) > 1 and returns.std() > 1e-12:
            adv[sel] = (r - returns.mean()) / returns.std()
    return adv


#: a cost estimator, or a function giving the estimator for a topology (e.g. a PlanningCost per device count)
EstimatorFor = CostEstimator | Callable[[Topology], CostEstimator]


def estimator_for(estimator: EstimatorFor, topology: Topology) -> CostEstimator:
    return estimator if isinstance(estimator, CostEstimator) else estimator(topology)


def task_topology(template: TopologyConfig, task: Task, batch_sizes: Mapping[str, int] | None = None) -> Topology:
    """The topology of `task`: the template on the task's devices, at the task's batch size when `batch_sizes`
    names one (pre-training draws one per task), else the template's."""
    topo = template.topology(task.num_devices)
    batch = batch_sizes.get(task.name) if batch_sizes else None
    return topo if batch is None else topo.model_copy(update={"batch_size": int(batch)})


def make_mdps(
    pool: Inventory,
    tasks: Sequence[Task],
    estimator: EstimatorFor,
    topology: Topology | TopologyConfig,
    batch_sizes: Mapping[str, int] | None = None,
) -> list[EstimatedMDP]:
    template = topology if isinstance(topology, TopologyConfig) else TopologyConfig.of(topology)
    by_name = pool.by_name()
    out = []
    for task in tasks:
        missing = [n for n in task.tables if n not in by_name]
        if missing:
            raise ConfigError(f"task '{task.name}' names table '{missing[0]}', which is not in pool '{pool.name}'")
        topo = task_topology(template, task, batch_sizes)
        out.append(EstimatedMDP([by_name[n] for n in task.tables], topo, estimator_for(estimator, topo)))
    return out


@single_threaded
def train_policy(
    pool: Inventory,
    tasks: Sequence[Task],
    cost_net: EstimatorFor,
    config: PolicyTrainConfig,
    init: Policy | None = None,
    progress: bool = True,
    topology: Topology | TopologyConfig | None = None,
    lr_factor: float = 1.0,
    batch_sizes: Mapping[str, int] | None = None,
    report: Progress | None = None,
) -> tuple[Policy, PolicyMetrics]:
    """Train (or continue training `init`) on the estimated MDPs of `tasks`; `topology` gives the device
    memory (the task gives the number of devices; `batch_sizes`, by task name, a task's own batch size). `report`
    gets a line per update: the update, the episodes' mean estimated cost and the entropy."""
    if not tasks:
        raise ConfigError("no training tasks: run `dreamshard tasks` to make some")
    torch.manual_seed(config.seed)
    spec = PolicySpec(
        hidden=config.hidden, latent=config.latent, head_hidden=config.head_hidden, prior_weight=config.prior_weight
    )
    policy = warm_start(init, spec, Policy, "policy")
    mdps = make_mdps(pool, tasks, cost_net, topology or TopologyConfig(), batch_sizes)
    rng = np.random.default_rng(config.seed)
    gen = torch.Generator().manual_seed(config.seed)
    opt = torch.optim.Adam(policy.parameters(), lr=config.lr * lr_factor)
    n_updates = math.ceil(config.episodes / config.episodes_per_update) if config.episodes else 0
    per_task = 5 if config.episodes_per_update >= 10 else max(1, config.episodes_per_update // 2)
    updates: list[PolicyUpdate] = []
    with progress_bar("policy update", n_updates, progress, report) as advance:
        for _ in range(n_updates):
            n_ep = config.episodes_per_update
            n_groups = max(1, n_ep // per_task)
            chosen = rng.choice(len(mdps), size=n_groups, replace=len(mdps) < n_groups)
            episodes: list[Episode] = []
            groups: list[int] = []
            policy.eval()
            for e in range(n_ep):
                g = e % n_groups
                episodes.append(rollout(policy, mdp_clone(mdps[int(chosen[g])]), "sample", gen))
                groups.append(g)
            policy.train()
            returns = np.array([-ep.overall_ms / ep.mdp.scale for ep in episodes])
            adv = torch.tensor(_standardise(returns, groups), dtype=torch.float32)
            pg_terms, entropies = [], []
            for a, ep in zip(adv, episodes, strict=True):
                logp, ent = episode_log_probs(policy, ep)
                pg_terms.append(-(a * logp).mean())
                entropies.append(ent.mean())
            entropy = torch.stack(entropies).mean()
            loss = torch.stack(pg_terms).mean() - config.entropy_weight * entropy
            opt.zero_grad()
            loss.backward()
            opt.step()
            update = PolicyUpdate(
                mean_cost_ms=float(np.mean([ep.overall_ms for ep in episodes])), entropy=float(entropy.detach())
            )
            updates.append(update)
            advance(1, f"mean estimated cost {update.mean_cost_ms:.4g} ms, entropy {update.entropy:.3g}")
    policy.eval()
    greedy = {t.name: rollout(policy, mdp_clone(m), "greedy").overall_ms for t, m in zip(tasks, mdps, strict=True)}
    return policy, PolicyMetrics(
        episodes=n_updates * config.episodes_per_update, updates=tuple(updates), greedy_cost_ms=greedy
    )
