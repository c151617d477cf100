"""The gate's sequential rule: decide after `publish.early_rounds` paired rounds when the bounds already say
approved or rejected, measure on to `publish.min_rounds` when they do not (docs/architecture.md, "The publish
gate").

The error rate 1 - confidence is split between the looks (Bonferroni): the early look is judged at
1 - early_share x (1 - confidence), the final one at 1 - (1 - early_share) x (1 - confidence). The chance that
either look approves a plan that is not faster (or rejects one that is) is at most the sum, 1 - confidence, the
same guarantee as one look at `confidence`. A plan clearly ahead of every baseline (the usual case: bounds of a
few tenths of a percent against gains of several percent) is decided after early_rounds rounds, not min_rounds;
one inside the noise pays a slightly wider final bound. The rule is a function of the rounds in order, so one
comparison always gets one decision, whoever reads it (the gate measuring for itself, or a comparison file).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from dreamshard.sharders import BASELINE_SHARDERS
from dreamshard.gate.config import PublishConfig
from dreamshard.gate.rule import bound_outcome
from dreamshard.gate.stats import Look
from dreamshard.types import Plan

#: What `compare_sharders` hands a stop rule after each round: every contender's plan and its samples so far.
Contenders = Sequence[tuple[Plan, Sequence[float]]]


def early_look(rules: PublishConfig) -> Look | None:
    """The early look of `rules` (None: publish.early_rounds is 0, or not below publish.min_rounds)."""
    if not rules.early_rounds or rules.early_rounds >= rules.min_rounds:
        return None
    return Look(rules.early_rounds, 1.0 - rules.early_share * (1.0 - rules.confidence), early=True)


def looks(rules: PublishConfig, rounds: int) -> tuple[Look, ...]:
    """The looks the gate takes at `rounds` paired rounds, in order: the early look when there are enough rounds
    for it, and the final look at all of them when there are min_rounds or more (none: too few rounds)."""
    early = early_look(rules)
    out = [early] if early is not None and rounds >= early.rounds else []
    if rounds >= rules.min_rounds:
        share = rules.early_share if early is not None else 0.0
        out.append(Look(rounds, 1.0 - (1.0 - share) * (1.0 - rules.confidence)))
    return tuple(out)


def decides_early(rules: PublishConfig, plan_ms: Sequence[float], baselines: Mapping[str, Sequence[float]]) -> bool:
    """Whether the early look approves or rejects on these paired samples (their first early_rounds rounds)."""
    early = early_look(rules)
    if early is None or not baselines or len(plan_ms) < early.rounds:
        return False
    if any(len(v) < early.rounds for v in baselines.values()):
        return False
    n = early.rounds
    outcome, _, _ = bound_outcome(plan_ms[:n], {k: v[:n] for k, v in baselines.items()}, early.confidence,
                                  1.0 - rules.min_improvement)
    return outcome != "inconclusive"


def stop_rule(rules: PublishConfig, plan_id: str) -> Callable[[Contenders], bool]:
    """For `compare_sharders(stop=...)`: stop measuring once the early look decides on plan `plan_id` against the
    comparison's baseline contenders (exactly the ones the gate will count), at the early look's round only."""
    early = early_look(rules)

    def stop(contenders: Contenders) -> bool:
        mine = [s for p, s in contenders if p.plan_id == plan_id]
        if early is None or len(mine) != 1 or len(mine[0]) != early.rounds:
            return False
        pairs = [(p.sharder, s) for p, s in contenders if p.plan_id != plan_id and p.sharder in BASELINE_SHARDERS]
        base = dict(pairs)
        if len(base) != len(pairs):
            return False  # two contenders under one baseline label: the gate refuses such a comparison anyway
        return decides_early(rules, mine[0], base)

    return stop
