"""Baselines users run today: random, round-robin and the LPT greedy family (docs/architecture.md, "Learning").

Every heuristic is memory-aware: a table goes only to a device with room for it, and a table that fits
nowhere raises InfeasiblePlacementError naming it (never silently the last device).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from dreamshard.errors import InfeasiblePlacementError
from dreamshard.placement.validate import MemoryTracker, check_each_table_fits, footprint
from dreamshard.sharders.base import TableWiseSharder
from dreamshard.values import GB, Inventory, Table, Topology

TableCost = Callable[[Table], float]


def _no_room(table: Table, need: int, mem: MemoryTracker, name: str) -> InfeasiblePlacementError:
    """`table` needs `need` bytes (its footprint: weights, optimizer state, io) and no device has them."""
    return InfeasiblePlacementError(table.name, need / GB, mem.largest_free_gb(), f"sharder {name}")


class RandomSharder(TableWiseSharder):
    """Each table on a uniformly random device among those with room (seeded)."""

    name = "random"
    family = "heuristic"
    options = frozenset({"seed"})

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def place(self, inventory: Inventory, topology: Topology) -> dict[str, int]:
        check_each_table_fits(inventory, topology)
        rng = np.random.default_rng(self.seed)
        mem = MemoryTracker(topology)
        out: dict[str, int] = {}
        # Largest tables first so that random choices rarely paint themselves into a corner.
        for t in sorted(inventory.tables, key=lambda t: -t.size_bytes):
            need = footprint(t, topology)
            legal = mem.legal_devices(need)
            if not legal:
                raise _no_room(t, need, mem, self.name)
            d = int(rng.choice(legal))
            mem.add(d, need)
            out[t.name] = d
        return out


class RoundRobinSharder(TableWiseSharder):
    """Tables in inventory order on devices 0, 1, 2, ...; skips a device that is full."""

    name = "round_robin"
    family = "heuristic"

    def place(self, inventory: Inventory, topology: Topology) -> dict[str, int]:
        check_each_table_fits(inventory, topology)
        mem = MemoryTracker(topology)
        out: dict[str, int] = {}
        n = topology.num_devices
        nxt = 0
        for t in inventory.tables:
            need = footprint(t, topology)
            for k in range(n):
                d = (nxt + k) % n
                if mem.fits(d, need):
                    break
            else:
                raise _no_room(t, need, mem, self.name)
            mem.add(d, need)
            out[t.name] = d
            nxt = (d + 1) % n
        return out


class GreedySharder(TableWiseSharder):
    """Longest-processing-time greedy: sort tables by a per-table cost, largest first, and place each
    on the least-loaded device (by that cost) that still has memory for it. The registry's greedy heuristics
    (`GREEDY_COSTS`) take no options; `name` and `cost` say which one it is."""

    family = "heuristic"

    def __init__(self, name: str, cost: TableCost) -> None:
        self.name = name
        self.cost = cost

    def place(self, inventory: Inventory, topology: Topology) -> dict[str, int]:
        check_each_table_fits(inventory, topology)
        mem = MemoryTracker(topology)
        load = [0.0] * topology.num_devices
        out: dict[str, int] = {}
        for t in sorted(inventory.tables, key=lambda t: (-self.cost(t), t.name)):
            need = footprint(t, topology)
            legal = mem.legal_devices(need)
            if not legal:
                raise _no_room(t, need, mem, self.name)
            d = min(legal, key=lambda i: (load[i], i))
            load[d] += self.cost(t)
            mem.add(d, need)
            out[t.name] = d
        return out


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
