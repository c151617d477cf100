"""The interface the estimated MDP and the policy need from a cost model (docs/architecture/learning.md, "Learning").

A cost estimator maps each table to a *state vector*; a device's state is the SUM of the state vectors
of its tables (an empty device is all zeros), so placing one more table is one vector addition. From a
device state it predicts the device's four costs, and from the states of all devices the overall cost.
The learned CostNet implements it (state = table latent + a count channel); tests implement it with
small known cost functions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import torch

from dreamshard.values import Table


@runtime_checkable
class CostEstimator(Protocol):
    #: length of a table / device state vector
    state_dim: int
    #: a typical overall cost in ms; policy inputs and rewards are divided by it
    cost_scale: float

    def encode(self, tables: Sequence[Table]) -> torch.Tensor:
        """(N, state_dim) state vectors of the tables."""
        ...

    def device_costs(self, states: torch.Tensor) -> torch.Tensor:
        """(..., state_dim) device states -> (..., 4) costs in ms [fwd_compute, fwd_comm, bwd_comm, bwd_compute]."""
        ...

    def overall(self, states: torch.Tensor) -> torch.Tensor:
        """(..., D, state_dim) states of all devices of placements -> (...) overall cost in ms."""
        ...


def device_states(states: torch.Tensor, devices: Sequence[int] | torch.Tensor, num_devices: int) -> torch.Tensor:
    """(N, S) table states and each table's device -> (num_devices, S) device states (sums; empty = zeros)."""
    idx = torch.as_tensor(devices, dtype=torch.long)
    return torch.zeros(num_devices, states.shape[1], dtype=states.dtype).index_add_(0, idx, states)


def policy_cost_features(costs4: torch.Tensor, scale: float) -> torch.Tensor:
    """The 3 costs the policy sees per device: forward compute, communication (fwd+bwd), backward compute."""
    c = costs4 / scale
    return torch.stack((c[..., 0], c[..., 1] + c[..., 2], c[..., 3]), dim=-1)
