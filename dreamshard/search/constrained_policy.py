"""The RL policy placing units around fixed ones and within their tables' `devices` constraints
(docs/architecture/data-model.md, "Constraints"): the estimated MDP (dreamshard.learning.mdp) over the free units,
started with the fixed units (row blocks, replicas) on their devices and each step's legal devices narrowed to those the
unit may use. Without fixed units or pins it is `plan_with_policy` itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch

from dreamshard.errors import InfeasiblePlacementError
from dreamshard.learning.estimator import CostEstimator
from dreamshard.learning.mdp import EstimatedMDP
from dreamshard.learning.policy import Policy, plan_with_policy, rollout
from dreamshard.learning.threads import single_threaded
from dreamshard.placement.options import allowed_devices
from dreamshard.placement.room import allowed_devices_hint
from dreamshard.placement.validate import footprint
from dreamshard.values import GB, Table, Topology


class ConstrainedMDP(EstimatedMDP):
    """The estimated MDP with `fixed` units ((unit, device) pairs, encoded with the free ones' estimator) on their
    devices from the start and each free unit's devices limited to `allowed_devices`."""

    def __init__(
        self,
        tables: Sequence[Table],
        topology: Topology,
        estimator: CostEstimator,
        fixed: Sequence[tuple[Table, int]],
    ) -> None:
        self.fixed = list(fixed)
        with torch.no_grad():
            self.fixed_states = estimator.encode([u for u, _ in fixed]) if fixed else None
        n = topology.num_devices
        self.allowed = {t.name: np.isin(np.arange(n), allowed_devices(t, topology)) for t in tables}
        super().__init__(tables, topology, estimator)

    def reset(self) -> None:
        super().reset()
        if self.fixed_states is None:
            return
        for (unit, d), state in zip(self.fixed, self.fixed_states, strict=True):
            self.device_states[d] += state
            self.memory.add(d, footprint(unit, self.topology))

    def legal_mask(self) -> np.ndarray:
        """Devices the current unit may use with room for it; raises naming it when there is none."""
        t = self.tables[self.t]
        size = self.sizes[self.t]
        mask = (np.asarray(self.memory.used, dtype=np.int64) + size <= self.memory.capacity) & self.allowed[t.name]
        if not mask.any():
            hint = allowed_devices_hint(allowed_devices(t, self.topology), self.topology)
            raise InfeasiblePlacementError(
                t.name, size / GB, self.memory.largest_free_gb(), f"sharder dreamshard{hint}"
            )
        return mask

    def clone(self) -> ConstrainedMDP:
        """A fresh MDP sharing the (read-only) encoded units."""
        new = ConstrainedMDP.__new__(ConstrainedMDP)
        new.__dict__.update(self.__dict__)
        new.reset()
        return new


@single_threaded
def constrained_plan(
    policy: Policy,
    estimator: CostEstimator,
    tables: Sequence[Table],
    topology: Topology,
    fixed: Mapping[str, int],
    samples: int = 0,
    seed: int = 0,
) -> dict[str, int]:
    """{unit: device} of every unit of `tables`: the policy's greedy placement of the free ones around the `fixed`
    ones, or the best predicted of it and `samples` sampled rollouts (as `plan_with_policy`)."""
    pinned = any(len(allowed_devices(t, topology)) < topology.num_devices for t in tables)
    if not fixed and not pinned:
        return plan_with_policy(policy, estimator, tables, topology, samples=samples, seed=seed).placement
    held = [(t, int(fixed[t.name])) for t in tables if t.name in fixed]
    free = [t for t in tables if t.name not in fixed]
    if not free:
        return {t.name: d for t, d in held}
    policy.eval()
    mdp = ConstrainedMDP(free, topology, estimator, held)
    best = rollout(policy, mdp, "greedy")
    if samples > 0:
        gen = torch.Generator().manual_seed(seed)
        for _ in range(samples):
            ep = rollout(policy, mdp.clone(), "sample", gen)
            if ep.overall_ms < best.overall_ms:
                best = ep
    return {**best.placement, **{t.name: d for t, d in held}}
