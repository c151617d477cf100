"""A placement made a Plan (`make_plan`): validated (every table once in one sharding type, memory, constraints),
each table's kernel and cache load factor recorded. Every sharder, the gate's current-plan baseline, refinement,
what-if and TorchRec's imported plans make their plans here."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dreamshard.placement.constraint_check import placed_type
from dreamshard.placement.kernels import plan_kernels
from dreamshard.placement.validate import check_placement
from dreamshard.values import GB, ColumnShard, Costs, Inventory, Kernel, Plan, RowShard, Topology


def make_plan(
    inventory: Inventory,
    topology: Topology,
    placement: Mapping[str, int],
    sharder: str,
    predicted: Costs | None = None,
    model_version: str | None = None,
    column_shards: Mapping[str, Sequence[ColumnShard]] | None = None,
    row_shards: Mapping[str, Sequence[RowShard]] | None = None,
    data_parallel: Sequence[str] = (),
    kernels: Mapping[str, Kernel] | None = None,
    cache_load_factors: Mapping[str, float] | None = None,
) -> Plan:
    """Validate a placement (every table once in one sharding type: whole, `column_shards`, `row_shards` or
    `data_parallel`; memory; constraints) and wrap it as a Plan. Each table's kernel and cache load factor come
    from its constraints (dreamshard.placement.kernels) unless `kernels` / `cache_load_factors` give them (TorchRec's
    answer, or the plan a what-if or refinement changes)."""
    ordered = {t.name: int(placement[t.name]) for t in inventory.tables if t.name in placement}
    ordered.update({k: int(v) for k, v in placement.items() if k not in ordered})
    shards = _in_inventory_order(inventory, column_shards or {})
    rows = _in_inventory_order(inventory, row_shards or {})
    names = set(inventory.table_names)
    replicated = tuple(
        dict.fromkeys(
            [
                *(t.name for t in inventory.tables if t.name in set(data_parallel)),
                *(t for t in data_parallel if t not in names),
            ]
        )
    )
    default_kernels, default_factors = _kernels(inventory, topology, ordered, shards, rows, replicated)
    kernels = {**default_kernels, **(kernels or {})}
    cache_load_factors = {**default_factors, **(cache_load_factors or {})}
    used = check_placement(
        inventory,
        ordered,
        topology,
        shards,
        row_shards=rows,
        data_parallel=replicated,
        kernels=kernels,
        cache_load_factors=cache_load_factors,
    )
    return Plan(
        inventory_name=inventory.name,
        inventory_fingerprint=inventory.fingerprint(),
        schema_fingerprint=inventory.schema_fingerprint(),
        topology=topology,
        sharder=sharder,
        placement=ordered,
        column_shards=shards,
        row_shards=rows,
        data_parallel=replicated,
        kernels=dict(kernels),
        cache_load_factors=dict(cache_load_factors or {}),
        memory_per_device_gb=tuple(u / GB for u in used),
        predicted=predicted,
        model_version=model_version,
    )


def _in_inventory_order(inventory: Inventory, split: Mapping[str, Sequence[Any]]) -> dict[str, tuple[Any, ...]]:
    """Shards per table in inventory order, each table's sorted by start (unknown tables last:
    check_placement names them)."""
    rest = dict(split)
    out = {t.name: tuple(sorted(rest.pop(t.name), key=lambda sh: sh.start)) for t in inventory.tables if t.name in rest}
    out.update({k: tuple(v) for k, v in rest.items()})
    return out


def _kernels(
    inventory: Inventory,
    topology: Topology,
    placement: Mapping[str, int],
    shards: Mapping[str, Sequence[ColumnShard]],
    rows: Mapping[str, Sequence[RowShard]],
    replicated: Sequence[str],
) -> tuple[dict[str, Kernel], dict[str, float]]:
    """The kernels and load factors of the constrained tables, by their sharding type."""
    constrained = {t.name: t for t in inventory.tables if t.constraints is not None}
    if not constrained:
        return {}, {}
    types = {t: "table_wise" for t in placement}
    types.update({t: "column_wise" for t in shards})
    types.update({t: placed_type(t, [rs.device for rs in r], "row", topology) for t, r in rows.items()})
    types.update({t: "data_parallel" for t in replicated})
    return plan_kernels(constrained, types, topology.device_type)
