"""Baselines users run today: random, round-robin and the LPT greedy family (docs/architecture/learning.md, "Learning").

Every heuristic is memory-aware and honours constraints: a unit goes only to a device its table may use with room
for it, and a unit that fits nowhere raises InfeasiblePlacementError naming it (never silently the last device).
A table that cannot stay whole (larger than a device, or constrained) is cut as dreamshard.placement.layout
chooses, and the other units are placed around its fixed ones (`TableWiseSharder.shard`).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Mapping

import numpy as np

from dreamshard.errors import InfeasiblePlacementError
from dreamshard.placement.layout import Layout
from dreamshard.placement.options import TableOption
from dreamshard.placement.room import Room
from dreamshard.sharders.base import TableWiseSharder
from dreamshard.values import Inventory, Table, Topology

TableCost = Callable[[Table], float]


class RandomSharder(TableWiseSharder):
    """Each unit on a uniformly random device among those it may use with room (seeded)."""

    name = "random"
    family = "heuristic"
    options = frozenset({"seed"})

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def place_units(self, units: Inventory, topology: Topology, fixed: Mapping[str, int]) -> dict[str, int]:
        rng = np.random.default_rng(self.seed)
        room = Room(units, topology, fixed)
        out = room.place_fixed(fixed, self.name)
        # Largest units first so that random choices rarely paint themselves into a corner.
        for t in sorted(_free(units, fixed), key=lambda t: -t.size_bytes):
            legal = room.legal(t.name)
            if not legal:
                raise room.no_room(t.name, self.name)
            d = int(rng.choice(legal))
            room.add(d, t.name)
            out[t.name] = d
        return out


class RoundRobinSharder(TableWiseSharder):
    """Units in inventory order on devices 0, 1, 2, ...; skips a device that is full or that a unit may not use."""

    name = "round_robin"
    family = "heuristic"

    def place_units(self, units: Inventory, topology: Topology, fixed: Mapping[str, int]) -> dict[str, int]:
        room = Room(units, topology, fixed)
        out = room.place_fixed(fixed, self.name)
        n = topology.num_devices
        nxt = 0
        for t in _free(units, fixed):
            d = next(((nxt + k) % n for k in range(n) if room.usable((nxt + k) % n, t.name)), None)
            if d is None:
                raise room.no_room(t.name, self.name)
            room.add(d, t.name)
            out[t.name] = d
            nxt = (d + 1) % n
        return out


class GreedySharder(TableWiseSharder):
    """Longest-processing-time greedy: sort units by a per-table cost, largest first, and place each on the
    least-loaded device (by that cost) it may use that still has memory for it, around the fixed units (their cost
    counted on their devices). A table that cannot stay whole tries its options cheapest by that proxy first (the
    bottleneck device's load after placing). The registry's greedy heuristics (`GREEDY_COSTS`) take no options;
    `name` and `cost` say which one it is."""

    family = "heuristic"

    def __init__(self, name: str, cost: TableCost) -> None:
        self.name = name
        self.cost = cost

    def place_units(self, units: Inventory, topology: Topology, fixed: Mapping[str, int]) -> dict[str, int]:
        return self._greedy(units, topology, fixed)[0]

    def _greedy(
        self, units: Inventory, topology: Topology, fixed: Mapping[str, int]
    ) -> tuple[dict[str, int], list[float]]:
        room = Room(units, topology, fixed)
        out = room.place_fixed(fixed, self.name)
        load = [0.0] * topology.num_devices
        by = units.by_name()
        for name, device in out.items():
            load[device] += self.cost(by[name])
        loads = _Loads(load)
        for t in sorted(_free(units, fixed), key=lambda t: (-self.cost(t), t.name)):
            d = loads.least(room, t.name)
            if d is None:
                raise room.no_room(t.name, self.name)
            loads.add(d, self.cost(t))
            room.add(d, t.name)
            out[t.name] = d
        return out, load

    def rank_options(
        self, table: Table, options: list[TableOption], layout: Layout, topology: Topology
    ) -> list[TableOption]:
        """Options by the proxy's bottleneck load once placed (options that do not pack last), then fewest units."""

        def makespan(option: TableOption) -> float:
            lay = layout.with_option(option)
            try:
                return max(self._greedy(lay.units, topology, lay.fixed)[1])
            except InfeasiblePlacementError:
                return math.inf

        return [o for _, _, o in sorted((makespan(o), i, o) for i, o in enumerate(options))]


class _Loads:
    """Each device's load with a heap of (load, device): the least-loaded device a unit may use is found in
    O(log D) when most devices have room (10,000 units on 1,024 devices), the same device as the minimum over the
    unit's legal devices by (load, device) (stale entries are skipped by their version)."""

    def __init__(self, load: list[float]) -> None:
        self.load = load
        self.version = [0] * len(load)
        self.heap = [(x, d, 0) for d, x in enumerate(load)]
        heapq.heapify(self.heap)

    def least(self, room: Room, unit: str) -> int | None:
        """The device of least (load, index) that `unit` may use now (Room.usable), None when there is none."""
        if not room.may_use_all(unit):  # a few allowed devices: scan them
            legal = room.legal(unit)
            return min(legal, key=lambda i: (self.load[i], i)) if legal else None
        skipped: list[tuple[float, int, int]] = []
        found = None
        while self.heap:
            entry = heapq.heappop(self.heap)
            if entry[2] != self.version[entry[1]]:
                continue  # stale: the device's load changed since
            skipped.append(entry)
            if room.usable(entry[1], unit):
                found = entry[1]
                break
        for entry in skipped:
            heapq.heappush(self.heap, entry)
        return found

    def add(self, device: int, cost: float) -> None:
        """`cost` more on `device`."""
        self.load[device] += cost
        self.version[device] += 1
        heapq.heappush(self.heap, (self.load[device], device, self.version[device]))


def dim_cost(t: Table) -> float:
    return float(t.embedding_dim)


def size_cost(t: Table) -> float:
    return float(t.size_elements)


def lookup_cost(t: Table) -> float:
    return float(t.embedding_dim) * t.pooling_factor


def size_lookup_cost(t: Table) -> float:
    return float(t.embedding_dim) * t.pooling_factor * math.log10(max(t.num_embeddings, 10))


GREEDY_COSTS: dict[str, TableCost] = {
    "dim_greedy": dim_cost,
    "size_greedy": size_cost,
    "lookup_greedy": lookup_cost,
    "size_lookup_greedy": size_lookup_cost,
}


def _free(units: Inventory, fixed: Mapping[str, int]) -> list[Table]:
    """The units a heuristic places (in inventory order): every unit that is not fixed."""
    return [t for t in units.tables if t.name not in fixed]
