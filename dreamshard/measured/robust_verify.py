"""Verification under more than one id distribution (docs/architecture/learning.md, "Planning without statistics"):
where tables declare no access statistics, the verified candidates are measured interleaved under each assumed
distribution (dreamshard.search.unknown_stats). The search-only plan is kept unless another was confirmed faster
under every distribution (the keep rule of dreamshard.measured.verify); of those, the one with the least
worst-case measured regret. Until 2026-12-05 the least regret by medians alone decided: on a held-out task (ctr-120/8,
59 of 120 tables without statistics) it kept LPT on a median 0.98x the search-only plan over 3 rounds, a gain inside
the noise, and the plan stage measured 1.17x search only by the judge (docs/benchmarks/heldout.md)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING

from dreamshard.evaluation.compare import check_plan_for, measure_interleaved, median_costs
from dreamshard.inventory.histogram import ASSUMED_ZIPF_EXPONENT
from dreamshard.inventory.unknown import assumed_variant, regrets
from dreamshard.measured.verify import (
    SEARCH_ONLY,
    challengers,
    margins_for,
    search_only_fields,
    verified_row,
    won_every_round,
)
from dreamshard.values import AccessAssumptions, Inventory, Measurement, Plan, Verification
from dreamshard.values.progress import Progress, prefixed
from dreamshard.values.search_result import Candidate

if TYPE_CHECKING:  # pragma: no cover
    from dreamshard.profiling.oracle import Oracle


def _overall(samples: Sequence[Measurement]) -> list[float]:
    return [m.overall_ms for m in samples]


def _measure_under_skews(
    inventory: Inventory,
    plans: Sequence[Plan],
    oracle: Oracle,
    skews: Sequence[float],
    order: Sequence[int],
    rounds: int,
    seed: int,
    margins: Sequence[float],
    progress: Progress | None = None,
) -> tuple[dict[int, dict[int, list[Measurement]]], list[int]]:
    """Each skew in `order` measures the default (index 0) and the challengers still confirmed, interleaved; a
    challenger not faster than the default by its margin in every round (`won_every_round`) is measured no more.
    Returns per skew the measurements by plan index, and the challengers confirmed under every skew."""
    alive = list(range(len(plans)))
    per_skew: dict[int, dict[int, list[Measurement]]] = {}
    for v in order:
        measured = measure_interleaved(
            assumed_variant(inventory, skews[v]),
            [plans[i] for i in alive],
            oracle,
            max(1, rounds),
            seed=seed,
            narrow=partial(challengers, margins=[margins[i] for i in alive]),
            progress=prefixed(progress, f"skew {skews[v]:g}: "),
        )
        per_skew[v] = dict(zip(alive, measured, strict=True))
        base = _overall(per_skew[v][0])
        alive = [0, *(i for i in alive[1:] if won_every_round(_overall(per_skew[v][i]), base, margins[i]))]
    return per_skew, alive[1:]


def verify_robust(
    inventory: Inventory,
    candidates: Sequence[Candidate],
    plans: Sequence[Plan],
    oracle: Oracle,
    assumptions: AccessAssumptions,
    rounds: int,
    seed: int = 0,
    search_only: int | None = 0,
    progress: Progress | None = None,
) -> Plan:
    """Measure `plans` (the default, the search-only plan, first) under each of `assumptions.skews` (`rounds`
    interleaved rounds each, the skew closest to the default assumption first). The default is kept unless a
    challenger was faster than it in every round under every skew, by `MEASURED_GAIN_MARGIN` (a baseline's own
    plan: by any amount; `margins_for`), as `verify_candidates` keeps one; of those, the one with the least worst
    measured regret. The plan carries its measured costs, the Verification record under the first skew (every
    candidate measured there; the search-only candidate, index `search_only`, labelled and stated against the kept
    plan) and the measured assumptions (regret among the plans measured under every skew)."""
    for plan in plans:
        check_plan_for(inventory, plan)
    skews = assumptions.skews
    ref = min(range(len(skews)), key=lambda v: abs(skews[v] - ASSUMED_ZIPF_EXPONENT))
    order = [ref, *(v for v in range(len(skews)) if v != ref)]
    per_skew, confirmed = _measure_under_skews(
        inventory, plans, oracle, skews, order, rounds, seed, margins_for(candidates), progress
    )
    held = [0, *confirmed]
    medians = [[statistics.median(_overall(per_skew[v][i])) for v in range(len(skews))] for i in held]
    worst = regrets(medians)
    at = min(range(1, len(held)), key=lambda j: (round(worst[j], 6), j)) if confirmed else 0
    best = held[at]
    samples = per_skew[ref][best]
    at_median = min(samples, key=lambda m: abs(m.overall_ms - medians[at][ref]))
    info = oracle.info
    first = [per_skew[ref][i] for i in range(len(plans))]
    record = Verification(
        backend=info,
        rounds=max(1, rounds),
        candidates=tuple(
            verified_row(c, ms, SEARCH_ONLY if i == search_only else None)
            for i, (c, ms) in enumerate(zip(candidates, first, strict=True))
        ),
        chosen=candidates[best].source,
        **search_only_fields(candidates, first, search_only, best),
    )
    measured = assumptions.model_copy(
        update={
            "measured_regret": max(1.0, worst[at]),
            "measured_ms": {f"{s:g}": medians[at][v] for v, s in enumerate(skews)},
        }
    )
    return plans[best].model_copy(
        update={
            "measured": median_costs([at_median]),
            "measured_by": info,
            "verification": record,
            "assumptions": measured,
        }
    )
