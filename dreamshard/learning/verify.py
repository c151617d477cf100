"""`plan --verify K`: measure the K best predicted candidates on the backend, keep the best measured.

The search ranks candidates by the learned cost; measuring the top few, interleaved (each round visits them in
a shuffled order, so drift on a shared machine hits all alike) and taking the median per candidate, turns a
prediction into a measured choice at the price of K x rounds measurements. The plan keeps the winner's
measured costs and a `Verification` record of everything measured.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from dreamshard.evaluation.compare import check_plan_for, measure_interleaved, median_costs
from dreamshard.learning.search import Candidate
from dreamshard.types import Inventory, Plan, Topology, VerifiedCandidate, Verification

#: interleaved rounds per verified candidate by default
VERIFY_ROUNDS = 3


def verify_candidates(
    inventory: Inventory,
    topology: Topology,
    candidates: Sequence[Candidate],
    plans: Sequence[Plan],
    oracle: object,
    rounds: int = VERIFY_ROUNDS,
    seed: int = 0,
) -> tuple[Plan, Verification]:
    """Measure `plans` (one per candidate, same order) interleaved for `rounds` rounds; return the best
    measured plan (with its measured costs) and the Verification record."""
    if not plans or len(plans) != len(candidates):
        raise ValueError("verify_candidates needs one plan per candidate")
    for plan in plans:
        check_plan_for(inventory, plan)
    measured = measure_interleaved(inventory, plans, oracle, max(1, rounds), seed=seed)  # type: ignore[arg-type]
    rows: list[VerifiedCandidate] = []
    medians: list[float] = []
    for cand, ms in zip(candidates, measured, strict=True):
        overall = [m.overall_ms for m in ms]
        med = statistics.median(overall)
        medians.append(med)
        rows.append(VerifiedCandidate(source=cand.source, predicted_ms=cand.predicted_ms, measured_ms=med,
                                      spread=(max(overall) - min(overall)) / med if med > 0 else 0.0))
    best = min(range(len(plans)), key=lambda i: (medians[i], i))
    # the kept plan's measured costs: the round whose overall is its median (a real measurement, not a mix)
    at_median = min(measured[best], key=lambda m: abs(m.overall_ms - medians[best]))
    info = oracle.info  # type: ignore[attr-defined]
    kept = plans[best].model_copy(update={"measured": median_costs([at_median]), "measured_by": info})
    record = Verification(backend=info, rounds=max(1, rounds), candidates=tuple(rows),
                          chosen=candidates[best].source)
    return kept.model_copy(update={"verification": record}), record
