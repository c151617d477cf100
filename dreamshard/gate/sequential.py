"""The gate's sequential rule: early looks after `publish.early_rounds` paired rounds (3 and 4) decide when the
bounds already say approved or rejected; otherwise measuring goes on to `publish.min_rounds` (docs/architecture/gate.md,
"The publish gate").

The error rate 1 - confidence is split between the looks (Bonferroni): each early look is judged at
1 - early_share x (1 - confidence), the final one at 1 - (1 - k x early_share) x (1 - confidence) for k early
looks. The chance that any look approves a plan that is not faster (or rejects one that is) is at most the sum,
1 - confidence, the same guarantee as one look at `confidence`. A plan clearly ahead of every baseline is decided
at the first look whose bound is clear, not at min_rounds; one inside the noise pays a slightly wider final
bound. The rule is a function of the rounds in order, so one comparison always gets one decision, whoever reads
it (the gate measuring for itself, or a comparison file).

Sequential rounds where the noise is high: from min_rounds on (or the rounds asked for, when more), the measuring
goes on while the plan's or the deciding baseline's spread (`window_spread`: (max - min) / median over its last
min_rounds rounds) is above publish.target_spread, up to publish.max_rounds. Whether to go on depends on the
spread alone, never on the ratio, so it is no look and spends none of the error budget: the final look takes every
round measured (stopping where the final interval first excludes the margin would be one look per round).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from dreamshard.config.publish import PublishConfig
from dreamshard.gate.bounds import Look, window_spread
from dreamshard.gate.rule import bound_outcome
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


def quiet_enough(rules: PublishConfig, plan_ms: Sequence[float], baselines: Mapping[str, Sequence[float]]) -> bool:
    """Whether the plan's and the deciding baseline's spreads (`window_spread` over the last min_rounds rounds) are
    at or below publish.target_spread: the final look may be taken here. The deciding baseline is the one whose
    bound is the hardest to beat at the final look's confidence."""
    n = min(len(plan_ms), *(len(v) for v in baselines.values()))
    final = looks(rules, max(n, rules.min_rounds))[-1]  # the final look's confidence
    _, decider, _ = bound_outcome(
        plan_ms[:n], {k: v[:n] for k, v in baselines.items()}, final.confidence, 1.0 - rules.min_improvement
    )
    window = rules.min_rounds
    return max(window_spread(plan_ms[:n], window), window_spread(baselines[decider][:n], window)) <= rules.target_spread


def gate_rounds(rules: PublishConfig, rounds: int) -> int:
    """The most rounds the gate's comparison measures when `rounds` are asked for: publish.max_rounds (or `rounds`,
    when more) for a comparison the gate can decide on (at least min_rounds rounds asked for), else `rounds`."""
    return max(rounds, rules.max_rounds) if rounds >= rules.min_rounds else rounds


def stop_rule(rules: PublishConfig, plan_id: str, rounds: int | None = None) -> Callable[[Contenders], bool]:
    """For `compare_sharders(stop=...)`: stop measuring once an early look decides on plan `plan_id` against the
    comparison's baseline contenders (exactly the ones the gate will count), each look at its own round only (an
    earlier look that did not decide then does not decide later: it reads the same first rounds); from `rounds`
    (default and at least publish.min_rounds) on, once the spreads are quiet enough (`quiet_enough`). The caller
    caps the rounds (`gate_rounds`)."""
    by_round = {e.rounds: e for e in early_looks(rules)}
    floor = max(rules.min_rounds, rounds or 0)

    def stop(contenders: Contenders) -> bool:
        mine = [s for p, s in contenders if p.plan_id == plan_id]
        if len(mine) != 1:
            return False
        pairs = [(p.sharder, s) for p, s in contenders if p.plan_id != plan_id and p.sharder in BASELINE_SHARDERS]
        base = dict(pairs)
        if not base or len(base) != len(pairs):
            return False  # two contenders under one baseline label: the gate refuses such a comparison anyway
        n = len(mine[0])
        if any(len(v) < n for v in base.values()):
            return False
        if n >= floor:
            return quiet_enough(rules, mine[0], base)
        return n in by_round and _decides(rules, by_round[n], mine[0], base)

    return stop
