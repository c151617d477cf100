"""The estimated MDP (docs/architecture/learning.md, "Learning"): place one table per step, no hardware in the loop.

Tables are visited in order of predicted single-table cost, largest first. At each step the legal
devices are those with memory left for the current table (dreamshard.placement.validate.MemoryTracker); when none
is legal the episode raises InfeasiblePlacementError naming the table. The reward is 0 until the last
table is placed, then -(predicted overall cost) / cost_scale.

Device states are kept incrementally (one vector addition per step), and the costs of every device
*with the current table added* are predicted in one batched call per step, so an episode over N tables
and D devices costs N small batched evaluations, never a re-encoding of all tables.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from dreamshard.errors import InfeasiblePlacementError
from dreamshard.learning.estimator import CostEstimator, policy_cost_features
from dreamshard.placement.validate import MemoryTracker, check_each_table_fits, footprint
from dreamshard.values import GB, Costs, DeviceCost, Inventory, Table, Topology


def single_table_costs(estimator: CostEstimator, states: torch.Tensor) -> np.ndarray:
    """Predicted total cost (ms) of each table alone on a device."""
    with torch.no_grad():
        return estimator.device_costs(states).sum(-1).numpy().astype(float)


class EstimatedMDP:
    """One planning task (tables on a topology) under a cost estimator. reset() before each episode."""

    def __init__(self, tables: Sequence[Table], topology: Topology, estimator: CostEstimator) -> None:
        check_each_table_fits_list(tables, topology)
        self.topology = topology
        self.estimator = estimator
        self.num_devices = topology.num_devices
        with torch.no_grad():
            states = estimator.encode(list(tables))
        single = single_table_costs(estimator, states)
        # largest predicted single-table cost first; name breaks ties so the order is deterministic
        order = sorted(range(len(tables)), key=lambda i: (-single[i], tables[i].name))
        self.tables: list[Table] = [tables[i] for i in order]
        self.states = states[order].contiguous()
        self.sizes = [footprint(t, self.topology) for t in self.tables]
        self.scale = float(estimator.cost_scale) or 1.0
        self.reset()

    @property
    def batch_size(self) -> int:
        return self.topology.batch_size

    @property
    def num_steps(self) -> int:
        return len(self.tables)

    def reset(self) -> None:
        self.t = 0
        self.memory = MemoryTracker(self.topology)
        self.device_states = torch.zeros(self.num_devices, self.states.shape[1], dtype=self.states.dtype)
        self.actions: list[int] = []

    @property
    def done(self) -> bool:
        return self.t >= len(self.tables)

    @property
    def current(self) -> Table:
        return self.tables[self.t]

    def legal_mask(self) -> np.ndarray:
        """Boolean (D,) mask of devices with room for the current table; raises if there is none."""
        size = self.sizes[self.t]
        mask = np.asarray(self.memory.used, dtype=np.int64) + size <= self.memory.capacity
        if not mask.any():
            t = self.tables[self.t]
            raise InfeasiblePlacementError(
                t.name, self.sizes[self.t] / GB, self.memory.largest_free_gb(), "sharder dreamshard"
            )
        return mask

    def after_cost_features(self) -> torch.Tensor:
        """(D, 3) predicted [fwd compute, comm, bwd compute] of each device if the current table joined it,
        in units of cost_scale."""
        with torch.no_grad():
            after = self.device_states + self.states[self.t]
            return policy_cost_features(self.estimator.device_costs(after), self.scale)

    def step(self, device: int) -> float:
        """Place the current table on `device`; returns the reward (non-zero only at the end)."""
        if not self.memory.fits(device, self.sizes[self.t]):
            raise InfeasiblePlacementError(
                self.tables[self.t].name,
                self.tables[self.t].size_gb,
                self.memory.largest_free_gb(),
                f"device {device} is full",
            )
        self.memory.add(device, self.sizes[self.t])
        self.device_states[device] += self.states[self.t]
        self.actions.append(device)
        self.t += 1
        return -self.predicted_overall() / self.scale if self.done else 0.0

    def predicted_overall(self) -> float:
        with torch.no_grad():
            return float(self.estimator.overall(self.device_states).clamp_min(0.0))

    def predicted_costs(self) -> Costs:
        with torch.no_grad():
            per = self.estimator.device_costs(self.device_states).clamp_min(0.0)
        return Costs.from_devices([DeviceCost.from_list(r.tolist()) for r in per], overall_ms=self.predicted_overall())

    def placement(self) -> dict[str, int]:
        return {t.name: d for t, d in zip(self.tables, self.actions, strict=False)}


def check_each_table_fits_list(tables: Sequence[Table], topology: Topology) -> None:
    if tables:
        check_each_table_fits(Inventory(name="task", tables=tuple(tables)), topology)
