"""The limit a plan can approach ("x limit"), from what a comparison measured (docs/architecture/measuring.md,
"Evaluation"), and where each contender's cost above it goes.

The reference LB (dreamshard.evaluation.bounds) adds up the tables' costs alone; on a measuring backend fused
operators do not add up (the working set of many tables costs more than the sum of each alone), so every plan lands
far above LB and nobody can tell how much is left to gain. The limit is built from measurements instead:

- the **fixed cost** f: the compute of a device that holds nothing worth computing (the empty step: one 1-row,
  4-column table with no lookups, `bounds.EMPTY_STEP`), which every device that holds anything pays;
- the **fused compute**: for each measured plan P, the median over its rounds of its devices' summed compute F_P,
  on U_P devices that hold anything; the cheapest of them, less the fixed cost of its devices, shared evenly by
  the D devices (`even_compute`); its ratio to the tables' own compute above the fixed cost (each table alone) is
  the **fusion ratio** (below 1: fusing shares work; above 1: the combined working set costs extra);
- the **exchange**: the least fwd + bwd exchange the average device pays at the world's pace
  (`LowerBound.comm_ms`: the all-to-all fit the plans are measured with, every sharding type's collective);
- the costliest table's smallest share alone (`LowerBound.max_single_ms`), which some device must hold.

limit = max(costliest share alone, f + cheapest fused compute above f / D + least exchange). Every measured plan
costs at least its own even share (its bottleneck device costs at least the mean of its devices in every round), so
no measured plan is below the limit. For plans not measured it is a lower bound under two assumptions: no placement
fuses the tables cheaper than the cheapest-fusing measured plan, and every device that holds anything computes at
least the empty step. A plan at the limit is perfectly balanced, fuses as well as the best measured plan, and
exchanges no more than the least any plan must; a contender's distance to it splits exactly into those three
parts and the rounds' noise (`Gap`).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from dreamshard.evaluation.bounds import LowerBound
from dreamshard.values import Costs, Measurement


class Limit(BaseModel):
    """The limit of a comparison (see the module docstring); all figures in ms."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    fixed_ms: float  # the empty step's compute (fwd + bwd), once per device
    compute_ms: float  # fixed_ms + the cheapest measured fused compute above the fixed cost, shared by D devices
    comm_ms: float  # the least exchange the average device pays (LowerBound.comm_ms)
    max_single_ms: float  # the costliest table's smallest share alone, its exchange included
    fusion_ratio: float  # cheapest fused compute above the fixed cost / the tables' alone above it (0: unknown)
    fused_by: str  # the measured plan whose devices fused cheapest
    total_ms: float  # max(max_single_ms, compute_ms + comm_ms)

    @property
    def even_ms(self) -> float:
        """The even share: the fixed cost, the fused compute and the exchange a perfectly balanced plan pays."""
        return self.compute_ms + self.comm_ms


class Gap(BaseModel):
    """Where a contender's cost above the limit's even share goes (the four parts add up to overall - even)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    noise_ms: float  # the overall (median over rounds of the slowest device) above the slowest device's median
    imbalance_ms: float  # the slowest device's median above the mean of the devices that hold anything
    fusion_ms: float  # the mean device's compute above the limit's (fused less well, or on fewer devices)
    exchange_ms: float  # the mean device's exchange above the least any plan pays


def fused_compute(measurements: Sequence[Measurement]) -> tuple[float, int]:
    """(median over the rounds of a plan's devices' summed compute (fwd + bwd), devices that hold anything)."""
    sums = [sum(d.fwd_compute + d.bwd_compute for d in m.costs.per_device) for m in measurements]
    used = sum(1 for d in measurements[0].costs.per_device if d.total > 0) if measurements else 0
    return (statistics.median(sums) if sums else 0.0), used


def even_compute(fused_ms: float, used: int, fixed_ms: float, devices: int) -> float:
    """The compute a plan whose devices sum to `fused_ms` on `used` of `devices` devices implies for the mean device
    of a plan on all of them: the fixed cost plus the fused compute above the fixed cost of the `used` devices,
    shared by all `devices` (never above the plan's own mean device, fused_ms / used, which its bottleneck pays)."""
    if used <= 0:
        return 0.0
    return min(fused_ms / used, fixed_ms + (fused_ms - used * fixed_ms) / max(1, devices))


def plan_limit(lb: LowerBound, fused: Sequence[tuple[str, float, int]], devices: int) -> Limit | None:
    """The limit from the comparison's measured LowerBound (the empty step's compute, the tables' compute alone
    above it, the least exchange, the costliest share alone) and every measured plan's (label, fused compute,
    devices used) (`fused_compute`); None without a measured plan."""
    fixed = lb.fixed_ms
    plans = [(label, even_compute(f, u, fixed, devices), f, u) for label, f, u in fused if u > 0]
    if not plans:
        return None
    label, compute, f, u = min(plans, key=lambda p: p[1])
    ratio = (f - u * fixed) / lb.variable_ms if lb.variable_ms > 0 and f > u * fixed else 0.0
    return Limit(
        fixed_ms=fixed,
        compute_ms=compute,
        comm_ms=lb.comm_ms,
        max_single_ms=lb.max_single_ms,
        fusion_ratio=ratio,
        fused_by=label,
        total_ms=max(lb.max_single_ms, compute + lb.comm_ms),
    )


def contender_gap(limit: Limit, overall_ms: float, costs: Costs, fused_ms: float, used: int) -> Gap:
    """Where a measured plan's cost above `limit.even_ms` goes: its overall, its per-device medians (`costs`), its
    fused compute (`fused_compute`) on `used` devices."""
    if used <= 0:
        return Gap(noise_ms=0.0, imbalance_ms=0.0, fusion_ms=0.0, exchange_ms=0.0)
    slowest = max(d.total for d in costs.per_device)
    mean_compute = fused_ms / used
    mean_comm = sum(d.fwd_comm + d.bwd_comm for d in costs.per_device) / used
    return Gap(
        noise_ms=overall_ms - slowest,
        imbalance_ms=slowest - mean_compute - mean_comm,
        fusion_ms=mean_compute - limit.compute_ms,
        exchange_ms=mean_comm - limit.comm_ms,
    )
