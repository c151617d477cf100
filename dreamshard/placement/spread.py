"""`min_shards` as a team means it: the shards of such a table on that many distinct devices
(docs/architecture/data-model.md, "Constraints"). The heuristics place through `Room`, which keeps them apart; a search
that moves units by its own rules (local search, the policy, measured refinement) ends with `spread_shards`, which moves
the fewest shards that share a device to the least-used devices they may use that hold none of their table's shards.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Mapping

from dreamshard.placement.device_memory import unit_needs
from dreamshard.placement.options import allowed_devices
from dreamshard.values import Inventory, Topology, parse_unit


def spread_groups(units: Inventory) -> dict[str, list[str]]:
    """{table: its cut units} of the tables whose `min_shards` asks for distinct devices."""
    groups: dict[str, list[str]] = defaultdict(list)
    for t in units.tables:
        ref = parse_unit(t.name)
        if ref.kind != "table" and t.constraints is not None and t.constraints.min_shards is not None:
            groups[ref.table].append(t.name)
    return dict(groups)


def spread_shards(
    units: Inventory, placement: Mapping[str, int], topology: Topology, fixed: Collection[str] = ()
) -> dict[str, int]:
    """`placement` with every shard of a `min_shards` table that shares a device with another of its shards moved
    to a device it may use, with memory room, holding none of them (the least-used such device). A shard in
    `fixed`, or whose type fixes its device (row blocks), stays; when no device qualifies the shard stays too (the
    validator then names the table)."""
    out = {k: int(v) for k, v in placement.items()}
    groups = spread_groups(units)
    if not groups:
        return out
    fixed = {*fixed, *(n for members in groups.values() for n in members if not parse_unit(n).movable)}
    tables = units.by_name()
    needs = unit_needs(units, topology)
    used = [0] * topology.num_devices
    for name, d in out.items():
        used[d] += needs[name].total
    for members in groups.values():
        taken: set[int] = set()
        for name in sorted(members, key=lambda n: (n in fixed, out[n]), reverse=True):  # fixed shards claim first
            d = out[name]
            if d not in taken or name in fixed:
                taken.add(d)
                continue
            free = [
                e
                for e in allowed_devices(tables[name], topology)
                if e not in taken and used[e] + needs[name].total <= topology.usable_memory_bytes
            ]
            if not free:
                taken.add(d)
                continue
            to = min(free, key=lambda e: (used[e], e))
            used[d] -= needs[name].total
            used[to] += needs[name].total
            out[name] = to
            taken.add(to)
    return out
