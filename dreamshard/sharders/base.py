"""The Sharder interface and the shared way of turning a placement into a Plan.

`Sharder.shard(inventory, topology) -> Plan` is the one interface every sharder implements (the heuristics,
TorchRec's planner, the learned sharders, a plugin's). `TableWiseSharder` is the base of those that place every
table whole on one device: they implement `place()` and get `shard()` from it through `make_plan`.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from dreamshard.errors import PlanError
from dreamshard.placement.validate import check_placement
from dreamshard.values import GB, ColumnShard, Costs, Inventory, Plan, RowShard, Topology

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
    """A sharder that places every table whole on one device: implement `place()`; `shard()` validates the
    placement (every table once, memory) and wraps it as a Plan."""

    @abc.abstractmethod
    def place(self, inventory: Inventory, topology: Topology) -> dict[str, int]:
        """Return {table name: device index}; raise InfeasiblePlacementError if a table fits nowhere."""

    def shard(self, inventory: Inventory, topology: Topology) -> Plan:
        return make_plan(inventory, topology, self.place(inventory, topology), self.name)


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
) -> Plan:
    """Validate a placement (every table once in one sharding type: whole, `column_shards`, `row_shards` or
    `data_parallel`; memory) and wrap it as a Plan."""
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
    used = check_placement(inventory, ordered, topology, shards, row_shards=rows, data_parallel=replicated)
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
