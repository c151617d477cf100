"""The Sharder interface and the shared way of turning a placement into a Plan."""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence

from dreamshard.memory import check_placement
from dreamshard.types import GB, ColumnShard, Costs, Inventory, Plan, Topology


class Sharder(abc.ABC):
    """Places every table of an inventory on one device of a topology (table-wise sharding)."""

    name: str = "abstract"

    @abc.abstractmethod
    def place(self, inventory: Inventory, topology: Topology) -> dict[str, int]:
        """Return {table name: device index}; raise InfeasiblePlacementError if a table fits nowhere."""

    def shard(self, inventory: Inventory, topology: Topology) -> Plan:
        placement = self.place(inventory, topology)
        return make_plan(inventory, topology, placement, self.name)


def make_plan(
    inventory: Inventory,
    topology: Topology,
    placement: Mapping[str, int],
    sharder: str,
    predicted: Costs | None = None,
    model_version: str | None = None,
    column_shards: Mapping[str, Sequence[ColumnShard]] | None = None,
) -> Plan:
    """Validate a placement (every table once, whole or split into `column_shards`; memory) and wrap it as a Plan."""
    ordered = {t.name: int(placement[t.name]) for t in inventory.tables if t.name in placement}
    ordered.update({k: int(v) for k, v in placement.items() if k not in ordered})
    split = dict(column_shards or {})
    shards = {t.name: tuple(sorted(split.pop(t.name), key=lambda sh: sh.start)) for t in inventory.tables if t.name in split}
    shards.update({k: tuple(v) for k, v in split.items()})  # unknown tables: check_placement names them
    used = check_placement(inventory, ordered, topology, shards)
    return Plan(
        inventory_name=inventory.name,
        inventory_fingerprint=inventory.fingerprint(),
        topology=topology,
        sharder=sharder,
        placement=ordered,
        column_shards=shards,
        memory_per_device_gb=tuple(u / GB for u in used),
        predicted=predicted,
        model_version=model_version,
    )
