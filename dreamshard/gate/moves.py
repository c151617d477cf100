"""Moves charged to every contender (docs/architecture/gate.md, "Moves"): publishing a plan reshards the training
job's tables that it places otherwise than the current plan, once (`placement.diff.plan_diff`: weights and optimizer
state at the plan's all-to-all rate). Spread over publish.move_horizon_steps steps, that is a cost per step the
contender pays on top of its measured step: the learned plan, every baseline, the incumbent (its extension moves
no kept table) and the fallback alike. The current plan itself moves nothing.

The gate compares paired per-round figures, so each contender's figures get its own charge less the judged plan's
(`relative`): the judged plan's figures stay as measured, and every ratio is the ratio of the charged costs' order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pydantic import BaseModel, ConfigDict

from dreamshard.gate.bounds import ratio_bound
from dreamshard.placement.diff import PlanDiff, plan_diff
from dreamshard.values import Inventory, Plan


class MoveCharge(BaseModel):
    """One contender's move from the current plan: the diff and what it costs a step over the horizon."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    label: str
    diff: PlanDiff
    per_step_ms: float  # diff.move_ms / horizon (0: nothing moves, or moves are free)

    @property
    def moved(self) -> int:
        return len(self.diff.moved)


def move_charges(
    current: Plan | None, contenders: Mapping[str, Plan], inventory: Inventory, horizon: int
) -> dict[str, MoveCharge]:
    """Each contender's move from `current` (by label); empty when nothing is current (a first plan moves nothing)
    or `horizon` is 0 (publish.move_horizon_steps 0: moves are free)."""
    if current is None or horizon <= 0:
        return {}
    out: dict[str, MoveCharge] = {}
    for label, plan in contenders.items():
        diff = plan_diff(current, plan, inventory)
        out[label] = MoveCharge(label=label, diff=diff, per_step_ms=diff.move_ms / horizon if diff.moved else 0.0)
    return out


def relative(samples: list[float], own: float, judged: float) -> list[float]:
    """A contender's per-round figures charged its move (`own` ms a step) less the judged plan's (`judged`): never
    below a millionth of a figure (a move no horizon pays off leaves the contender unbeatable)."""
    delta = own - judged
    if delta == 0:
        return list(samples)
    return [max(x + delta, x * 1e-6) for x in samples]


def charged_clause(charges: Mapping[str, MoveCharge], judged: str, horizon: int) -> str:
    """The decision's clause on the charges ("" when nothing moves): each contender's moved tables and ms a step."""
    moving = {k: c for k, c in charges.items() if c.moved}
    if not moving:
        return ""
    parts = [
        f"{'this plan' if k == judged else k} {c.per_step_ms:.4g} ({c.moved} table{'s' if c.moved != 1 else ''})"
        for k, c in sorted(moving.items(), key=lambda kv: (kv[0] != judged, kv[0]))
    ]
    still = sorted(k for k, c in charges.items() if not c.moved and k != judged)
    rest = f"; {', '.join(still)} move nothing" if still else ""
    return (
        f"moves from the current plan charged over publish.move_horizon_steps {horizon} (ms a step): "
        f"{', '.join(parts)}{rest}"
    )


def uncharged_ratio(
    plan_ms: Sequence[float],
    samples: Mapping[str, Sequence[float]],
    baseline: str | None,
    charges: Mapping[str, MoveCharge],
) -> float | None:
    """plan / `baseline` as measured, before any move was charged (the figure a drift check re-measures: it pairs the
    same two plans and charges nothing); None when nothing was charged (the decision's ratio is that figure) or the
    baseline has no samples."""
    if not any(c.per_step_ms for c in charges.values()) or baseline is None or baseline not in samples:
        return None
    return ratio_bound(plan_ms, samples[baseline], 0.95).ratio
