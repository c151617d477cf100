"""The plan stage's race (docs/architecture/learning.md, "The race"): contenders measured interleaved, round by round,
a contender behind the leader beyond the noise measured no more, and the best measured one kept.

Every round measures every contender still in the race once, in a freshly shuffled order
(dreamshard.evaluation.interleave). After each round the leader is the contender with the lowest median (all those
still in were measured in the same rounds); a contender whose paired ratio to the leader is above 1 with
`confidence` (the gate's interval, dreamshard.gate.bounds.ratio_bound, over at least 2 paired rounds) is dropped,
except the default (the plan stage protects it: a challenger must beat it in every round it is measured). The race
ends when one contender is left (or only the protected; with rounds cycling through id distributions, not before
each had a round), the rounds run out, or the time does (`out_of_time`, asked after each round: every contender is
measured at least once).

Out of time or out of rounds before CONFIRM_ROUNDS rounds, the race goes on with the default and the (at most
CONFIRM_AHEAD) contenders its rounds put ahead of it, to CONFIRM_ROUNDS rounds while they stay ahead: a lead in one
round is as often the noise's, and nothing replaces the default on fewer than MIN_ROUNDS_TO_DROP.

Cut short: on a timed (not simulated) backend, every contender of a round after the first but the protected is
measured device by device and cut short once one device alone is CUT_SHORT_AT x the round's fastest plan so far
(dreamshard.evaluation.cut_short), and dropped: it is behind beyond any round's noise, and its other devices are
never timed.

Keeping (`keep_index`): each contender's score is its paired ratio to the race's final leader over the rounds both
were measured; the kept one is the lowest score among those that may replace the default (index 0): the default
itself, a baseline's own plan ahead of it with SWITCH_CONFIDENCE (the gate's paired interval), or a challenger that
beat the default by its margin in every round both were measured, at least MIN_ROUNDS_TO_DROP rounds either way. So
no baseline it measured was ahead of the kept plan's default beyond the noise and left behind for a slower plan.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING

from dreamshard.evaluation.cut_short import CUT_SHORT_AT, measure_until
from dreamshard.evaluation.interleave import Measurer, measure_interleaved, measure_plan
from dreamshard.gate.bounds import ratio_bound
from dreamshard.values import Inventory, Measurement, Plan
from dreamshard.values.progress import Progress

if TYPE_CHECKING:  # pragma: no cover
    from dreamshard.profiling.oracle import Oracle

#: the least paired rounds before a contender can be dropped: one round says nothing of the noise
MIN_ROUNDS_TO_DROP = 2
#: out of time, the race still measures the default and the CONFIRM_AHEAD contenders the rounds put ahead of it
#: for CONFIRM_ROUNDS rounds in all: one round cannot tell a faster plan from noise, so none replaces the default on it
CONFIRM_ROUNDS = 3
CONFIRM_AHEAD = 2
#: the confidence with which a contender must be ahead of the default to replace it (the gate's paired interval)
SWITCH_CONFIDENCE = 0.95


def overall(samples: Sequence[Measurement]) -> list[float]:
    """A contender's overall cost per round measured."""
    return [m.overall_ms for m in samples]


def paired(a: Sequence[float], b: Sequence[float]) -> tuple[list[float], list[float]]:
    """The rounds both were measured (a contender dropped early has its first rounds), both positive."""
    pairs = [(x, y) for x, y in zip(a, b, strict=False) if x > 0 and y > 0]
    return [x for x, _ in pairs], [y for _, y in pairs]


def behind(contender: Sequence[float], leader: Sequence[float], confidence: float) -> bool:
    """Whether `contender` is slower than `leader` beyond the noise: over at least MIN_ROUNDS_TO_DROP paired rounds,
    the lower end of the `confidence` interval of contender / leader is above 1."""
    a, b = paired(contender, leader)
    return len(a) >= MIN_ROUNDS_TO_DROP and ratio_bound(a, b, confidence).low > 1.0


def leader_of(per_round: Sequence[Sequence[float]]) -> int:
    """The leader: of the contenders measured in the most rounds, the lowest median (ties: the first)."""
    most = max(len(r) for r in per_round)
    return min(
        (i for i, r in enumerate(per_round) if len(r) == most), key=lambda i: (statistics.median(per_round[i]), i)
    )


def score(contender: Sequence[float], leader: Sequence[float]) -> float:
    """contender / leader: the median of their paired rounds (1.0 when nothing pairs)."""
    a, b = paired(contender, leader)
    return statistics.median(x / y for x, y in zip(a, b, strict=True)) if a else 1.0


def beat_every_round(challenger: Sequence[float], default: Sequence[float], margin: float) -> bool:
    """Faster than the default by at least `margin` in every round both were measured (and at least one)."""
    a, b = paired(challenger, default)
    return bool(a) and all(x < y * (1.0 - margin) for x, y in zip(a, b, strict=True))


def may_replace(challenger: Sequence[float], default: Sequence[float], margin: float) -> bool:
    """Whether a contender may replace the default: over at least MIN_ROUNDS_TO_DROP paired rounds, a baseline's
    own plan (margin 0) ahead of it with SWITCH_CONFIDENCE (the default behind it: `behind`), a challenger of the
    search's faster by its margin in every round. One round is never enough: its lead may be the noise's."""
    a, b = paired(challenger, default)
    if len(a) < MIN_ROUNDS_TO_DROP:
        return False
    return behind(b, a, SWITCH_CONFIDENCE) if margin == 0 else beat_every_round(a, b, margin)


def keep_index(per_round: Sequence[Sequence[float]], margins: Sequence[float]) -> int:
    """The contender to keep (module docstring): the lowest score to the final leader among the default (index 0)
    and the contenders that may replace it (`may_replace`); ties go to the default, then to the first."""
    return kept_of(per_round, margins, scores_to_leader(per_round))


def kept_of(per_round: Sequence[Sequence[float]], margins: Sequence[float], scores: Sequence[float]) -> int:
    """The lowest of `scores` among the default (index 0) and the contenders that may replace it (`may_replace`);
    ties go to the default, then to the first. The keep rule's one choice, whatever the scores are made of."""
    eligible = [i for i in range(len(per_round)) if i == 0 or may_replace(per_round[i], per_round[0], margins[i])]
    return min(eligible, key=lambda i: (scores[i], i))


def confirming(per_round: Sequence[Sequence[float]], left: Sequence[int], margins: Sequence[float] = ()) -> list[int]:
    """Out of time after round r < CONFIRM_ROUNDS: the default (index 0) and the CONFIRM_AHEAD contenders still in
    whose paired rounds put them furthest ahead of it; none when nothing is ahead (the default stays). Ahead means
    by more than the contender's margin (`margins`, none: 0): a challenger that must beat the default by its margin
    in every round and did not in these cannot replace it, and confirming it would only spend time."""
    margin = list(margins) or [0.0] * len(per_round)
    ahead = [(score(per_round[i], per_round[0]), i) for i in left if i != 0]
    best = sorted((s, i) for s, i in ahead if s < 1.0 - margin[i])[:CONFIRM_AHEAD]
    return [0, *(i for _, i in best)] if best else []


def scores_to_leader(per_round: Sequence[Sequence[float]]) -> list[float]:
    """Each contender's score: its paired ratio to the final leader (`leader_of`; the leader's own: 1.0)."""
    lead = leader_of(per_round)
    return [score(r, per_round[lead]) for r in per_round]


def race(
    inventory: Inventory,
    plans: Sequence[Plan],
    oracle: Oracle,
    rounds: int,
    *,
    labels: Sequence[str] = (),
    confidence: float = 0.95,
    protect: Collection[int] = (),
    margins: Sequence[float] = (),
    cut_short: set[int] | None = None,
    out_of_time: Callable[[], bool] = lambda: False,
    seed: int = 0,
    round_inventories: Sequence[Inventory] = (),
    progress: Progress | None = None,
) -> list[list[Measurement]]:
    """Race `plans` for up to `rounds` interleaved rounds (module docstring); the measurements of each, in plan order
    (one dropped early has fewer). `labels` name the contenders in the progress lines and to the oracle (default:
    each plan's sharder); `protect`: contenders never dropped (a re-plan's current plan: the duel needs it).
    `margins`: each contender's margin over the default (`Contender.margin`; none: 0), what confirmation asks of
    it (`confirming`). `cut_short`: filled with the contenders cut short (their figure a lower bound).
    `round_inventories`: round r measures on `round_inventories[r % len]` (the id distributions assumed for tables
    without statistics). `progress` gets a line per measurement ("round 2/5: measuring heuristic:dim_greedy") and
    one per round ("round 2/5: 4 left: ...", "round 2/5: dropped random: 1.31x the leader lpt+search"). The race
    ends when one contender is left, or only those in `protect`."""
    cut_short = set() if cut_short is None else cut_short
    names = list(labels) or [p.sharder for p in plans]
    if len(names) != len(plans):
        raise ValueError(f"{len(names)} labels for {len(plans)} plans")
    say = progress or (lambda _msg: None)
    rounds = max(1, rounds)
    total = max(rounds, CONFIRM_ROUNDS)  # the field's rounds, then what confirmation may add
    measured = [p.model_copy(update={"sharder": name}) for p, name in zip(plans, names, strict=True)]

    def narrow(samples: list[list[Measurement]]) -> list[int]:
        per_round = [overall(s) for s in samples]
        r = max(len(s) for s in per_round)
        alive = [i for i, s in enumerate(per_round) if len(s) == r]
        lead = leader_of(per_round)
        cut = [i for i in alive if i in cut_short]
        for i in cut:
            say(f"round {r}/{total}: dropped {names[i]}: cut short, a device alone over {CUT_SHORT_AT:g}x the fastest")
        out = [i for i in alive if i != lead and i not in protect and behind(per_round[i], per_round[lead], confidence)]
        for i in out:
            ratio = score(per_round[i], per_round[lead])
            say(f"round {r}/{total}: dropped {names[i]}: {ratio:.3f}x the leader {names[lead]}")
        out += [i for i in cut if i not in out]
        left = [i for i in alive if i not in out]
        # decided; where rounds cycle through id distributions, once each was measured
        if (len(left) <= 1 or all(i in protect for i in left)) and r >= len(round_inventories):
            return []
        spent = r >= rounds
        if spent or out_of_time():
            why = "the race's rounds are done" if spent else "out of time"
            confirm = confirming(per_round, left, margins) if r < CONFIRM_ROUNDS else []
            if not confirm:
                if not spent:
                    say(f"round {r}/{total}: out of time with {len(left)} left")
                return []
            say(
                f"round {r}/{total}: {why}: confirming {', '.join(names[i] for i in confirm[1:])} against "
                f"{names[0]} to round {CONFIRM_ROUNDS}"
            )
            return confirm
        say(f"round {r}/{total}: {len(left)} left: {', '.join(names[i] for i in left)}")
        return left

    return measure_interleaved(
        inventory,
        measured,
        oracle,
        total,
        seed=seed,
        progress=say,
        narrow=narrow,
        round_inventories=round_inventories,
        measurer=cutting(oracle, protect, cut_short),
    )


def cutting(oracle: Oracle, protect: Collection[int], cut: set[int]) -> Measurer:
    """How the race measures: a protected contender, or the round's first, whole; on a timed backend any other cut
    short once one of its devices alone is CUT_SHORT_AT x the round's fastest (dreamshard.evaluation.cut_short),
    its index added to `cut`. A simulated backend's figures are exact and cost nothing to finish: whole."""
    timed = not oracle.info.is_simulated

    def measure(i: int, on: Inventory, plan: Plan, fastest: float | None) -> Measurement:
        if i in protect or fastest is None or not timed:
            return measure_plan(on, plan, oracle)
        m, was_cut = measure_until(on, plan, oracle, fastest * CUT_SHORT_AT)
        if was_cut:
            cut.add(i)
        return m

    return measure
