"""Room for units while a sharder places them one by one: each device's free memory (its own and its host's) and the
devices each unit may use (its table's `devices` constraint; a fixed unit's own device). The heuristics, the learned
sharders' candidates and insertion place units through it (docs/architecture/data-model.md, "Constraints").
"""

from __future__ import annotations

from collections.abc import Mapping

from dreamshard.errors import InfeasiblePlacementError
from dreamshard.placement.device_memory import MemoryBreakdown, unit_needs
from dreamshard.placement.options import allowed_devices
from dreamshard.placement.spread import spread_groups
from dreamshard.values import GB, Inventory, Topology, parse_unit


class Room:
    """Free memory per device (device and host tiers) while units of `units` are placed; what each may use."""

    def __init__(self, units: Inventory, topology: Topology, fixed: Mapping[str, int] | None = None) -> None:
        self.topology = topology
        self.needs: dict[str, MemoryBreakdown] = unit_needs(units, topology)
        self.capacity = topology.usable_memory_bytes
        self.host_capacity = int(topology.host_memory_per_device_gb * GB)
        n = topology.num_devices
        self.used = [0] * n
        self.host_used = [0] * n
        self.allowed = {t.name: allowed_devices(t, topology) for t in units.tables}
        for name, d in (fixed or {}).items():
            self.allowed[name] = (int(d),)
        # the shards of a table with `min_shards` go to distinct devices: {table: devices its shards hold so far}
        self.spread: dict[str, set[int]] = {table: set() for table in spread_groups(units)}

    def need(self, unit: str) -> int:
        """Device bytes of `unit`."""
        return self.needs[unit].total

    def fits(self, device: int, unit: str) -> bool:
        m = self.needs[unit]
        return self.used[device] + m.total <= self.capacity and self.host_used[device] + m.host <= self.host_capacity

    def legal(self, unit: str) -> list[int]:
        """The devices `unit` may use that have room for it (and hold no other shard of a `min_shards` table), in
        the order of its allowed devices."""
        m = self.needs[unit]
        room, host_room = self.capacity - m.total, self.host_capacity - m.host  # fits: used <= room (ints)
        used, host_used = self.used, self.host_used
        taken = self.spread.get(parse_unit(unit).table, ())
        return [d for d in self.allowed[unit] if used[d] <= room and host_used[d] <= host_room and d not in taken]

    def usable(self, device: int, unit: str) -> bool:
        """Whether `unit` may go to `device` now: one of its allowed devices, with room for it, holding no other shard
        of its `min_shards` table (`legal`, for one device)."""
        allowed = self.allowed[unit]
        if len(allowed) != len(self.used) and device not in allowed:
            return False
        return self.fits(device, unit) and device not in self.spread.get(parse_unit(unit).table, ())

    def may_use_all(self, unit: str) -> bool:
        """Whether `unit` may use every device (no `devices` constraint, not fixed)."""
        return len(self.allowed[unit]) == len(self.used)

    def add(self, device: int, unit: str) -> None:
        m = self.needs[unit]
        self.used[device] += m.total
        self.host_used[device] += m.host
        if (table := parse_unit(unit).table) in self.spread:
            self.spread[table].add(device)

    def largest_free_gb(self, unit: str | None = None) -> float:
        """The most device memory free on one device (of those `unit` may use)."""
        devices = self.allowed[unit] if unit is not None else range(len(self.used))
        return max((self.capacity - self.used[d] for d in devices), default=0) / GB

    def no_room(self, unit: str, sharder: str) -> InfeasiblePlacementError:
        """`unit` fits on none of the devices it may use: names it, its need and the freest of them."""
        pin = allowed_devices_hint(self.allowed[unit], self.topology)
        return InfeasiblePlacementError(
            unit, self.need(unit) / GB, self.largest_free_gb(unit), f"sharder {sharder}{pin}"
        )

    def place_fixed(self, fixed: Mapping[str, int], sharder: str) -> dict[str, int]:
        """Add the fixed units on their devices (an error naming the first that does not fit)."""
        for name, d in fixed.items():
            if not self.fits(d, name):
                raise self.no_room(name, sharder)
            self.add(d, name)
        return {name: int(d) for name, d in fixed.items()}


def allowed_devices_hint(allowed: tuple[int, ...], topology: Topology) -> str:
    """`; it may use devices [..]` when a unit may not use every device, else empty."""
    if len(allowed) == topology.num_devices:
        return ""
    return f"; it may use device{'s' if len(allowed) > 1 else ''} {list(allowed)} only"
