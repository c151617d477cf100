"""The gate's sequential rule: early looks after `publish.early_rounds` paired rounds (3 and 4) decide when the
bounds already say approved or rejected; otherwise measuring goes on to `publish.min_rounds` (docs/architecture.md,
"The publish gate").

The error rate 1 - confidence is split between the looks (Bonferroni): each early look is judged at
1 - early_share x (1 - confidence), the final one at 1 - (1 - k x early_share) x (1 - confidence) for k early
looks. The chance that any look approves a plan that is not faster (or rejects one that is) is at most the sum,
1 - confidence, the same guarantee as one look at `confidence`. A plan clearly ahead of every baseline is decided
at the first look whose bound is clear, not at min_rounds; one inside the noise pays a slightly wider final
bound. The rule is a function of the rounds in order, so one comparison always gets one decision, whoever reads
it (the gate measuring for itself, or a comparison file).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from dreamshard.config.publish import PublishConfig
from dreamshard.gate.rule import bound_outcome
from dreamshard.gate.stats import Look
from dreamshard.sharders import BASELINE_SHARDERS
from dreamshard.values import Plan

#: What `compare_sharders` hands a stop rule after each round: every contender's plan and its samples so far.
Contenders = Sequence[tuple[Plan, Sequence[float]]]


def early_looks(rules: PublishConfig) -> tuple[Look, ...]:
    """The early looks of `rules`, in order: one per publish.early_rounds entry below publish.min_rounds (none:
    early_rounds is 0 or empty)."""
    rounds = [r for r in rules.early_round_list if r < rules.min_rounds]
    return tuple(Look(r, 1.0 - rules.early_share * (1.0 - rules.confidence), early=True) for r in rounds)


def looks(rules: PublishConfig, rounds: int) -> tuple[Look, ...]:
    """The looks the gate takes at `rounds` paired rounds, in order: the early looks there are enough rounds for,
    and the final look at all of them when there are min_rounds or more (none: too few rounds). The final look's
    share of the error rate is what every early look leaves, measured or not."""
    early = early_looks(rules)
    out = [e for e in early if rounds >= e.rounds]
    if rounds >= rules.min_rounds:
        out.append(Look(rounds, 1.0 - (1.0 - len(early) * rules.early_share) * (1.0 - rules.confidence)))
    return tuple(out)


def _decides(
    rules: PublishConfig, look: Look, plan_ms: Sequence[float], baselines: Mapping[str, Sequence[float]]
) -> bool:
    n = look.rounds
    outcome, _, _ = bound_outcome(
        plan_ms[:n], {k: v[:n] for k, v in baselines.items()}, look.confidence, 1.0 - rules.min_improvement
    )
    return outcome != "inconclusive"


def decides_early(rules: PublishConfig, plan_ms: Sequence[float], baselines: Mapping[str, Sequence[float]]) -> bool:
    """Whether an early look approves or rejects on these paired samples (each look on its first rounds; the looks
    the samples are long enough for)."""
    if not baselines:
        return False
    n = min(len(plan_ms), *(len(v) for v in baselines.values()))
    return any(_decides(rules, e, plan_ms, baselines) for e in early_looks(rules) if e.rounds <= n)


def stop_rule(rules: PublishConfig, plan_id: str) -> Callable[[Contenders], bool]:
    """For `compare_sharders(stop=...)`: stop measuring once an early look decides on plan `plan_id` against the
    comparison's baseline contenders (exactly the ones the gate will count), each look at its own round only (an
    earlier look that did not decide then does not decide later: it reads the same first rounds)."""
    by_round = {e.rounds: e for e in early_looks(rules)}

    def stop(contenders: Contenders) -> bool:
        mine = [s for p, s in contenders if p.plan_id == plan_id]
        if len(mine) != 1 or len(mine[0]) not in by_round:
            return False
        pairs = [(p.sharder, s) for p, s in contenders if p.plan_id != plan_id and p.sharder in BASELINE_SHARDERS]
        base = dict(pairs)
        if not base or len(base) != len(pairs):
            return False  # two contenders under one baseline label: the gate refuses such a comparison anyway
        if any(len(v) < len(mine[0]) for v in base.values()):
            return False
        return _decides(rules, by_round[len(mine[0])], mine[0], base)

    return stop
