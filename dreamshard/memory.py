"""Memory accounting: what a placement needs on each device and whether it fits."""

from __future__ import annotations

from collections.abc import Mapping

from dreamshard.errors import InfeasiblePlacementError, PlanError
from dreamshard.types import GB, Inventory, Topology


def device_memory_bytes(inventory: Inventory, placement: Mapping[str, int], num_devices: int) -> list[int]:
    """Bytes of table weights on each device (fused SGD keeps no optimizer state)."""
    tables = inventory.by_name()
    used = [0] * num_devices
    for name, d in placement.items():
        used[d] += tables[name].size_bytes
    return used


def device_memory_gb(inventory: Inventory, placement: Mapping[str, int], num_devices: int) -> list[float]:
    return [b / GB for b in device_memory_bytes(inventory, placement, num_devices)]


def check_placement(inventory: Inventory, placement: Mapping[str, int], topology: Topology) -> None:
    """Raise a typed error if the placement misses a table, names an unknown one, or overflows memory."""
    names = set(inventory.table_names)
    missing = [n for n in inventory.table_names if n not in placement]
    if missing:
        raise PlanError(f"table '{missing[0]}' has no device in the plan ({len(missing)} unplaced)")
    unknown = [n for n in placement if n not in names]
    if unknown:
        raise PlanError(f"plan places table '{unknown[0]}', which is not in inventory '{inventory.name}'")
    for name, d in placement.items():
        if not 0 <= d < topology.num_devices:
            raise PlanError(f"table '{name}' placed on device {d}; topology has {topology.num_devices} devices")
    cap = topology.memory_per_device_bytes
    used = device_memory_bytes(inventory, placement, topology.num_devices)
    for d, u in enumerate(used):
        if u > cap:
            raise PlanError(
                f"device {d} holds {u / GB:.3f} GB, over its {topology.memory_per_device_gb} GB memory limit"
            )


def check_each_table_fits(inventory: Inventory, topology: Topology) -> None:
    """Fail early with the first table that is larger than a whole device."""
    cap = topology.memory_per_device_bytes
    for t in inventory.tables:
        if t.size_bytes > cap:
            raise InfeasiblePlacementError(t.name, t.size_gb, topology.memory_per_device_gb, "larger than one device")


class MemoryTracker:
    """Free memory per device while tables are placed one by one."""

    def __init__(self, topology: Topology) -> None:
        self.capacity = topology.memory_per_device_bytes
        self.used = [0] * topology.num_devices

    def fits(self, device: int, nbytes: int) -> bool:
        return self.used[device] + nbytes <= self.capacity

    def legal_devices(self, nbytes: int) -> list[int]:
        return [d for d in range(len(self.used)) if self.fits(d, nbytes)]

    def add(self, device: int, nbytes: int) -> None:
        self.used[device] += nbytes

    def largest_free_gb(self) -> float:
        return (self.capacity - min(self.used)) / GB
