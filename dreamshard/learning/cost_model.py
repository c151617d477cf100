"""The cost network and its bootstrap ensemble (docs/architecture/learning.md, "Learning").

A CostNet embeds each table with a shared MLP; a device is the SUM of its tables' latents (an empty device is
zeros); four device heads predict forward compute, forward comm, backward comm and backward compute, and an
overall head predicts the placement's cost from the element-wise MAX over devices. Outputs are in units of a stored
per-target scale, so predictions come back in milliseconds; any number of tables and devices works.

A CostEnsemble holds K nets, each fit on its own bootstrap resample and with its own device-head activation
(ReLU, tanh, squared ReLU), so the members agree where training devices were and diverge beyond them: their
spread marks crowded devices as uncertain (dreamshard.learning.planning_cost plans pessimistically there).
"""

from __future__ import annotations

from typing import Annotated, cast

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import nn

from dreamshard.learning.features import NUM_FEATURES

NUM_DEVICE_COSTS = 4
#: positions of the compute and communication components in a (..., 4) cost vector, in the order of
#: dreamshard.values.DeviceCost: fwd_compute, fwd_comm, bwd_comm, bwd_compute
COMPUTE = (0, 3)
COMM = (1, 2)

_Size = Annotated[int, Field(ge=1, le=4096, strict=True)]

#: activation of the device heads of ensemble member k: MEMBER_ACTIVATIONS[k % 3]
MEMBER_ACTIVATIONS: tuple[str, ...] = ("relu", "tanh", "relu2")
_ACTIVATIONS = {"relu": torch.relu, "tanh": torch.tanh, "relu2": lambda x: torch.relu(x).square()}
#: the same, in place (planning without gradients: a member's slice of the batched hidden layer)
_ACTIVATE_IN_PLACE = {"relu": torch.relu_, "tanh": torch.tanh_, "relu2": lambda x: torch.relu_(x).square_()}


class CostNetSpec(BaseModel):
    """Architecture of a CostNet (stored in the model card)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    # Layer sizes are bounded so a hand-edited model card fails validation before any allocation.
    in_features: _Size = NUM_FEATURES
    hidden: _Size = 128
    latent: _Size = 32
    head_hidden: _Size = 64


def _mlp(i: int, h: int, o: int, final_relu: bool) -> nn.Sequential:
    layers: list[nn.Module] = [nn.Linear(i, h), nn.ReLU(), nn.Linear(h, o)]
    if final_relu:
        layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def _head_layers(head: nn.Module) -> tuple[nn.Linear, nn.Linear]:
    """The hidden and output layers of a head built by `_mlp` (an nn.Sequential indexes as plain modules)."""
    assert isinstance(head, nn.Sequential)
    hidden, out = head[0], head[2]
    assert isinstance(hidden, nn.Linear) and isinstance(out, nn.Linear)
    return hidden, out


class CostNet(nn.Module):
    """Predicts per-device fused costs and the overall cost of a placement from table features."""

    target_scale: torch.Tensor  # a registered buffer

    def __init__(self, spec: CostNetSpec | None = None, activation: str = "relu") -> None:
        super().__init__()
        self.spec = spec or CostNetSpec()
        self.activation = activation
        self._act = _ACTIVATIONS[activation]
        s = self.spec
        self.table_mlp = _mlp(s.in_features, s.hidden, s.latent, final_relu=True)
        self.device_heads = nn.ModuleList(_mlp(s.latent, s.head_hidden, 1, False) for _ in range(NUM_DEVICE_COSTS))
        self.overall_head = _mlp(s.latent, s.head_hidden, 1, False)
        self._heads = [_head_layers(h) for h in self.device_heads]
        self._head_params = [
            p for hidden, out in self._heads for p in (hidden.weight, hidden.bias, out.weight, out.bias)
        ]
        # target scales in ms: 4 device costs then overall
        self.register_buffer("target_scale", torch.ones(NUM_DEVICE_COSTS + 1))

    def table_latents(self, feats: torch.Tensor) -> torch.Tensor:
        return self.table_mlp(feats)

    def heads_scaled(self, dev_repr: torch.Tensor) -> torch.Tensor:
        """(..., latent) -> (..., 4) in scaled units. One batched matmul per layer for all four heads."""
        w1, b1, w2, b2 = self._fused_heads()
        hid = self._act(torch.nn.functional.linear(dev_repr, w1, b1))
        hid = hid.unflatten(-1, (NUM_DEVICE_COSTS, w2.shape[1]))
        return (hid * w2).sum(-1) + b2

    def device_costs_ms(self, dev_repr: torch.Tensor, nonempty: torch.Tensor) -> torch.Tensor:
        """(..., latent) summed latents and (...) non-empty mask -> (..., 4) costs in ms (0 for empty devices)."""
        return (
            self.heads_scaled(dev_repr)
            * nonempty.unsqueeze(-1).to(dev_repr.dtype)
            * self.target_scale[:NUM_DEVICE_COSTS]
        )

    def _fused_heads(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The four heads' weights stacked for one batched evaluation (cached while weights are unchanged
        and no gradient is needed, so planning pays for the stacking once)."""
        params = self._head_params
        grad = torch.is_grad_enabled()
        key = tuple(p._version for p in params)
        cache = getattr(self, "_head_cache", None)
        if not grad and cache is not None and cache[0] == key:
            return cache[1]
        fused = (
            torch.cat([hidden.weight for hidden, _ in self._heads]),  # (4*H, L)
            torch.cat([hidden.bias for hidden, _ in self._heads]),
            torch.stack([out.weight[0] for _, out in self._heads]),  # (4, H)
            torch.cat([out.bias for _, out in self._heads]),
        )
        if not grad:
            self._head_cache = (key, fused)
        return fused

    def overall_scaled(self, placement_repr: torch.Tensor) -> torch.Tensor:
        return self.overall_head(placement_repr).squeeze(-1)

    def forward_flat(
        self,
        feats: torch.Tensor,
        table_device: torch.Tensor,
        num_devices_total: int,
        device_placement: torch.Tensor,
        num_placements: int,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Batched forward over many placements flattened together.

        feats (M, F) one row per (placement, table); table_device (M,) index of its device among all
        devices of the batch; device_placement (Ndev,) index of each device's placement.
        Returns (device predictions (Ndev, 4), overall (B,), device non-empty mask (Ndev,)), scaled units.
        """
        z = self.table_latents(feats)
        dev = torch.zeros(num_devices_total, z.shape[1], dtype=z.dtype).index_add_(0, table_device, z)
        count = torch.zeros(num_devices_total, dtype=z.dtype).index_add_(
            0, table_device, torch.ones_like(table_device, dtype=z.dtype)
        )
        nonempty = count > 0
        dev_pred = self.heads_scaled(dev) * nonempty.unsqueeze(-1)
        pooled = torch.zeros(num_placements, z.shape[1], dtype=z.dtype)
        pooled = pooled.scatter_reduce(0, device_placement.unsqueeze(-1).expand_as(dev), dev, "amax", include_self=True)
        return dev_pred, self.overall_scaled(pooled), nonempty


class CostEnsemble(nn.Module):
    """K CostNets of one architecture (members of a bootstrap ensemble)."""

    def __init__(self, spec: CostNetSpec | None = None, size: int = 3) -> None:
        super().__init__()
        if size < 1:
            raise ValueError(f"ensemble size must be >= 1, got {size}")
        self.spec = spec or CostNetSpec()
        self.members = nn.ModuleList(
            CostNet(self.spec, MEMBER_ACTIVATIONS[k % len(MEMBER_ACTIVATIONS)]) for k in range(size)
        )

    @property
    def size(self) -> int:
        return len(self.members)

    @property
    def nets(self) -> list[CostNet]:
        """The members, typed (an nn.ModuleList yields them as plain modules)."""
        return cast(list[CostNet], list(self.members))

    @property
    def cost_scale(self) -> float:
        """A typical overall cost (ms): the members' mean overall target scale."""
        return float(torch.stack([m.target_scale[-1] for m in self.nets]).mean())

    def table_latents(self, feats: torch.Tensor) -> torch.Tensor:
        """(N, F) -> (K, N, latent)."""
        return torch.stack([m.table_latents(feats) for m in self.nets])

    def member_device_costs(self, dev_repr: torch.Tensor, nonempty: torch.Tensor) -> torch.Tensor:
        """(K, ..., latent) per-member summed latents, (...) mask -> (K, ..., 4) costs in ms.

        Without gradients (planning) all members' heads run as one batched matmul per layer."""
        if torch.is_grad_enabled():
            return torch.stack([m.device_costs_ms(dev_repr[k], nonempty) for k, m in enumerate(self.nets)])
        w1, b1, w2, b2, scale = self._stacked_heads()
        k, lead = dev_repr.shape[0], dev_repr.shape[1:-1]
        x = dev_repr.reshape(k, -1, dev_repr.shape[-1])
        hid = torch.baddbmm(b1.unsqueeze(1), x, w1.transpose(1, 2))  # (K, M, 4*H)
        for i, m in enumerate(self.nets):  # each member's activation in place: the values of _ACTIVATIONS, no copy
            _ACTIVATE_IN_PLACE[m.activation](hid[i])
        hid = hid.unflatten(-1, (NUM_DEVICE_COSTS, w2.shape[-1]))  # (K, M, 4, H)
        out = ((hid * w2.unsqueeze(1)).sum(-1) + b2.unsqueeze(1)) * scale.unsqueeze(1)
        out = out.reshape(k, *lead, NUM_DEVICE_COSTS)
        return out * nonempty.unsqueeze(-1).to(out.dtype)

    def _stacked_heads(self) -> tuple[torch.Tensor, ...]:
        """Every member's fused head weights stacked on a leading member axis (cached while unchanged)."""
        key = tuple(p._version for m in self.nets for p in (*m._head_params, m.target_scale))
        cache = getattr(self, "_stack_cache", None)
        if cache is not None and cache[0] == key:
            return cache[1]
        parts = [m._fused_heads() for m in self.nets]
        stacked = tuple(torch.stack([p[i] for p in parts]) for i in range(4)) + (
            torch.stack([m.target_scale[:NUM_DEVICE_COSTS] for m in self.nets]),
        )
        self._stack_cache = (key, stacked)
        return stacked
