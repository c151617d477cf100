"""The decision rule alone, on figures already verified (`checks.py`): plan vs every baseline, paired by round.

With n paired rounds, each baseline b gets a `confidence` interval [low_b, high_b] on plan / b (`stats.py`);
the threshold is 1 - min_improvement:

* approved      iff high_b < threshold for every baseline (the plan is faster by the margin, beyond the noise: a
  tie, an interval whose upper end is the threshold, is no approval);
* rejected      iff low_b > threshold for some baseline (clearly not faster by the margin);
* equivalent    iff neither, and the deciding baseline's interval lies inside [1 - e, 1 + e], e the equivalence
  margin (publish.equivalence_margin): the plan is as fast as the baseline within e, beyond the noise (two one-sided
  tests at the same confidence), taken at the final look only (an early look that stopped on parity would cut off
  a small gain the final look approves). Decided: more rounds would not show a gain worth a change.
  Stored as rejected, outcome "equivalent"; the current plan stays (with none that can serve the job, the plan
  becomes current: `policy.py`);
* inconclusive  otherwise: the measurements cannot tell; the current plan stays (stored as rejected, outcome
  "inconclusive"; what the store's current plan can serve may change that: `policy.py`).

Single figures (no samples) are taken as exact: a zero-width interval. With the sequential rule's looks
(`sequential.py`), this is judged at each look in turn on the first rounds, and the first look that approves or
rejects is the decision.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from dreamshard.config.publish import check_margin
from dreamshard.errors import ConfigError
from dreamshard.gate.bounds import Look, RatioBound, ratio_bound
from dreamshard.values import Plan
from dreamshard.values.decision import GateDecision, Outcome

#: The largest figure (ms) the gate does arithmetic on; anything above is an invalid input, not a cost.
MAX_MS = 1e12
_EPS = 1e-12
#: What follows from an inconclusive finding when nothing else is known (the publish policy may say otherwise).
CURRENT_STAYS = "the current plan stays (measure more rounds)"
#: What follows from an equivalent finding when nothing else is known.
NO_GAIN = "the current plan stays (no gain worth a change)"
#: What the gate's reason adds to the finding of each outcome that leaves the current plan current (UNDECIDED).
CONSEQUENCE = {"inconclusive": CURRENT_STAYS, "equivalent": NO_GAIN}

#: The bounds' verdict: the outcome, the baseline that decided it, every baseline's bound.
Verdict = tuple[Outcome, str, dict[str, RatioBound]]


def check_ms(value: float, what: str) -> float:
    """A cost figure the gate can compute with: a finite, positive number below MAX_MS."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not (0.0 < value < MAX_MS)
    ):
        raise ConfigError(f"{what} has cost {value} ms; costs must be positive numbers below {MAX_MS:g} ms")
    return float(value)


def _samples(name: str, value: float | Sequence[float]) -> list[float]:
    values = [value] if isinstance(value, (int, float)) else list(value)
    if not values:
        raise ConfigError(f"baseline '{name}' has no samples")
    return [check_ms(v, f"baseline '{name}'") for v in values]


def bound_outcome(
    mine: Sequence[float],
    base: Mapping[str, Sequence[float]],
    confidence: float,
    threshold: float,
    equivalence: float = 0.0,
) -> Verdict:
    """The bounds' verdict on paired samples (no other check): approved / rejected / equivalent (within
    `equivalence` of the deciding baseline; 0: never) / inconclusive, the baseline that decided it, and every
    baseline's bound (`base` must not be empty, every list as long as `mine`)."""
    bounds = {name: ratio_bound(mine, v, confidence) for name, v in base.items()}
    hardest = max(bounds, key=lambda n: bounds[n].high)
    clearly_worse = max(bounds, key=lambda n: bounds[n].low)
    if bounds[clearly_worse].low > threshold + _EPS:
        return "rejected", clearly_worse, bounds
    if bounds[hardest].high < threshold - _EPS:  # strictly: a plan that ties the baseline is not faster
        return "approved", hardest, bounds
    b = bounds[hardest]
    if equivalence > 0 and 1.0 - equivalence - _EPS <= b.low and b.high <= 1.0 + equivalence + _EPS:
        return "equivalent", hardest, bounds
    return "inconclusive", hardest, bounds


def _judged(
    mine: list[float],
    base: dict[str, list[float]],
    looks: Sequence[Look],
    confidence: float,
    threshold: float,
    equivalence: float,
) -> tuple[Verdict, Look]:
    """The first look whose bounds decide (else the last one), with its verdict; `looks` empty: one look at all
    the rounds with `confidence`. Only the final look may find the plan `equivalent`."""
    for name, v in base.items():
        if len(v) != len(mine):
            raise ConfigError(
                f"baseline '{name}' has {len(v)} rounds, the plan {len(mine)}: samples are paired by round"
            )
    verdict: Verdict | None = None
    taken = Look(len(mine), confidence)
    for look in looks or (taken,):
        if not 0 < look.rounds <= len(mine):
            raise ConfigError(f"a look at {look.rounds} round(s) on {len(mine)} paired round(s)")
        taken = look
        verdict = bound_outcome(
            mine[: look.rounds],
            {n: v[: look.rounds] for n, v in base.items()},
            look.confidence,
            threshold,
            0.0 if look.early else equivalence,  # an early look that stopped on parity would cut off an approval
        )
        if verdict[0] != "inconclusive":
            break
    assert verdict is not None  # at least one look was taken
    return verdict, taken


def _figures(
    plan: Plan, mine: list[float], base: dict[str, list[float]], min_improvement: float, confidence: float
) -> dict[str, Any]:
    """The decision's figures: the plan's and the best baseline's medians, the improvement, what was compared."""
    common: dict[str, Any] = {
        "plan_id": plan.plan_id,
        "min_improvement": min_improvement,
        "baselines": tuple(base),
        "confidence": confidence,
    }
    if plan.best_costs is not None:
        common.update(plan_cost_ms=statistics.median(mine), basis=plan.cost_basis, rounds=len(mine))
    medians = {name: statistics.median(v) for name, v in base.items()}
    if base:
        best = min(medians, key=medians.__getitem__)
        common.update(best_baseline=best, best_baseline_ms=medians[best])
        if plan.best_costs is not None:
            common["improvement"] = (medians[best] - common["plan_cost_ms"]) / medians[best]
    return common


def _refusal(plan: Plan, base: dict[str, list[float]], infeasible: Sequence[str]) -> str:
    """Why the plan is rejected before any bound is looked at ("" when the bounds decide)."""
    if not plan.fits_memory():
        return "plan does not fit memory: " + _overflow(plan)
    if plan.best_costs is None:
        return "plan has neither measured nor predicted costs; evaluate it first"
    if plan.out_of_range and plan.cost_basis == "predicted":
        return (
            f"plan has {len(plan.out_of_range)} input(s) outside the model's training ranges "
            f"({plan.out_of_range[0]}); predicted costs are not enough: measure it (plans publish --measure)"
        )
    if not base and not infeasible:
        return "no baseline costs to compare against; measure the baselines with the plan"
    return ""


def evaluate_gate(
    plan: Plan,
    baselines: Mapping[str, float | Sequence[float]],
    min_improvement: float,
    *,
    plan_samples: Sequence[float] | None = None,
    confidence: float = 0.95,
    infeasible: Sequence[str] = (),
    looks: Sequence[Look] = (),
    equivalence: float = 0.0,
) -> GateDecision:
    """Decide on `plan`'s costs (Plan.cost_basis; its per-round `plan_samples` when given) against each
    baseline's figure or per-round samples (paired with the plan's by round). Every baseline counts, whatever
    the plan's sharder label says. `looks` (gate/sequential.py): the sequential rule's looks, the first one whose
    bounds decide is the decision (default: one look at all rounds with `confidence`). `equivalence`
    (publish.equivalence_margin): the half-width of the band around parity inside which an undecided plan is
    `equivalent` (0: none). `gate_plan` verifies the inputs first and is what the doors call."""
    check_margin(min_improvement)
    base = {name: _samples(name, v) for name, v in baselines.items()}
    threshold = 1.0 - min_improvement
    mine: list[float] = []
    if plan.best_costs is not None:
        mine = [check_ms(v, f"plan {plan.plan_id}") for v in (plan_samples or [plan.best_costs.overall_ms])]
    verdict: Verdict | None = None
    look = Look(len(mine), confidence)
    if mine and base:
        verdict, look = _judged(mine, base, looks, confidence, threshold, equivalence)
        mine, base = mine[: look.rounds], {n: v[: look.rounds] for n, v in base.items()}
    common = {**_figures(plan, mine, base, min_improvement, look.confidence), "infeasible": tuple(infeasible)}
    if refusal := _refusal(plan, base, infeasible):
        return GateDecision(approved=False, outcome="rejected", reason=refusal, **common)
    if verdict is None:  # no baseline can place the inventory: nothing faster exists to keep
        reason = (
            f"approved: no baseline can place this inventory ({', '.join(infeasible)}: infeasible, recomputed); "
            f"{plan.cost_basis} {common['plan_cost_ms']:.4g} ms, fits memory on all {plan.topology.num_devices} devices"
        )
        return GateDecision(approved=True, outcome="approved", reason=reason, finding=reason, **common)
    outcome, decider, bounds = verdict
    b = bounds[decider]
    common.update(
        ratio=bounds[common["best_baseline"]].ratio,
        ratio_low=b.low,
        ratio_high=b.high,
        interval_width=b.high - b.low,
        decided_by=decider,
        stopped_early=look.early,
    )
    found = finding(outcome, plan, common, b, (decider, statistics.median(base[decider])), (threshold, equivalence))
    reason = f"{found}, {CONSEQUENCE[outcome]}" if outcome in CONSEQUENCE else found
    return GateDecision(approved=outcome == "approved", outcome=outcome, reason=reason, finding=found, **common)


def finding(
    outcome: str,
    plan: Plan,
    c: dict[str, Any],
    b: RatioBound,
    decider: tuple[str, float],
    bands: tuple[float, float],
) -> str:
    """What the bounds show, in words: the reason of an approval or a rejection, and the first part of an
    inconclusive one (what follows from it, the current plan staying or not, is said apart). The plan's figure,
    the improvement and the bound are all against the deciding baseline `decider` (its name, its median ms); when
    the best baseline by median is another, it is named apart with its own figure. `bands`: the approval threshold
    and the equivalence margin."""
    plan_ms, (name, base_ms), (threshold, equivalence) = c["plan_cost_ms"], decider, bands
    margin, basis = f"{c['min_improvement']:.1%}", c.get("basis")
    improvement = (base_ms - plan_ms) / base_ms
    early = " (an early look of the sequential rule)" if c.get("stopped_early") else ""
    stat = (
        f"plan/{name} in [{b.low:.4f}, {b.high:.4f}], width {100 * (b.high - b.low):.1f} points, "
        f"at {c['confidence']:.0%} over {b.rounds} round(s){early}"
    )
    against, best = f"best baseline {name} {base_ms:.4g} ms", ""
    if c["best_baseline"] != name:
        against = f"deciding baseline {name} {base_ms:.4g} ms"
        best = f"best baseline by median {c['best_baseline']} {c['best_baseline_ms']:.4g} ms ({c['improvement']:+.1%})"
    if outcome == "approved":
        cannot = f"; {', '.join(c['infeasible'])} cannot place it" if c["infeasible"] else ""
        return (
            f"approved: {basis} {plan_ms:.4g} ms vs {against} ({improvement:+.1%}, required {margin}; {stat})"
            f"{'; ' + best if best else ''}; fits memory on all {plan.topology.num_devices} devices{cannot}"
        )
    if outcome == "rejected":
        return (
            f"{basis} cost {plan_ms:.4g} ms does not beat {against} by {margin} (needs <= "
            f"{base_ms * threshold:.4g} ms; improvement {improvement:+.1%}; {stat}){'; ' + best if best else ''}"
        )
    if outcome == "equivalent":
        return (
            f"equivalent: {basis} {plan_ms:.4g} ms vs {against} ({improvement:+.1%}; {stat} inside "
            f"[{1 - equivalence:.4g}, {1 + equivalence:.4g}], publish.equivalence_margin {equivalence:.1%}): "
            f"as fast as the baseline within the margin{'; ' + best if best else ''}"
        )
    return (
        f"inconclusive: {basis} {plan_ms:.4g} ms vs {against} ({improvement:+.1%}, required {margin})"
        f"{' and ' + best if best else ''}, but {stat} {'straddles' if b.low < b.high else 'ties'} "
        f"{threshold:.4g}: within the noise"
    )


def _overflow(plan: Plan) -> str:
    cap = plan.topology.memory_per_device_gb
    d, used = max(enumerate(plan.memory_per_device_gb), key=lambda x: x[1])
    return f"device {d} holds {used:.3f} GB, over its {cap:g} GB memory limit"
