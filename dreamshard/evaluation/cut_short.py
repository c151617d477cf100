"""A plan measured device by device, cut short once one device alone is slower than a bound (docs/architecture/
learning.md, "The race").

A plan's step is its slowest device's, so once one device alone has measured slower than a bound, the plan is
slower than the bound whatever its other devices measure. The plan stage's race gives each contender of a round the
bound `CUT_SHORT_AT` x the round's fastest whole plan so far: a heuristic that puts twice the work on one device
is known to be behind after that device, not after all of them. Devices are timed most-expensive first by the
plan's own prediction (a plan without one: the device with the most units first), so a plan that is behind is
usually cut after its first device.

A cut measurement keeps zeros for the devices not timed: its overall (the max of what was timed) is a lower bound
of the plan's, above the bound; `measure_until` says whether it cut (the race records it:
`VerifiedCandidate.cut_short`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from dreamshard.placement.expand import expand_plan
from dreamshard.values import Costs, DeviceCost, Inventory, Measurement, Plan

if TYPE_CHECKING:  # pragma: no cover
    from dreamshard.profiling import Oracle

#: A round's contender is cut short once one of its devices alone measures this many times the round's fastest whole
#: plan: a round's noise on 2 cores is 2-12% (bench/results/race_repeats.md), so a plan 1.5x behind in one round is
#: behind beyond any round's noise.
CUT_SHORT_AT = 1.5


def device_order(plan: Plan, units_per_device: Sequence[int]) -> list[int]:
    """The devices with units, the most expensive first: by the plan's predicted device totals, else by units."""
    busy = [d for d, n in enumerate(units_per_device) if n > 0]
    predicted = plan.predicted.per_device if plan.predicted is not None else ()
    if len(predicted) == len(units_per_device):
        return sorted(busy, key=lambda d: (-predicted[d].total, d))
    return sorted(busy, key=lambda d: (-units_per_device[d], d))


def measure_until(inventory: Inventory, plan: Plan, oracle: Oracle, stop_above: float) -> tuple[Measurement, bool]:
    """`plan` measured one device at a time (`device_order`), stopping after the first device whose total is above
    `stop_above` ms: the devices not timed keep zero costs (module docstring); and whether it was cut short."""
    units, placement = expand_plan(inventory, plan)
    n = plan.topology.num_devices
    on: list[dict[str, int]] = [{} for _ in range(n)]
    for unit, d in placement.items():
        on[d][unit] = d
    per_device = [DeviceCost.zero() for _ in range(n)]
    last: Measurement | None = None
    order = device_order(plan, [len(x) for x in on])
    cut = False
    for k, d in enumerate(order):
        last = oracle.measure(
            units,
            on[d],
            plan.topology,
            task=plan.sharder or "race",
            kernels=plan.kernels,
            cache_load_factors=plan.cache_load_factors,
        )
        per_device[d] = last.costs.per_device[d]
        if per_device[d].total > stop_above:
            cut = k < len(order) - 1
            break
    if last is None:
        raise ValueError(f"plan {plan.plan_id} places nothing")
    costs = Costs.from_devices(per_device)
    return last.model_copy(update={"placement": dict(placement), "costs": costs, "spread": ()}), cut
