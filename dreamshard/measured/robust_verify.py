"""Verification under more than one id distribution (docs/architecture.md, "Planning without statistics"): where
tables declare no access statistics, the verified candidates are measured interleaved under each assumed
distribution (dreamshard.search.unknown_stats), and the one with the least worst-case measured regret is kept."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING

from dreamshard.evaluation.compare import check_plan_for, measure_interleaved, median_costs
from dreamshard.inventory.histogram import ASSUMED_ZIPF_EXPONENT
from dreamshard.measured.candidates import SEARCH_ONLY, search_only_fields, verified_row
from dreamshard.search.candidates import Candidate
from dreamshard.search.unknown_stats import assumed_variant, regrets
from dreamshard.values import AccessAssumptions, Inventory, Plan, Verification

if TYPE_CHECKING:  # pragma: no cover
    from dreamshard.profiling.oracle import Oracle


def verify_robust(
    inventory: Inventory,
    candidates: Sequence[Candidate],
    plans: Sequence[Plan],
    oracle: Oracle,
    assumptions: AccessAssumptions,
    rounds: int,
    seed: int = 0,
    search_only: int | None = 0,
) -> Plan:
    """Measure `plans` under each of `assumptions.skews` (`rounds` interleaved rounds each); keep the plan with the
    least worst measured regret (ties: the best predicted first), with its measured costs and the Verification
    record under the skew closest to the default assumption (the search-only candidate, index `search_only`,
    labelled and stated against the kept plan there), and the measured assumptions."""
    for plan in plans:
        check_plan_for(inventory, plan)
    per_skew = [
        measure_interleaved(assumed_variant(inventory, s), plans, oracle, max(1, rounds), seed=seed)
        for s in assumptions.skews
    ]
    medians = [[statistics.median(m.overall_ms for m in ms[i]) for ms in per_skew] for i in range(len(plans))]
    worst = regrets(medians)
    best = min(range(len(plans)), key=lambda i: (round(worst[i], 6), i))
    ref = min(range(len(assumptions.skews)), key=lambda v: abs(assumptions.skews[v] - ASSUMED_ZIPF_EXPONENT))
    samples = per_skew[ref][best]
    at_median = min(samples, key=lambda m: abs(m.overall_ms - medians[best][ref]))
    info = oracle.info
    record = Verification(
        backend=info,
        rounds=max(1, rounds),
        candidates=tuple(
            verified_row(c, ms, SEARCH_ONLY if i == search_only else None)
            for i, (c, ms) in enumerate(zip(candidates, per_skew[ref], strict=True))
        ),
        chosen=candidates[best].source,
        **search_only_fields(candidates, per_skew[ref], search_only, best),
    )
    measured = assumptions.model_copy(
        update={
            "measured_regret": max(1.0, worst[best]),
            "measured_ms": {f"{s:g}": medians[best][v] for v, s in enumerate(assumptions.skews)},
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
