"""Verify (`plan --verify K`): the plan stage's race (docs/architecture/learning.md, "The race").

The contenders (dreamshard.measured.contenders: the search-only plan, the K best predicted candidates, every
heuristic's own plan and TorchRec's) race on the backend (dreamshard.measured.race): measured interleaved, a contender
behind the leader beyond the noise measured no more, and the best measured kept. A challenger the search made must
beat the default (the search-only plan) by `MEASURED_GAIN_MARGIN` in every round; a baseline's own plan needs only to
be faster, so the kept plan is never slower than a baseline the race measured. The plan keeps the kept contender's
measured costs and a `Verification` record of every contender's rounds, of the baselines not measured and why, and
of the kept plan against the search-only plan (`kept_vs_search`) and the fastest baseline (`kept_vs_baseline`).

In a re-plan the default is the current plan's candidate: a challenger that won every round must go on winning a
duel with it until chance alone would explain its run less often than `plan.verify_confidence` allows
(`rounds_to_replace`), so inside the noise the job's tables stay where they are.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from dreamshard.evaluation.interleave import check_plan_for, measure_interleaved, median_costs
from dreamshard.measured.contenders import HEURISTIC, SEARCH_ONLY, TORCHREC, Contender, Contenders
from dreamshard.measured.duel import MEASURED_GAIN_MARGIN
from dreamshard.measured.race import beat_every_round, keep_index, overall, race, scores_to_leader
from dreamshard.values import Inventory, Measurement, Plan, Verification, VerifiedCandidate
from dreamshard.values.progress import Progress, prefixed

if TYPE_CHECKING:  # pragma: no cover
    from dreamshard.profiling import Oracle

#: interleaved rounds of the race at most, by default
VERIFY_ROUNDS = 5

__all__ = ["HEURISTIC", "SEARCH_ONLY", "TORCHREC", "VERIFY_ROUNDS", "verify_candidates"]


def paired_ratio(a: Sequence[float], b: Sequence[float]) -> float:
    """a / b as the median of their paired rounds (round i of each was measured in the same interleaved round; a
    plan dropped early pairs its first rounds). 1.0 when nothing pairs."""
    ratios = [x / y for x, y in zip(a, b, strict=False) if y > 0]
    return statistics.median(ratios) if ratios else 1.0


def kept_index(
    per_round: Sequence[Sequence[float]], medians: Sequence[float], margins: Sequence[float] | None = None
) -> int:
    """Of two or more plans measured whole (dreamshard.measured.stage), which to keep: the first (index 0) unless
    another one was faster than it in every interleaved round (paired) by its margin (default
    `MEASURED_GAIN_MARGIN`), then the fastest median of those."""
    m = margins if margins is not None else [MEASURED_GAIN_MARGIN] * len(per_round)
    confirmed = [i for i in range(1, len(per_round)) if won_every_round(per_round[i], per_round[0], m[i])]
    return min(confirmed, key=lambda i: (medians[i], i)) if confirmed else 0


def won_every_round(challenger: Sequence[float], default: Sequence[float], margin: float) -> bool:
    """Measured in every round the default was, and faster than it in each (paired by round) by at least
    `margin`."""
    return len(challenger) == len(default) and beat_every_round(challenger, default, margin)


def challengers(samples: Sequence[Sequence[Measurement]], margins: Sequence[float] | None = None) -> list[int]:
    """For `measure_interleaved(narrow=...)`: who the next round measures. A challenger (index >= 1) that was not
    faster than the first plan in every round so far can no longer be kept (`kept_index`), so it is dropped; the
    first is measured while any challenger is left ([]: none is, the measuring ends)."""
    best = overall(samples[0])
    m = margins if margins is not None else [MEASURED_GAIN_MARGIN] * len(samples)
    left = [i for i in range(1, len(samples)) if won_every_round(overall(samples[i]), best, m[i])]
    return [0, *left] if left else []


def rounds_to_replace(challengers: int, confidence: float) -> int:
    """Paired rounds a challenger must win, every one, before it replaces a default that is worth keeping (the
    current plan's candidate: replacing it reshards the job). With no real difference each paired round is a coin
    toss, so some of `challengers` candidates wins n straight rounds by chance with probability at most
    challengers x 2^-n (Bonferroni); the smallest n that keeps that under 1 - confidence. 3 rounds alone let one of
    4 equal challengers through 41% of the time; 7 rounds (5 challengers, 95%) 3.9%."""
    return max(1, math.ceil(math.log2(max(1, challengers) / (1.0 - confidence)) - 1e-9))


def _duel_with_default(
    inventory: Inventory,
    plans: Sequence[Plan],
    measured: list[list[Measurement]],
    best: int,
    need: int,
    oracle: Oracle,
    seed: int,
    margin: float = 0.0,
    progress: Progress | None = None,
) -> int:
    """More paired rounds of the default (0) and the confirmed challenger `best` until it has won `need` in all or
    lost one (then the default stays), each by `margin`; the rounds join `measured`. Returns the index kept."""
    more = need - len(measured[best])
    if more > 0:
        duel = measure_interleaved(
            inventory,
            [plans[0], plans[best]],
            oracle,
            more,
            seed=seed + 1,
            narrow=partial(challengers, margins=[0.0, margin]),
            progress=prefixed(progress, "duel: "),
        )
        measured[0] += duel[0]
        measured[best] += duel[1]
    won = won_every_round(overall(measured[best]), overall(measured[0]), margin)
    return best if won and len(measured[best]) >= need else 0


def held_index(
    inventory: Inventory,
    plans: Sequence[Plan],
    measured: list[list[Measurement]],
    margins: Sequence[float],
    oracle: Oracle,
    confidence: float,
    seed: int,
    progress: Progress | None = None,
) -> int:
    """A re-plan's keep rule: the current plan's candidate (index 0) unless a challenger won every round against it
    by its margin and then the duel (`rounds_to_replace` straight wins over all the challengers raced)."""
    per_round = [overall(m) for m in measured]
    scores = scores_to_leader(per_round)
    won = [i for i in range(1, len(plans)) if won_every_round(per_round[i], per_round[0], margins[i])]
    if not won:
        return 0
    best = min(won, key=lambda i: (scores[i], i))
    need = rounds_to_replace(len(plans) - 1, confidence)
    return _duel_with_default(inventory, plans, measured, best, need, oracle, seed, margins[best], progress)


def verified_row(
    contender: Contender, samples: Sequence[Measurement], kept: bool = False, cut_short: bool = False
) -> VerifiedCandidate:
    """A contender's record: its prediction, the median and spread of its measured rounds, its role, whether the race
    cut it short."""
    ms = overall(samples)
    med = statistics.median(ms)
    return VerifiedCandidate(
        source=contender.source,
        predicted_ms=contender.predicted_ms,
        measured_ms=med,
        spread=(max(ms) - min(ms)) / med if med > 0 else 0.0,
        rounds=len(ms),
        role=contender.role,
        kept=kept,
        cut_short=cut_short,
    )


def race_fields(
    field: Contenders, measured: Sequence[Sequence[Measurement]], scores: Sequence[float], kept: int
) -> dict[str, Any]:
    """The Verification fields that state the kept plan against the search-only plan and the fastest baseline
    measured (both paired)."""
    items, s = field.items, field.search_only
    ratio = paired_ratio(overall(measured[kept]), overall(measured[s]))
    out: dict[str, Any] = {
        "search_only": items[s].source,
        "search_only_ms": statistics.median(overall(measured[s])),
        "kept_vs_search": ratio,
        "stage_vs_search": ratio,
        "not_measured": dict(field.not_measured),
    }
    baselines = [i for i, c in enumerate(items) if c.baseline]
    if baselines:
        b = min(baselines, key=lambda i: (scores[i], i))
        out |= {"best_baseline": items[b].label, "kept_vs_baseline": scores[kept] / scores[b]}
    return out


#: How the kept contender is chosen from the rounds: (per-round overall costs, margins) -> (index, scores)
KeepRule = Callable[[Sequence[Sequence[float]], Sequence[float]], tuple[int, list[float]]]


def best_measured(per_round: Sequence[Sequence[float]], margins: Sequence[float]) -> tuple[int, list[float]]:
    """The race's keep rule on one id distribution (dreamshard.measured.race.keep_index) and the scores."""
    return keep_index(per_round, margins), scores_to_leader(per_round)


def verify_candidates(
    inventory: Inventory,
    field: Contenders,
    oracle: Oracle,
    rounds: int = VERIFY_ROUNDS,
    seed: int = 0,
    confidence: float = 0.95,
    out_of_time: Callable[[], bool] = lambda: False,
    progress: Progress | None = None,
    round_inventories: Sequence[Inventory] = (),
    keep: KeepRule = best_measured,
) -> tuple[Plan, list[list[Measurement]]]:
    """Race `field` for up to `rounds` rounds (dreamshard.measured.race) and return the kept contender's plan (with
    its measured costs: the round at its median, and the Verification record) and every contender's measurements.
    `keep` chooses from the rounds (`best_measured`; without statistics: dreamshard.measured.robust_verify); in a
    re-plan (`field.hold`) the current plan's candidate stays unless a challenger wins the duel (`held_index`).
    `round_inventories`: round r measures on `round_inventories[r % len]`."""
    items = field.items
    if not items:
        raise ValueError("verify_candidates needs at least one contender")
    for c in items:
        check_plan_for(inventory, c.plan)
    labels = [c.label for c in items]
    margins = [c.margin for c in items]
    cut: set[int] = set()
    measured = race(
        inventory,
        [c.plan for c in items],
        oracle,
        rounds,
        labels=labels,
        confidence=confidence,
        protect=(0,),  # the default: what a challenger must beat in every round (and a re-plan's duel)
        margins=margins,
        cut_short=cut,
        out_of_time=out_of_time,
        seed=seed,
        round_inventories=round_inventories,
        progress=progress,
    )
    best, scores = keep([overall(m) for m in measured], margins)
    if field.hold:
        plans = [c.plan.model_copy(update={"sharder": label}) for c, label in zip(items, labels, strict=True)]
        best = held_index(inventory, plans, measured, margins, oracle, confidence, seed, progress)
        scores = scores_to_leader([overall(m) for m in measured])
    rows = [verified_row(c, ms, i == best, i in cut) for i, (c, ms) in enumerate(zip(items, measured, strict=True))]
    if progress is not None:
        progress(f"kept {labels[best]} after {max(len(m) for m in measured)} round(s)")
    at_median = min(measured[best], key=lambda m: abs(m.overall_ms - rows[best].measured_ms))
    info = oracle.info
    record = Verification(
        backend=info,
        rounds=max(len(m) for m in measured),  # the field's rounds, or the confirmation's (dreamshard.measured.race)
        candidates=tuple(rows),
        chosen=items[best].source,
        **race_fields(field, measured, scores, best),
    )
    kept = items[best].plan.model_copy(
        update={"measured": median_costs([at_median]), "measured_by": info, "verification": record}
    )
    return kept, measured
