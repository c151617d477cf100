"""Where a new unit goes in a placement that stays as it is (docs/architecture/learning.md, "Plan stats and what-if"):
the device with room where the predicted maximum after adding it is lowest (ties: the lower device). What-if places
an added table this way, and the search adapts the current plan to a new inventory version with it (the
`current` candidate: every unit the current plan has keeps its device, the new ones are inserted).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from dreamshard.errors import PlanError
from dreamshard.learning.planning_cost import PlanningCost
from dreamshard.placement.device_memory import MemoryBreakdown, device_memory, unit_memory
from dreamshard.placement.options import allowed_devices
from dreamshard.values import GB, Inventory, Table, Topology


def devices_with_room(
    units: Sequence[Table], placement: Mapping[str, int], topology: Topology, need: int | MemoryBreakdown
) -> tuple[list[int], list[int]]:
    """The devices with room for `need` more bytes (or a unit's memory, device and host tiers) next to `units`
    placed as `placement`, and every device's use (the topology's memory model and optimizer, as the placement
    validator counts them)."""
    n = topology.num_devices
    used = (
        device_memory(Inventory(name="room", tables=tuple(units)), placement, topology)
        if units
        else [MemoryBreakdown()] * n
    )
    extra = need if isinstance(need, MemoryBreakdown) else MemoryBreakdown(weights=need)
    host_cap = topology.host_memory_per_device_gb * GB
    free = [
        d
        for d in range(n)
        if used[d].total + extra.total <= topology.usable_memory_bytes and used[d].host + extra.host <= host_cap
    ]
    return free, [m.total for m in used]


def insert(
    units: Sequence[Table],
    placement: Mapping[str, int],
    new: Table,
    topology: Topology,
    cost: PlanningCost,
    device: int | None = None,
    what: str = "",
    allowed: Sequence[int] | None = None,
) -> int:
    """The device for unit `new` next to `units` (placed as `placement`): `device` if it has room, else the device
    with room and the lowest predicted maximum, among `allowed` (by default the devices its table's constraints
    allow). PlanError naming `what` (or the unit) when there is no room, or `device` is not allowed."""
    label = what or new.name
    need = unit_memory(new, topology)
    may = set(allowed_devices(new, topology) if allowed is None else allowed)
    free, used = devices_with_room(units, placement, topology, need)
    usable = topology.usable_memory_bytes / GB
    if device is not None:
        if device not in may:
            raise PlanError(f"{label}: its constraints keep it off device {device} (it may use {sorted(may)})")
        if device not in free:
            raise PlanError(
                f"{label}: device {device} has no room for its {need.total / GB:.3f} GB "
                f"({used[device] / GB:.3f} GB used of {usable:.3f})"
            )
        return device
    free = [d for d in free if d in may]
    if not free:
        raise PlanError(
            f"{label}: no device has room for its {need.total / GB:.3f} GB (the freest holds "
            f"{min(used) / GB:.3f} GB of {usable:.3f}); what-if places whole tables: re-plan the "
            f"changed inventory (dreamshard plan) to split it"
        )
    tables = [*units, new]
    peaks = [cost.predict(tables, {**placement, new.name: d}).overall_ms for d in free]
    return free[min(range(len(free)), key=lambda i: (peaks[i], free[i]))]


def adapted_placement(
    current: Mapping[str, int],
    units: Inventory,
    topology: Topology,
    cost: PlanningCost,
    fixed: Mapping[str, int] | None = None,
) -> dict[str, int] | None:
    """`current` (a placement of units: a plan's `units()`) carried over to `units`: the `fixed` units on their
    devices, every other unit it places on a device its table may use keeps its device, the others are inserted
    one by one, largest first. None when nothing carries over, or a unit finds no room (the current plan cannot be
    adapted: the search's other candidates remain)."""
    fixed = fixed or {}
    n = topology.num_devices
    kept = [
        u
        for u in units.tables
        if u.name not in fixed and u.name in current and current[u.name] in allowed_devices(u, topology)
    ]
    if not kept:
        return None
    placement = {**{name: int(d) for name, d in fixed.items()}, **{u.name: int(current[u.name]) for u in kept}}
    by = units.by_name()
    placed = [by[name] for name in placement]
    for unit in sorted((u for u in units.tables if u.name not in placement), key=lambda u: -u.size_bytes):
        try:
            placement[unit.name] = insert(placed, placement, unit, topology, cost)
        except PlanError:
            return None
        placed.append(unit)
    free, _ = devices_with_room(list(units.tables), placement, topology, 0)
    return placement if len(free) == n else None  # the kept units alone may overflow a device
