"""The Sharder interface and the shared way of turning a placement into a Plan.

`Sharder.shard(inventory, topology) -> Plan` is the one interface every sharder implements (the heuristics,
TorchRec's planner, the learned sharders, a plugin's). `TableWiseSharder` is the base of those that place units one
by one (the heuristics): they implement `place_units()` (every unit on a device it may use, around the fixed ones)
and get `shard()` from it: the tables that cannot stay whole are cut as dreamshard.placement.layout chooses, the
rest placed whole, the result wrapped by `make_plan`, which records each table's kernel from its constraints.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from dreamshard.errors import PlanError
from dreamshard.placement.constraint_check import placed_type
from dreamshard.placement.expand import fold_units
from dreamshard.placement.kernels import plan_kernels
from dreamshard.placement.layout import Layout, choose_layout
from dreamshard.placement.options import TableOption
from dreamshard.placement.validate import check_each_table_fits, check_placement
from dreamshard.values import GB, ColumnShard, Costs, Inventory, Kernel, Plan, RowShard, Table, Topology

#: The families the registry (dreamshard.sharders) lists sharders under; `Sharder.family` says which one a
#: sharder belongs to ("other": a plugin that is none of the three).
FAMILIES: tuple[str, ...] = ("heuristic", "torchrec", "learned", "other")


class Sharder(abc.ABC):
    """Plans every table of an inventory onto the devices of a topology: `shard()` returns the Plan (tables
    whole, or split into column shards where the sharder does that).

    Class attributes the registry reads: `family` (heuristic / torchrec / learned, or other for a plugin) and
    `options`, the keyword options the constructor accepts (`get_sharder` rejects any other).
    """

    name: str = "abstract"
    family: ClassVar[str] = "other"
    options: ClassVar[frozenset[str]] = frozenset()

    @abc.abstractmethod
    def shard(self, inventory: Inventory, topology: Topology) -> Plan:
        """The plan of `inventory` on `topology`; raise InfeasiblePlacementError if a table fits nowhere."""

    def place(self, inventory: Inventory, topology: Topology) -> dict[str, int]:
        """{table: device} of the plan, for callers that need whole tables (profiling kinds, search candidates);
        PlanError when the plan splits a table into column shards."""
        plan = self.shard(inventory, topology)
        split = next((t for t in plan.table_names if plan.sharding_type(t) != "table_wise"), None)
        if split is not None:
            raise PlanError(
                f"{self.name} placed table '{split}' {plan.sharding_type(split).replace('_', '-')}, which a "
                "table-wise placement cannot hold; use shard()"
            )
        return dict(plan.placement)


class TableWiseSharder(Sharder):
    """A sharder that places units one by one: implement `place_units()`; `shard()` lays the inventory out (the
    tables that cannot stay whole cut as dreamshard.placement.layout chooses, ranked by `rank_options`), places
    the units and wraps them as a Plan; `place()` is the placement of whole tables."""

    @abc.abstractmethod
    def place_units(self, units: Inventory, topology: Topology, fixed: Mapping[str, int]) -> dict[str, int]:
        """{unit: device} for every unit of `units`: the `fixed` ones on their devices, the others each on a device
        its constraints allow with room for it; InfeasiblePlacementError naming a unit that fits nowhere."""

    def rank_options(
        self, table: Table, options: list[TableOption], layout: Layout, topology: Topology
    ) -> list[TableOption]:
        """The order in which a table that cannot stay whole tries its options (default: fewest units first);
        `layout`: the inventory with the other such tables at their first option."""
        return options

    def place(self, inventory: Inventory, topology: Topology) -> dict[str, int]:
        """{table: device}: every table whole (an error naming a table larger than a device)."""
        check_each_table_fits(inventory, topology)
        return self.place_units(inventory, topology, {})

    def shard(self, inventory: Inventory, topology: Topology) -> Plan:
        layout, placement = choose_layout(
            inventory,
            topology,
            lambda lay: self.place_units(lay.units, topology, lay.fixed),
            lambda t, options, lay: self.rank_options(t, options, lay, topology),
        )
        return plan_of_units(inventory, topology, placement, self.name)


def plan_of_units(
    inventory: Inventory,
    topology: Topology,
    unit_placement: Mapping[str, int],
    sharder: str,
    predicted: Costs | None = None,
    model_version: str | None = None,
) -> Plan:
    """`make_plan` of a {unit: device} map (dreamshard.placement.expand.fold_units folds it back)."""
    folded = fold_units(inventory, unit_placement)
    return make_plan(
        inventory,
        topology,
        folded.placement,
        sharder,
        predicted=predicted,
        model_version=model_version,
        column_shards=folded.column_shards,
        row_shards=folded.row_shards,
        data_parallel=folded.data_parallel,
    )


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
