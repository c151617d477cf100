"""The plan stage never loses to what it started from (docs/architecture/learning.md, "Measured refinement").

Verification keeps the search-only plan unless another candidate was faster in every round
(dreamshard.measured.verify). Refinement keeps a proposal on two devices' timings; a device timed alone is not
the whole plan (an exchange waits for its slowest peer, a cost model can be wrong about what a device pays), so a
refined plan is measured whole against the plan refinement started from, interleaved, and replaces it only when it
was faster in every round (`against_start`); otherwise the start is kept and the trace says so.
dreamshard.values.stage_report states what measurement added to the search-only plan.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

from dreamshard.evaluation.compare import measure_interleaved, median_costs
from dreamshard.measured.verify import challengers, kept_index, paired_ratio
from dreamshard.values import Inventory, Plan, RefineTrace
from dreamshard.values.progress import Progress

if TYPE_CHECKING:  # pragma: no cover
    from dreamshard.profiling.oracle import Oracle


def against_start(
    inventory: Inventory,
    start: Plan,
    refined: Plan,
    trace: RefineTrace,
    oracle: Oracle,
    rounds: int,
    seed: int = 0,
    progress: Progress | None = None,
) -> Plan:
    """`refined` (with its measured costs) when, measured whole and interleaved with `start` for up to `rounds`
    rounds, it was faster in every round; else `start`. Either carries `trace` completed with the check (and the
    verification record's `stage_vs_search` times refined / start when the refined plan is kept). A round the
    refined plan loses ends the check (the start is kept whatever later rounds say)."""
    measured = measure_interleaved(
        inventory, [start, refined], oracle, max(1, rounds), seed=seed, narrow=challengers, progress=progress
    )
    per_round = [[m.overall_ms for m in ms] for ms in measured]
    medians = [statistics.median(r) for r in per_round]
    ratio = paired_ratio(per_round[1], per_round[0])
    keep = kept_index(per_round, medians) == 1
    done = trace.model_copy(
        update={
            "whole_rounds": len(per_round[1]),
            "start_ms": round(medians[0], 6),
            "refined_ms": round(medians[1], 6),
            "vs_start": round(ratio, 6),
            "reverted": not keep,
        }
    )
    if not keep:
        return start.model_copy(update={"refinement": done})
    at_median = min(measured[1], key=lambda m: abs(m.overall_ms - medians[1]))
    v = start.verification
    if v is not None and v.stage_vs_search is not None:
        v = v.model_copy(update={"stage_vs_search": round(v.stage_vs_search * ratio, 6)})
    return refined.model_copy(
        update={
            "verification": v,
            "refinement": done,
            "measured": median_costs([at_median]),
            "measured_by": oracle.info,
        }
    )
