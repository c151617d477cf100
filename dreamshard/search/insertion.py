"""Where a new unit goes in a placement that stays as it is (docs/architecture.md, "Plan stats and what-if"): the
device with room where the predicted maximum after adding it is lowest (ties: the lower device). What-if places
an added table this way, and the search adapts the current plan to a new inventory version with it (the
`current` candidate: every unit the current plan has keeps its device, the new ones are inserted).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from dreamshard.errors import PlanError
from dreamshard.learning.planning_cost import PlanningCost
from dreamshard.placement.validate import device_memory_bytes, footprint
from dreamshard.values import GB, Inventory, Table, Topology


def devices_with_room(
    units: Sequence[Table], placement: Mapping[str, int], topology: Topology, need: int
) -> tuple[list[int], list[int]]:
    """The devices with room for `need` more bytes next to `units` placed as `placement`, and every device's use
    (the topology's memory model and optimizer, as the placement validator counts them)."""
    used = (
        device_memory_bytes(Inventory(name="room", tables=tuple(units)), placement, topology.num_devices, topology)
        if units
        else [0] * topology.num_devices
    )
    cap = topology.usable_memory_bytes
    return [d for d in range(topology.num_devices) if used[d] + need <= cap], used


def insert(
    units: Sequence[Table],
    placement: Mapping[str, int],
    new: Table,
    topology: Topology,
    cost: PlanningCost,
    device: int | None = None,
    what: str = "",
) -> int:
    """The device for unit `new` next to `units` (placed as `placement`): `device` if it has room, else the device
    with room and the lowest predicted maximum. PlanError naming `what` (or the unit) when there is no room."""
    label = what or new.name
    need = footprint(new, topology)
    free, used = devices_with_room(units, placement, topology, need)
    usable = topology.usable_memory_bytes / GB
    if device is not None:
        if device not in free:
            raise PlanError(
                f"{label}: device {device} has no room for its {need / GB:.3f} GB "
                f"({used[device] / GB:.3f} GB used of {usable:.3f})"
            )
        return device
    if not free:
        raise PlanError(
            f"{label}: no device has room for its {need / GB:.3f} GB (the freest holds "
            f"{min(used) / GB:.3f} GB of {usable:.3f}); what-if places whole tables: re-plan the "
            f"changed inventory (dreamshard plan) to split it into column shards"
        )
    tables = [*units, new]
    peaks = [cost.predict(tables, {**placement, new.name: d}).overall_ms for d in free]
    return free[min(range(len(free)), key=lambda i: (peaks[i], free[i]))]


def adapted_placement(
    current: Mapping[str, int], units: Inventory, topology: Topology, cost: PlanningCost
) -> dict[str, int] | None:
    """`current` (a placement of units: a plan's `units()`) carried over to `units`: every unit it places keeps its
    device, the others are inserted one by one, largest first. None when nothing carries over, or a unit finds no
    room (the current plan cannot be adapted: the search's other candidates remain)."""
    kept = [u for u in units.tables if u.name in current and 0 <= current[u.name] < topology.num_devices]
    if not kept:
        return None
    placement = {u.name: int(current[u.name]) for u in kept}
    placed = list(kept)
    for unit in sorted((u for u in units.tables if u.name not in placement), key=lambda u: -u.size_bytes):
        try:
            placement[unit.name] = insert(placed, placement, unit, topology, cost)
        except PlanError:
            return None
        placed.append(unit)
    free, _ = devices_with_room(list(units.tables), placement, topology, 0)
    return placement if len(free) == topology.num_devices else None  # the kept units alone may overflow a device
