"""The collective fits the planner used before the fit fix (issue of 2026-12-04), applied to the judge's bytes: how
far their charge for a plan's exchanges was from what the judge timed, on the judge's bottleneck device.

- `card`: the shipped model card's all-to-all fits, measured when the model was trained (2 ranks r2 0.72, 3 ranks
  r2 0.60, 4 ranks r2 0.78, non-monotone points): what search-only planning costed exchanges with; the closest
  world size is taken, as planning did.
- `cached 4 ranks`: the oracle's cached 4-rank fit on 2 cores (r2 0.28; 3.8 ms + 0.41 ms/MB), used for every world
  of 4 devices or more by verification, refinement and the gate.
Both charge the forward exchange once and the backward once (gradients of the outputs).
"""

from __future__ import annotations

from typing import Any

from judge_bytes import plan_bytes

from dreamshard.values import Inventory, Plan

#: {world size: (alpha ms, beta ms per MB)} of the shipped card (dreamshard/pretrained/model.json, comm_models)
CARD = {2: (0.5510, 0.5870), 3: (1.9533, 1.1217), 4: (1.4765, 1.0357)}
CACHED_4_RANKS = (3.8, 0.41)


def _charge(fit: tuple[float, float], mb_fwd: float, mb_bwd: float) -> float:
    alpha, beta = fit
    return (alpha + beta * mb_fwd if mb_fwd > 0 else 0.0) + (alpha + beta * mb_bwd if mb_bwd > 0 else 0.0)


def before_errors(
    inventory: Inventory,
    plan: Plan,
    per_device: list[list[float]],
    others: dict[str, tuple[float, float]] | None = None,
) -> dict[str, float]:
    """(old charge - judge) / judge of the exchanges of the judge's bottleneck device, per old fit, and per fit of
    `others` ({label: (alpha ms, beta ms per MB)} for this plan's world)."""
    d = max(range(len(per_device)), key=lambda i: sum(per_device[i]))
    judge_comm = per_device[d][1] + per_device[d][2]
    if judge_comm <= 0:
        return {}
    b = plan_bytes(inventory, plan)[d]
    n = plan.topology.num_devices
    out: dict[str, Any] = {}
    card = CARD[min(CARD, key=lambda w: (abs(w - n), -w))]
    out["card"] = (_charge(card, b.forward / 1e6, b.backward / 1e6) - judge_comm) / judge_comm
    if n >= 4:
        out["cached 4 ranks"] = (_charge(CACHED_4_RANKS, b.forward / 1e6, b.backward / 1e6) - judge_comm) / judge_comm
    for label, fit in (others or {}).items():
        out[label] = (_charge(fit, b.forward / 1e6, b.backward / 1e6) - judge_comm) / judge_comm
    return out
