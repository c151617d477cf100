"""What the plan-quality benchmarks (bench/heldout.py, bench/huge_tables.py) read from the judge: each contender
judged, its ratios to the best heuristic and to a fixed baseline, and the oracle's error against the judge.

The oracle's figures stay beside the judge's, labelled "oracle": `oracle_errors` compares a plan's oracle-measured
costs (`Plan.measured`, what `compare_sharders` attaches) and, where the plan has one, the cost model's prediction
(`Plan.predicted`) with the judge's figures for the same plan (`judge_results.prediction_error`).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from judge import Judge
from judge_results import PlanJudgement, prediction_error

from dreamshard.values import Inventory, Plan

#: Components of the oracle-vs-judge error table (judge_results.PredictionError's fields).
ERROR_COMPONENTS = ("compute", "comm", "overall")


def oracle_errors(judged: PlanJudgement, plan: Plan) -> dict[str, dict[str, float]]:
    """{"measured": errors, "predicted": errors} of the oracle's figures the plan carries, against the judge."""
    out: dict[str, dict[str, float]] = {}
    for label, costs in (("measured", plan.measured), ("predicted", plan.predicted)):
        if costs is not None and len(costs.per_device) == len(judged.rounds[0].costs.per_device):
            e = prediction_error(judged, costs)
            out[label] = {k: getattr(e, k) for k in ERROR_COMPONENTS}
    return out


def ratios(ms: Mapping[str, float], heuristics: Sequence[str], fixed: str) -> dict[str, Any]:
    """The best heuristic by `ms` and every contender's ratio to it and to `fixed` (when measured)."""
    present = [h for h in heuristics if h in ms]
    best = min(present, key=lambda h: ms[h]) if present else ""
    return {
        "best_heuristic": best,
        "vs_best": {k: v / ms[best] for k, v in ms.items()} if best else {},
        "vs_fixed": {k: v / ms[fixed] for k, v in ms.items()} if fixed in ms else {},
    }


def judge_contenders(
    judge: Judge, inventory: Inventory, plans: Mapping[str, Plan], heuristics: Sequence[str], fixed: str
) -> dict[str, Any]:
    """Every contender (label -> plan) judged interleaved; the judge's ms, round samples, spread, ratios and the
    oracle's errors against it, by label."""
    labelled = [p.model_copy(update={"plan_id": label}) for label, p in plans.items()]
    result = judge.judge(inventory, labelled)
    by_id = result.by_id()
    ms = {label: by_id[label].overall_ms for label in plans}
    return {
        "ms": ms,
        "samples": {label: by_id[label].samples_ms for label in plans},
        "device_ms": {label: by_id[label].device_median_ms for label in plans},
        "device_min_ms": {label: by_id[label].device_min_ms for label in plans},
        "device_samples": {label: by_id[label].device_samples_ms for label in plans},
        "spread": {label: by_id[label].spread for label in plans},
        "per_device": {label: [d.as_list() for d in by_id[label].costs.per_device] for label in plans},
        "oracle_error": {label: oracle_errors(by_id[label], plan) for label, plan in plans.items()},
        "seconds": result.seconds,
        **ratios(ms, heuristics, fixed),
    }


def _median(xs: list[float]) -> str:
    return f"{statistics.median(xs):+.0%}" if xs else "-"


def error_lines(judged: Sequence[Mapping[str, Any]], names: Sequence[str]) -> list[str]:
    """A markdown table: per contender, the median over tasks of the oracle's error against the judge, per
    component (compute = forward + backward compute, comm = the collectives, on the judge's bottleneck device)."""
    head = " | ".join(f"{src} {c}" for src in ("oracle-measured", "predicted") for c in ERROR_COMPONENTS)
    lines = [
        "Oracle vs judge, (oracle - judge) / judge on the judge's bottleneck device, median over tasks "
        "(oracle-measured: the oracle's measurement of the plan; predicted: the cost model's figure):",
        "",
        f"| contender | {head} |",
        "|---|" + "---:|" * (2 * len(ERROR_COMPONENTS)),
    ]
    for name in names:
        errs = [j["oracle_error"][name] for j in judged if name in j.get("oracle_error", {})]
        cells = [
            _median([e[src][c] for e in errs if src in e])
            for src in ("measured", "predicted")
            for c in ERROR_COMPONENTS
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines
