"""Why each unit of a plan is on its device (`plan --explain`, docs/architecture/learning.md, "Learning").

For every unit, the reason is one of:

* `fixed`: a row shard or a replica: its sharding type puts it there (block i on device i, a replica everywhere);
* `memory`: no other device has room for it (what the placement validator would refuse);
* `gain`: the predicted cost of its best alternative: moving it to the best other device with room would raise the
  predicted maximum by `delta_ms` (or, where `delta_ms` <= 0, the search found no gain in moving it: a tie).

All predictions are the learned cost's members' mean with the model's comm (the same cost the stats report and
what-if use), so a `gain` reason equals what `dreamshard whatif PLAN --move UNIT:DEVICE` predicts.
"""

from __future__ import annotations

import torch

from dreamshard.learning.estimator import device_states
from dreamshard.learning.planning_cost import PlanningCost
from dreamshard.placement.expand import expand_plan
from dreamshard.placement.validate import footprint
from dreamshard.values import Inventory, Plan
from dreamshard.values.reports import UnitReason
from dreamshard.values.units import parse_unit


def placement_reasons(inventory: Inventory, plan: Plan, cost: PlanningCost) -> list[list[UnitReason]]:
    """Per device, why each of its units is there (see the module docstring)."""
    units, placed = expand_plan(inventory, plan)
    tables = list(units.tables)
    n = plan.topology.num_devices
    need = [footprint(t, plan.topology) for t in tables]
    used = [0] * n
    for t, b in zip(tables, need, strict=True):
        used[placed[t.name]] += b
    cap = plan.topology.usable_memory_bytes
    with torch.no_grad():
        states = cost.encode(tables)
        dev = device_states(states, [placed[t.name] for t in tables], n)
        totals = cost.mean_device_costs(dev).sum(-1)
        now = float(totals.max())
        out: list[list[UnitReason]] = [[] for _ in range(n)]
        for i, t in enumerate(tables):
            d = placed[t.name]
            ref = parse_unit(t.name)
            if not ref.movable:
                what = "a row block" if ref.kind == "row" else "a data-parallel replica"
                out[d].append(
                    UnitReason(
                        unit=t.name,
                        device=d,
                        kind="fixed",
                        text=f"{what} of '{ref.table}': its sharding type puts it on device {d}",
                    )
                )
                continue
            room = [k for k in range(n) if k != d and used[k] + need[i] <= cap]
            if not room:
                out[d].append(
                    UnitReason(
                        unit=t.name,
                        device=d,
                        kind="memory",
                        text=f"no other device has room for its {need[i] / 2**30:.3f} GB",
                    )
                )
                continue
            moved = dev[room].clone() + states[i]  # each alternative device with the unit
            after_alt = cost.mean_device_costs(moved).sum(-1)
            after_here = float(cost.mean_device_costs(dev[d] - states[i]).sum(-1))
            best_k, best_max = None, float("inf")
            for j, k in enumerate(room):
                rest = [float(totals[x]) for x in range(n) if x not in (d, k)]
                peak = max([after_here, float(after_alt[j]), *rest])
                if peak < best_max:
                    best_k, best_max = k, peak
            delta = best_max - now
            text = (
                f"moving it to device {best_k} would raise the predicted maximum by {delta:.3f} ms"
                if delta > 0
                else f"a tie: moving it to device {best_k} would not lower the predicted maximum"
            )
            out[d].append(UnitReason(unit=t.name, device=d, kind="gain", alternative=best_k, delta_ms=delta, text=text))
    for reasons in out:
        reasons.sort(key=lambda r: (r.kind != "fixed", r.kind != "memory", -r.delta_ms))
    return out
