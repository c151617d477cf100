"""Verify (`plan --verify K`): the K best predicted candidates measured on the backend, interleaved, and the best
predicted kept unless the hardware confirms another (docs/architecture/learning.md, "Learning").

Anchors (`plan.verify_anchors`: the best predicted baselines' or LPT's plans) join when the K hold none. Another
candidate replaces the best predicted only when it was faster in every round (`kept_index`); one that loses a round
is measured no more (`challengers`). When the first candidate is the current plan's (a re-plan), a confirmed
challenger must go on winning a duel with it until chance alone would explain its run less often than
`plan.verify_confidence` allows (`rounds_to_replace`). The plan keeps the kept candidate's measured costs and a
`Verification` record of every candidate's rounds.

The plan stage never loses to what it started from: the search-only plan (the search's best predicted, the plan
without measurement) is the default, and the best predicted heuristic's own plan is measured beside it
(`heuristic_candidate`), so a cost model that misranks cannot keep a plan the hardware says is slower. The record
states the kept plan against the search-only one (`kept_vs_search`, paired rounds).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from dreamshard.evaluation.compare import BASELINE_SHARDERS, check_plan_for, measure_interleaved, median_costs
from dreamshard.measured.duel import MEASURED_GAIN_MARGIN
from dreamshard.values import Inventory, Measurement, Plan, Topology, Verification, VerifiedCandidate
from dreamshard.values.progress import Progress, prefixed
from dreamshard.values.search_result import CURRENT, UNCALIBRATED, Candidate, origin

if TYPE_CHECKING:  # pragma: no cover
    from dreamshard.profiling import Oracle

#: interleaved rounds per verified candidate by default
VERIFY_ROUNDS = 3


#: `VerifiedCandidate.role` of the search's best predicted candidate and of the best heuristic's plan
SEARCH_ONLY, HEURISTIC = "search only", "heuristic"


#: Candidate sources that do not come out of the search's ranking: the baselines' own plans and the learned LPT
#: (longest first on predicted single-table costs, which the plan-level prediction can misrank).
ANCHOR_SOURCES = frozenset((*BASELINE_SHARDERS, "lpt"))


def anchor_candidates(candidates: Sequence[Candidate], k: int, anchors: int) -> list[Candidate]:
    """The `anchors` best predicted of the anchor candidates (ANCHOR_SOURCES, not improved by search), when none
    is among the `k` best predicted: off its training distribution the learned cost can rank the search's plans
    above one that measures faster, and only what is measured can be kept. [] when one of the top k already is an
    anchor."""
    if anchors <= 0 or any(c.source in ANCHOR_SOURCES for c in candidates[:k]):
        return []
    return [c for c in candidates[k:] if c.source in ANCHOR_SOURCES][:anchors]


def heuristic_candidate(candidates: Sequence[Candidate], measured: Sequence[Candidate]) -> list[Candidate]:
    """The best predicted heuristic's own plan (a BASELINE_SHARDERS source, not improved by search), when none of
    `measured` already is one: the planning cost picks which heuristic (none is best on every task), and the
    measurement decides whether the learned plans beat it. [] when there is none or one is measured anyway."""
    if any(c.source in BASELINE_SHARDERS for c in measured):
        return []
    return next(([c] for c in candidates if c.source in BASELINE_SHARDERS), [])


def search_only_candidate(candidates: Sequence[Candidate]) -> Candidate:
    """The plan without measurement: the search's best predicted or, where the cost was calibrated first (a measured
    step, dreamshard.measured.calibrate), the best of the search before calibration (the UNCALIBRATED seed)."""
    return next((c for c in candidates if c.source == UNCALIBRATED), candidates[0])


def to_measure(candidates: Sequence[Candidate], k: int, anchors: int) -> tuple[list[Candidate], Candidate | None]:
    """What `--verify k` measures, the default first: the search-only plan (`search_only_candidate`), the k best
    predicted, the anchors, the best heuristic's own plan (a plan placed as another is measured once); and the current
    plan's candidate (a re-plan), which then leads and is returned. It is the default because a challenger must be
    faster in every round, so inside the noise the job's state stays where it is (as the gate keeps the current
    plan), and replaces it only after a duel long enough that chance could not explain its wins."""
    default = search_only_candidate(candidates)
    top = [*candidates[:k], *anchor_candidates(candidates, k, anchors)]
    top += heuristic_candidate(candidates, top)
    top = [default, *(c for c in top if c is not default and not _same_plan(c, default))]
    mine = next((c for c in candidates if origin(c.source) == CURRENT), None)
    return ([mine, *(c for c in top if c is not mine)] if mine is not None else top), mine


def _same_plan(a: Candidate, b: Candidate) -> bool:
    """Whether two candidates place the same units on the same devices."""
    return a.units is None and b.units is None and a.placement == b.placement


def paired_ratio(a: Sequence[float], b: Sequence[float]) -> float:
    """a / b as the median of their paired rounds (round i of each was measured in the same interleaved round; a
    plan dropped early pairs its first rounds). 1.0 when nothing pairs."""
    ratios = [x / y for x, y in zip(a, b, strict=False) if y > 0]
    return statistics.median(ratios) if ratios else 1.0


def kept_index(
    per_round: Sequence[Sequence[float]], medians: Sequence[float], margins: Sequence[float] | None = None
) -> int:
    """Which measured candidate to keep: the best predicted (index 0) unless another one was faster than it in
    every interleaved round (paired by round, as refinement keeps a move), then the fastest median of those.
    A lower median alone is not enough: a few noisy rounds on a shared machine rank near-equal plans at random.
    `margins`: the gain each candidate must show in every round (default `MEASURED_GAIN_MARGIN`; `margins_for`)."""
    m = margins if margins is not None else [MEASURED_GAIN_MARGIN] * len(per_round)
    confirmed = [i for i in range(1, len(per_round)) if won_every_round(per_round[i], per_round[0], m[i])]
    return min(confirmed, key=lambda i: (medians[i], i)) if confirmed else 0


def won_every_round(challenger: Sequence[float], best_predicted: Sequence[float], margin: float) -> bool:
    """Measured in every round the best predicted was, and faster than it in each (paired by round) by at least
    `margin`."""
    return len(challenger) == len(best_predicted) and all(
        c < b * (1.0 - margin) for c, b in zip(challenger, best_predicted, strict=True)
    )


def margins_for(candidates: Sequence[Candidate]) -> list[float]:
    """The gain each candidate must show to be kept: `MEASURED_GAIN_MARGIN`, except a baseline's own plan, which
    needs only to be faster: the gate compares the plan with those very baselines on the same measurement, so a
    plan stage that kept a slower plan beside a measured-faster baseline would only hand the gate a rejection."""
    return [0.0 if c.source in BASELINE_SHARDERS else MEASURED_GAIN_MARGIN for c in candidates]


def challengers(samples: Sequence[Sequence[Measurement]], margins: Sequence[float] | None = None) -> list[int]:
    """For `measure_interleaved(narrow=...)`: who the next round measures. A challenger (index >= 1) that was not
    faster than the best predicted (index 0) in every round so far can no longer be kept (`kept_index`), so it is
    dropped; the best predicted is measured while any challenger is left ([]: none is, the measuring ends)."""
    best = [m.overall_ms for m in samples[0]]
    m = margins if margins is not None else [MEASURED_GAIN_MARGIN] * len(samples)
    left = [i for i in range(1, len(samples)) if won_every_round([m_.overall_ms for m_ in samples[i]], best, m[i])]
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
    if more <= 0:
        return best
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
    won = won_every_round([m.overall_ms for m in measured[best]], [m.overall_ms for m in measured[0]], margin)
    return best if won and len(measured[best]) >= need else 0


def verified_row(candidate: Candidate, samples: Sequence[Measurement], role: str | None = None) -> VerifiedCandidate:
    """A verified candidate's record: its prediction, the median and spread of its measured rounds, and its role
    (SEARCH_ONLY, HEURISTIC for a baseline's own plan, else None)."""
    overall = [m.overall_ms for m in samples]
    med = statistics.median(overall)
    return VerifiedCandidate(
        source=candidate.source,
        predicted_ms=candidate.predicted_ms,
        measured_ms=med,
        spread=(max(overall) - min(overall)) / med if med > 0 else 0.0,
        rounds=len(overall),
        role=role or (HEURISTIC if candidate.source in BASELINE_SHARDERS else None),
    )


def search_only_fields(
    candidates: Sequence[Candidate], measured: Sequence[Sequence[Measurement]], search_only: int | None, kept: int
) -> dict[str, Any]:
    """The Verification fields that state the kept plan against the search-only plan (index `search_only`; None:
    not measured, no fields)."""
    if search_only is None:
        return {}
    ratio = paired_ratio(
        [m.overall_ms for m in measured[kept]],
        [m.overall_ms for m in measured[search_only]],
    )
    return {
        "search_only": candidates[search_only].source,
        "search_only_ms": statistics.median(m.overall_ms for m in measured[search_only]),
        "kept_vs_search": ratio,
        "stage_vs_search": ratio,
    }


def verify_candidates(
    inventory: Inventory,
    topology: Topology,
    candidates: Sequence[Candidate],
    plans: Sequence[Plan],
    oracle: Oracle,
    rounds: int = VERIFY_ROUNDS,
    seed: int = 0,
    hold: float | None = None,
    search_only: int | None = 0,
    progress: Progress | None = None,
) -> tuple[Plan, Verification]:
    """Measure `plans` (one per candidate, best predicted first) interleaved for `rounds` rounds; return the kept
    plan (`kept_index`: the best predicted unless the hardware confirms another, with its measured costs) and the
    Verification record. With `hold` (a confidence: the first plan is the current plan's candidate), a challenger
    that won every round is measured against it further, and replaces it only after `rounds_to_replace` straight
    wins: inside the noise the job's tables stay where they are. `search_only`: the index of the search's best
    predicted candidate (None: none of them), labelled and stated against the kept plan. `progress` gets a line per
    measurement (dreamshard.values.progress)."""
    if not plans or len(plans) != len(candidates):
        raise ValueError("verify_candidates needs one plan per candidate")
    for plan in plans:
        check_plan_for(inventory, plan)
    margins = margins_for(candidates)
    measured = measure_interleaved(
        inventory,
        plans,
        oracle,
        max(1, rounds),
        seed=seed,
        narrow=partial(challengers, margins=margins),
        progress=progress,
    )
    best = kept_index(
        [[m.overall_ms for m in ms] for ms in measured],
        [statistics.median(m.overall_ms for m in ms) for ms in measured],
        margins,
    )
    if hold is not None and best != 0:
        need = rounds_to_replace(len(plans) - 1, hold)
        best = _duel_with_default(inventory, plans, measured, best, need, oracle, seed, margins[best], progress)
    roles = [SEARCH_ONLY if i == search_only else None for i in range(len(candidates))]
    rows = [verified_row(cand, ms, role) for cand, ms, role in zip(candidates, measured, roles, strict=True)]
    medians = [r.measured_ms for r in rows]
    # the kept plan's measured costs: the round whose overall is its median (a real measurement, not a mix)
    at_median = min(measured[best], key=lambda m: abs(m.overall_ms - medians[best]))
    info = oracle.info
    kept = plans[best].model_copy(update={"measured": median_costs([at_median]), "measured_by": info})
    record = Verification(
        backend=info,
        rounds=max(1, rounds),
        candidates=tuple(rows),
        chosen=candidates[best].source,
        **search_only_fields(candidates, measured, search_only, best),
    )
    return kept.model_copy(update={"verification": record}), record
