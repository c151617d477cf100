"""The cost network (DESIGN.md section 4).

Shared table MLP (21 -> hidden -> latent, ReLU); a device's representation is the SUM of its tables'
latents (empty device = zeros); four per-device heads (latent -> head_hidden -> 1) predict forward
compute, forward communication, backward communication and backward compute; an overall head predicts
the placement cost from the element-wise MAX of the device representations. Outputs are in units of a
stored per-target scale (set from the training data), so the loss is a plain sum of MSEs and the
predictions come back in milliseconds. For planning, the overall cost defaults to the max of the
predicted device totals (spec.overall_from_devices); the overall head is still trained and evaluated. Works for any number of tables and devices.

As a CostEstimator the state of a table is [latent || 1]: the extra count channel lets an empty device
be recognised exactly (its costs are 0, not the heads' bias).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import nn

from dreamshard.learning.estimator import CostEstimator
from dreamshard.learning.features import NUM_FEATURES, tables_features
from dreamshard.types import Costs, DeviceCost, Table

NUM_DEVICE_COSTS = 4
COST_NAMES = ("fwd_compute", "fwd_comm", "bwd_comm", "bwd_compute")


class CostNetSpec(BaseModel):
    """Architecture of a CostNet (stored in the model card)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    # Layer sizes are bounded so a hand-edited model card fails validation before any allocation.
    in_features: int = Field(default=NUM_FEATURES, ge=1, le=4096, strict=True)
    hidden: int = Field(default=128, ge=1, le=4096, strict=True)
    latent: int = Field(default=32, ge=1, le=4096, strict=True)
    head_hidden: int = Field(default=64, ge=1, le=4096, strict=True)
    # Planning's overall cost: True = max over devices of the predicted device totals (what a measured
    # overall cost is by definition, and on held-out tasks it extrapolates better than the head);
    # False = the overall head on the element-wise max of the device representations (the paper's).
    # The overall head is trained either way and its error reported.
    overall_from_devices: bool = True


def _mlp(i: int, h: int, o: int, final_relu: bool) -> nn.Sequential:
    layers: list[nn.Module] = [nn.Linear(i, h), nn.ReLU(), nn.Linear(h, o)]
    if final_relu:
        layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class CostNet(nn.Module):
    """Predicts per-device fused costs and the overall cost of a placement from table features."""

    def __init__(self, spec: CostNetSpec | None = None) -> None:
        super().__init__()
        self.spec = spec or CostNetSpec()
        s = self.spec
        self.table_mlp = _mlp(s.in_features, s.hidden, s.latent, final_relu=True)
        self.device_heads = nn.ModuleList(_mlp(s.latent, s.head_hidden, 1, False) for _ in range(NUM_DEVICE_COSTS))
        self.overall_head = _mlp(s.latent, s.head_hidden, 1, False)
        self._head_params = [p for h in self.device_heads for p in (h[0].weight, h[0].bias, h[2].weight, h[2].bias)]
        # target scales in ms: 4 device costs then overall
        self.register_buffer("target_scale", torch.ones(NUM_DEVICE_COSTS + 1))

    # -- raw network pieces (scaled units) -------------------------------------------------------
    def table_latents(self, feats: torch.Tensor) -> torch.Tensor:
        return self.table_mlp(feats)

    def heads_scaled(self, dev_repr: torch.Tensor) -> torch.Tensor:
        """(..., latent) -> (..., 4) in scaled units. One batched matmul per layer for all four heads."""
        w1, b1, w2, b2 = self._fused_heads()
        hid = torch.relu(torch.nn.functional.linear(dev_repr, w1, b1))
        hid = hid.unflatten(-1, (NUM_DEVICE_COSTS, w2.shape[1]))
        return (hid * w2).sum(-1) + b2

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
            torch.cat([h[0].weight for h in self.device_heads]),  # (4*H, L)
            torch.cat([h[0].bias for h in self.device_heads]),
            torch.stack([h[2].weight[0] for h in self.device_heads]),  # (4, H)
            torch.cat([h[2].bias for h in self.device_heads]),
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

        feats (M, 21) one row per (placement, table); table_device (M,) index of its device among all
        devices of the batch; device_placement (Ndev,) index of each device's placement.
        Returns (device predictions (Ndev, 4), overall (B,), device non-empty mask (Ndev,)), scaled units.
        """
        z = self.table_latents(feats)
        dev = torch.zeros(num_devices_total, z.shape[1], dtype=z.dtype).index_add_(0, table_device, z)
        count = torch.zeros(num_devices_total, dtype=z.dtype).index_add_(0, table_device, torch.ones_like(table_device, dtype=z.dtype))
        nonempty = count > 0
        dev_pred = self.heads_scaled(dev) * nonempty.unsqueeze(-1)
        pooled = torch.zeros(num_placements, z.shape[1], dtype=z.dtype)
        pooled = pooled.scatter_reduce(0, device_placement.unsqueeze(-1).expand_as(dev), dev, "amax", include_self=True)
        return dev_pred, self.overall_scaled(pooled), nonempty

    # -- CostEstimator interface (milliseconds) ---------------------------------------------------
    @property
    def state_dim(self) -> int:
        return self.spec.latent + 1

    @property
    def cost_scale(self) -> float:
        return float(self.target_scale[-1])

    def encode(self, tables: Sequence[Table]) -> torch.Tensor:
        feats = torch.from_numpy(tables_features(list(tables)))
        z = self.table_latents(feats)
        return torch.cat([z, torch.ones(z.shape[0], 1, dtype=z.dtype)], dim=1)

    def device_costs(self, states: torch.Tensor) -> torch.Tensor:
        nonempty = (states[..., -1:] > 0.5).to(states.dtype)
        return self.heads_scaled(states[..., :-1]) * nonempty * self.target_scale[:NUM_DEVICE_COSTS]

    def overall(self, states: torch.Tensor) -> torch.Tensor:
        if self.spec.overall_from_devices:
            return self.device_costs(states).sum(-1).amax(dim=-1).clamp_min(0.0)
        pooled = states[..., :-1].amax(dim=-2).clamp_min(0.0)
        return self.overall_scaled(pooled) * self.target_scale[-1]


def predict_costs(est: CostEstimator, tables: Sequence[Table], placement: dict[str, int], num_devices: int) -> Costs:
    """Per-device costs and overall cost (ms) of a full placement under a CostEstimator."""
    with torch.no_grad():
        states = est.encode(tables)
        dev = torch.zeros(num_devices, states.shape[1], dtype=states.dtype)
        idx = torch.tensor([placement[t.name] for t in tables], dtype=torch.long)
        dev.index_add_(0, idx, states)
        per = est.device_costs(dev).clamp_min(0.0)
        overall = float(est.overall(dev).clamp_min(0.0))
    return Costs.from_devices([DeviceCost.from_list(r.tolist()) for r in per], overall_ms=overall)
