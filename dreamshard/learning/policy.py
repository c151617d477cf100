"""The placement policy (docs/architecture/learning.md, "Learning") and planning with it.

Per device the policy sees [sum of the latents (from its OWN table MLP) of the device's tables plus the
table being placed || an embedding of the device's 3 predicted costs (fwd compute, comm, bwd compute)
with that table added] and scores it with a small MLP; the action distribution is a softmax over the
LEGAL devices only. The same masking is used when acting and when computing log-probabilities in the
REINFORCE update. Seeing the *after-placement* state lets the policy compare "what happens if the table
goes here" across devices, which is what a cost-aware greedy does and what it can learn to improve on.
The logit also carries a learnable cost-greedy prior (see Policy.__init__), so training starts from that
greedy rule rather than from an arbitrary argmax.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import nn

from dreamshard.learning.estimator import CostEstimator
from dreamshard.learning.features import NUM_FEATURES, tables_features
from dreamshard.learning.mdp import EstimatedMDP
from dreamshard.learning.threads import single_threaded
from dreamshard.values import Costs, Table, Topology

NUM_POLICY_COSTS = 3


class PolicySpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    # Layer sizes are bounded so a hand-edited model card fails validation before any allocation.
    in_features: int = Field(default=NUM_FEATURES, ge=1, le=4096, strict=True)
    hidden: int = Field(default=128, ge=1, le=4096, strict=True)
    latent: int = Field(default=32, ge=1, le=4096, strict=True)
    head_hidden: int = Field(default=64, ge=1, le=4096, strict=True)
    prior_weight: float = Field(
        default=10.0, allow_inf_nan=False
    )  # initial weight of the cost-greedy prior (learnable)


class Policy(nn.Module):
    def __init__(self, spec: PolicySpec | None = None) -> None:
        super().__init__()
        self.spec = spec or PolicySpec()
        s = self.spec
        self.table_mlp = nn.Sequential(
            nn.Linear(s.in_features, s.hidden), nn.ReLU(), nn.Linear(s.hidden, s.latent), nn.ReLU()
        )
        self.cost_emb = nn.Sequential(nn.Linear(NUM_POLICY_COSTS, s.latent), nn.ReLU())
        hidden, out = nn.Linear(2 * s.latent, s.head_hidden), nn.Linear(s.head_hidden, 1)
        self.head = nn.Sequential(hidden, nn.ReLU(), out)
        # Residual cost-greedy prior: logit = head(...) - w * (predicted total of the device with the table).
        # With the head's last layer zeroed, an untrained policy is the greedy rule "put the table where
        # the cost net predicts the cheapest resulting device" (LPT on fused, predicted costs), instead of
        # an arbitrary argmax; REINFORCE learns the corrections (and w) from there.
        nn.init.zeros_(out.weight)
        nn.init.zeros_(out.bias)
        self.prior_weight = nn.Parameter(torch.tensor(float(s.prior_weight)))

    def encode(self, tables: Sequence[Table], batch_size: float) -> torch.Tensor:
        return self.table_mlp(torch.from_numpy(tables_features(list(tables), batch_size)))

    def logits(self, device_sums: torch.Tensor, cost_feats: torch.Tensor) -> torch.Tensor:
        """(..., D, latent), (..., D, 3) -> (..., D) unnormalised scores."""
        x = torch.cat([device_sums, self.cost_emb(cost_feats)], dim=-1)
        return self.head(x).squeeze(-1) - self.prior_weight * cost_feats.sum(-1)


def masked_log_softmax(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """log-probabilities of a softmax restricted to mask==True (illegal entries get -inf)."""
    return torch.log_softmax(logits.masked_fill(~mask, float("-inf")), dim=-1)


@dataclass
class Episode:
    """What one rollout did; enough to recompute its log-probabilities with gradients."""

    mdp: EstimatedMDP
    actions: np.ndarray  # (T,)
    masks: np.ndarray  # (T, D) bool
    cost_feats: torch.Tensor  # (T, D, 3)
    overall_ms: float
    placement: dict[str, int]
    costs: Costs


def rollout(
    policy: Policy, mdp: EstimatedMDP, mode: str = "greedy", generator: torch.Generator | None = None
) -> Episode:
    """Play one episode. mode "greedy" takes the argmax, "sample" samples from the masked softmax."""
    mdp.reset()
    T, D = mdp.num_steps, mdp.num_devices
    masks = np.zeros((T, D), dtype=bool)
    feats = torch.zeros(T, D, NUM_POLICY_COSTS)
    with torch.no_grad():
        z = policy.encode(mdp.tables, mdp.batch_size)
        sums = torch.zeros(D, z.shape[1])
        for t in range(T):
            mask = mdp.legal_mask()
            cf = mdp.after_cost_features()
            masks[t] = mask
            feats[t] = cf
            logits = policy.logits(sums + z[t], cf)
            mt = torch.from_numpy(mask)
            if mode == "sample":
                probs = torch.softmax(logits.masked_fill(~mt, float("-inf")), dim=-1)
                a = int(torch.multinomial(probs, 1, generator=generator))
            else:
                a = int(torch.argmax(logits.masked_fill(~mt, float("-inf"))))
            mdp.step(a)
            sums[a] += z[t]
    return Episode(
        mdp=mdp,
        actions=np.asarray(mdp.actions, dtype=np.int64),
        masks=masks,
        cost_feats=feats,
        overall_ms=mdp.predicted_overall(),
        placement=mdp.placement(),
        costs=mdp.predicted_costs(),
    )


def episode_log_probs(policy: Policy, ep: Episode) -> tuple[torch.Tensor, torch.Tensor]:
    """(T,) log-probabilities of the taken actions and (T,) entropies, under the MASKED distribution,
    recomputed in one batched pass with gradients (the rollout's device sums rebuilt by a cumsum)."""
    z = policy.encode(ep.mdp.tables, ep.mdp.batch_size)  # (T, L)
    T, D = ep.masks.shape
    actions = torch.from_numpy(ep.actions)
    onehot = torch.nn.functional.one_hot(actions, D).to(z.dtype)  # (T, D)
    contrib = onehot.unsqueeze(-1) * z.unsqueeze(1)  # (T, D, L)
    before = torch.cumsum(contrib, dim=0) - contrib  # device sums before step t
    after = before + z.unsqueeze(1)
    logits = policy.logits(after, ep.cost_feats)
    mask = torch.from_numpy(ep.masks)
    logp = masked_log_softmax(logits, mask)
    taken = logp.gather(1, actions.unsqueeze(1)).squeeze(1)
    p = logp.exp()
    entropy = -(p * logp.masked_fill(~mask, 0.0)).sum(-1)
    return taken, entropy


@single_threaded
def plan_with_policy(
    policy: Policy,
    estimator: CostEstimator,
    tables: Sequence[Table],
    topology: Topology,
    samples: int = 0,
    seed: int = 0,
) -> Episode:
    """Greedy argmax placement; with samples=K also K sampled placements, keeping the lowest predicted
    overall cost. Raises InfeasiblePlacementError naming a table that fits nowhere."""
    policy.eval()
    mdp = EstimatedMDP(tables, topology, estimator)
    best = rollout(policy, mdp, "greedy")
    if samples > 0:
        gen = torch.Generator().manual_seed(seed)
        for _ in range(samples):
            ep = rollout(policy, mdp_clone(mdp), "sample", gen)
            if ep.overall_ms < best.overall_ms:
                best = ep
    return best


def mdp_clone(mdp: EstimatedMDP) -> EstimatedMDP:
    """A fresh MDP sharing the (read-only) encoded tables of `mdp`."""
    new = EstimatedMDP.__new__(EstimatedMDP)
    new.topology, new.estimator, new.num_devices = mdp.topology, mdp.estimator, mdp.num_devices
    new.tables, new.states, new.sizes, new.scale = mdp.tables, mdp.states, mdp.sizes, mdp.scale
    new.reset()
    return new
