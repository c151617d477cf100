"""The Sharder interface and the shared way of turning a placement into a Plan.

`Sharder.shard(inventory, topology) -> Plan` is the one interface every sharder implements (the heuristics,
TorchRec's planner, the learned sharders, a plugin's). `TableWiseSharder` is the base of those that place units one
by one (the heuristics): they implement `place_units()` (every unit on a device it may use, around the fixed ones)
and get `shard()` from it: the tables that cannot stay whole are cut as dreamshard.placement.layout chooses, the
rest placed whole, the result wrapped by `make_plan` (dreamshard.placement.make_plan, exported here too), which
records each table's kernel from its constraints.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import ClassVar

from dreamshard.errors import PlanError
from dreamshard.placement.expand import fold_units
from dreamshard.placement.layout import Layout, choose_layout
from dreamshard.placement.make_plan import make_plan
from dreamshard.placement.options import TableOption
from dreamshard.placement.validate import check_each_table_fits
from dreamshard.values import Costs, Inventory, Kernel, Plan, Table, Topology

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
        kernels, factors = layout.kernels()
        return plan_of_units(inventory, topology, placement, self.name, kernels=kernels, cache_load_factors=factors)


def plan_of_units(
    inventory: Inventory,
    topology: Topology,
    unit_placement: Mapping[str, int],
    sharder: str,
    predicted: Costs | None = None,
    model_version: str | None = None,
    kernels: Mapping[str, Kernel] | None = None,
    cache_load_factors: Mapping[str, float] | None = None,
) -> Plan:
    """`make_plan` of a {unit: device} map (dreamshard.placement.expand.fold_units folds it back); `kernels` /
    `cache_load_factors`: those its layout chose (`Layout.kernels`)."""
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
        kernels=kernels,
        cache_load_factors=cache_load_factors,
    )
