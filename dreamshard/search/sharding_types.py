"""Choosing each table's sharding type on the learned cost (docs/architecture/data-model.md, "Sharding types").

Enumerate, then search: the search places whole tables and column shards; then, for the types the plan may use
(`SearchConfig.types`), each table placed whole or column-wise gets its candidate shardings -- row-wise for the
tables with the largest predicted single-table cost, table-row-wise over the least-loaded host (topologies with
hosts), data-parallel for small tables (weights up to DP_MAX_BYTES) -- and the planning cost decides, greedily.
A conversion replaces the table's units by its fixed ones (row blocks, replicas) and re-balances the others
around them (dreamshard.search.local.refine_placement, the fixed units unmovable); each round takes the best
conversion, up to MAX_CHANGES rounds, and the best point of that path is kept when it lowers the predicted maximum
by MIN_GAIN. `--verify` measures the typed candidate beside the others and keeps what the hardware says.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from dreamshard.learning.estimator import device_states
from dreamshard.learning.mdp import single_table_costs
from dreamshard.learning.planning_cost import PlanningCost
from dreamshard.placement.expand import replica_table, row_shard_table
from dreamshard.placement.options import table_options
from dreamshard.search.local import UnitLimits, refine_placement, unit_limits
from dreamshard.values import GB, Inventory, Table, Topology
from dreamshard.values.units import movable, parse_unit, row_blocks

#: Sharding types the search can add to table-wise and column-wise.
CHOOSABLE_TYPES = ("row_wise", "table_row_wise", "data_parallel")
ROW_CANDIDATES = 3  # tables tried row-wise (largest predicted single-table cost first)
DP_CANDIDATES = 3  # small tables tried data-parallel
DP_MAX_BYTES = 4 << 20  # a replica's weights (its gradient is all-reduced every step)
MIN_GAIN = 0.02  # a conversion must lower the predicted maximum by this fraction
MAX_CHANGES = 4


@dataclass(frozen=True)
class Typed:
    """A placement whose units include row shards or replicas."""

    units: Inventory
    placement: dict[str, int]
    predicted_ms: float
    changes: tuple[str, ...]  # "t: row_wise", ...


def check_types(types: Sequence[str]) -> tuple[str, ...]:
    unknown = [t for t in types if t not in CHOOSABLE_TYPES]
    if unknown:
        raise ValueError(
            f"unknown sharding type '{unknown[0]}' for the search; choose from {', '.join(CHOOSABLE_TYPES)}"
        )
    return tuple(dict.fromkeys(types))


def _score(cost: PlanningCost, units: Inventory, placement: dict[str, int]) -> float:
    """The search objective: the pessimistic predicted maximum."""
    with torch.no_grad():
        return float(cost.overall(cost.placement_states(list(units.tables), placement)))


def _convert(
    units: Inventory, placement: dict[str, int], table: Table, kind: str, devices: list[int]
) -> tuple[Inventory, dict[str, int]]:
    """`units` with `table`'s units (whole or column shards) replaced by its row blocks on `devices` or its replicas
    on every device."""
    if kind == "data_parallel":
        new = [replica_table(table, d) for d in devices]
    else:
        new = [row_shard_table(table, a, b) for a, b in row_blocks(table.num_embeddings, len(devices))]
    old = {u.name for u in units.tables if parse_unit(u.name).table == table.name}
    out = [u for u in units.tables if u.name not in old]
    place = {k: v for k, v in placement.items() if k not in old}
    place.update({u.name: d for u, d in zip(new, devices, strict=True)})
    return Inventory(name=units.name, tables=(*out, *new)), place


def _options(
    inventory: Inventory,
    units: Inventory,
    placement: dict[str, int],
    topology: Topology,
    cost: PlanningCost,
    types: Sequence[str],
) -> list[tuple[str, Table, str, list[int]]]:
    kinds: dict[str, set[str]] = {}
    for u in units.tables:
        ref = parse_unit(u.name)
        kinds.setdefault(ref.table, set()).add(ref.kind)
    whole = [t for t in inventory.tables if kinds.get(t.name, {"row"}) <= {"table", "column"}]
    if not whole:
        return []
    with torch.no_grad():
        single = dict(zip((t.name for t in whole), single_table_costs(cost, cost.encode(whole)).tolist(), strict=True))
    n, local = topology.num_devices, topology.local_world_size
    out: list[tuple[str, Table, str, list[int]]] = []
    big = sorted((t for t in whole if t.num_embeddings >= n), key=lambda t: (-single[t.name], t.name))
    if "row_wise" in types:
        rows = [t for t in big if _allows(t, topology, "row_wise", tuple(range(n)))]
        out += [(f"{t.name}: row_wise", t, "row_wise", list(range(n))) for t in rows[:ROW_CANDIDATES]]
    if "table_row_wise" in types and topology.hosts > 1:
        load = [0.0] * topology.hosts
        for name, d in placement.items():
            load[topology.host_of(d)] += single.get(name, 0.0)  # column shards and fixed units: not counted
        h = min(range(topology.hosts), key=lambda i: (load[i], i))
        devs = list(range(h * local, (h + 1) * local))
        out += [
            (f"{t.name}: table_row_wise (host {h})", t, "table_row_wise", devs)
            for t in big
            if t.num_embeddings >= local and _allows(t, topology, "table_row_wise", tuple(devs))
        ][:ROW_CANDIDATES]
    if "data_parallel" in types:
        small = sorted((t for t in whole if t.size_bytes <= DP_MAX_BYTES), key=lambda t: (-single[t.name], t.name))
        small = [t for t in small if _allows(t, topology, "data_parallel", tuple(range(n)))]
        out += [(f"{t.name}: data_parallel", t, "data_parallel", list(range(n))) for t in small[:DP_CANDIDATES]]
    return out


def _allows(table: Table, topology: Topology, kind: str, devices: tuple[int, ...]) -> bool:
    """Whether `table` may be converted to `kind` on `devices`: an option of it (its constraints, its module kind,
    one device's memory: dreamshard.placement.options)."""
    if table.constraints is None and kind != "table_row_wise":
        return True  # the quick path: unconstrained row blocks and replicas are checked by memory after refining
    return any(o.kind == kind and o.devices == devices for o in table_options(table, topology))


def _fits(limits: UnitLimits, devices: Sequence[int], topology: Topology) -> bool:
    """Every device within its usable memory and its host memory, and every unit on a device it may use, with
    the units on `devices`."""
    used = [0] * topology.num_devices
    host = [0] * topology.num_devices
    for i, d in enumerate(devices):
        used[d] += limits.sizes[i]
        host[d] += limits.host_sizes[i]
        if not limits.allowed[i, d]:
            return False
    return max(used) <= topology.usable_memory_bytes and max(host) <= topology.host_memory_per_device_gb * GB


def choose_types(
    inventory: Inventory,
    units: Inventory,
    placement: dict[str, int],
    topology: Topology,
    cost: PlanningCost,
    types: Sequence[str],
) -> Typed | None:
    """The search's placement of `units` (of `inventory`'s tables) with some tables converted to the `types` where
    the predicted maximum drops by MIN_GAIN each (None when no conversion pays)."""
    types = check_types(types)
    if not types or topology.num_devices < 2:
        return None
    start = _score(cost, units, dict(placement))
    cur_units, cur_place = units, dict(placement)
    path: list[tuple[float, Inventory, dict[str, int], str]] = []  # the best conversion of each round, in order
    for _ in range(MAX_CHANGES):
        best: tuple[float, Inventory, dict[str, int], str] | None = None
        for label, table, kind, devices in _options(inventory, cur_units, cur_place, topology, cost, types):
            u2, p2 = _convert(cur_units, cur_place, table, kind, devices)
            tables = list(u2.tables)
            with torch.no_grad():
                states = cost.encode(tables)
            limits = unit_limits(u2, topology, {t.name: p2[t.name] for t in tables if not movable(t.name)})
            acts = refine_placement(
                cost,
                states,
                limits.sizes,
                [p2[t.name] for t in tables],
                topology,
                min_gain=0.0,
                movable=limits.movable,
                allowed=limits.allowed,
                host_sizes=limits.host_sizes,
            )
            if not _fits(limits, acts, topology):
                continue
            p2 = {t.name: int(a) for t, a in zip(tables, acts, strict=True)}
            with torch.no_grad():  # the units are encoded above: their device states, not a second encoding
                s = float(cost.overall(device_states(states, acts, topology.num_devices)))
            if best is None or s < best[0]:
                best = (s, u2, p2, label)
        if best is None:
            break
        path.append(best)
        cur_units, cur_place = best[1], best[2]
    # the best point of the path: a conversion that pays only with the next one (a hot table replicated before
    # the huge one is row-sharded) is kept when the pair does
    k = min(range(len(path)), key=lambda i: (path[i][0], i)) if path else -1
    if k < 0 or path[k][0] > (1.0 - MIN_GAIN) * start:
        return None
    cur, cur_units, cur_place = path[k][0], path[k][1], path[k][2]
    changes = [step[3] for step in path[: k + 1]]
    return Typed(units=cur_units, placement=cur_place, predicted_ms=cur, changes=tuple(changes))
