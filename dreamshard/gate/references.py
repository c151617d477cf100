"""Required baselines that cannot honour a constraint, never silently absent (docs/architecture/gate.md, "The publish
gate"): TorchRec's planner cannot be asked a device pin or a shard count, and may not offer a sharding type a
team asks for on these devices. The gate accepts its absence (recomputed: `checks.verify_comparison`), and shows
its plan of what it can express, measured in the same rounds (`Comparison.broken_results`), labelled beside the
decision: a reference, never a contender."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from dreamshard.evaluation import Comparison
from dreamshard.values.decision import BaselineReference


def baseline_references(
    comparison: Comparison, infeasible: Mapping[str, str], required: Sequence[str], plan_ms: float
) -> tuple[BaselineReference, ...]:
    """One reference per required baseline whose plan breaks a constraint (the comparison's `breaks_constraints`,
    else the gate's own recomputation in `infeasible` when it names a constraint), with its expressible plan's
    median and the judged plan's ratio to it when the comparison measured one."""
    out: list[BaselineReference] = []
    for name in required:
        breaks = comparison.breaks_constraints.get(name) or _constraint_of(infeasible.get(name, ""))
        if not breaks:
            continue
        row = next((r for r in comparison.broken_results if r.sharder == name), None)
        ms = statistics.median(row.samples_ms) if row is not None and row.samples_ms else None
        ratio = plan_ms / ms if ms else None
        out.append(BaselineReference(name=name, breaks=breaks, overall_ms=ms, ratio=ratio))
    return tuple(out)


def _constraint_of(why: str) -> str:
    """The "table 'x' <constraint>" part of a BrokenConstraintError's line ("" when `why` names none)."""
    marker = "breaks its constraint "
    if marker not in why:
        return ""
    head, _, rest = why.partition(marker)
    table = head[head.find("table ") :].strip() if "table " in head else ""
    return f"{table} {rest}".strip()
