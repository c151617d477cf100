"""Device memory as a training job needs it, counted the way TorchRec's storage estimator counts it (torchrec
1.9.2, `torchrec/distributed/planner/shard_estimators.py`), so that both planners agree on what fits.

A unit (a whole table, a column shard, a row shard or a replica, cut to its size) takes its weights, its
optimizer's state and, under `memory_model: torchrec`, the input/output buffers of one batch (`unit_memory`);
`device_memory` sums the units of each device. The formulas per sharding type: docs/architecture.md, "Device
memory"; tests/test_storage.py checks them against TorchRec's estimator.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping
from dataclasses import dataclass
from typing import SupportsIndex

from dreamshard.errors import PlanError
from dreamshard.values import GB, SHARDING_TYPES, Inventory, ShardingType, Table, Topology, parse_unit

__all__ = [
    "SHARDING_TYPES",
    "MemoryBreakdown",
    "ShardingType",
    "device_memory",
    "io_bytes",
    "optimizer_bytes",
    "unit_memory",
]

#: Bytes of one input index (TorchRec's BIGINT_DTYPE: TBE converts int32 indices to int64).
INDEX_BYTES = 8
#: Optimizer state per weight element (TorchRec's `_get_optimizer_multipler`); row-wise Adagrad is per row.
ADAM_STATES = 2
#: The sharding type of each kind of unit name (dreamshard.values.units); row units are row_wise or table_row_wise.
_KIND_SHARDING: dict[str, str] = {
    "table": "table_wise",
    "column": "column_wise",
    "row": "row_wise",
    "replica": "data_parallel",
}


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes one unit (or one device) needs: table weights, optimizer state, input/output buffers."""

    weights: int = 0
    optimizer: int = 0
    io: int = 0

    @property
    def total(self) -> int:
        return self.weights + self.optimizer + self.io

    @property
    def total_gb(self) -> float:
        return self.total / GB

    def gb(self) -> dict[str, float]:
        """{weights, optimizer, io, total} in GB (1 GB = 2^30 bytes, as `memory_per_device_gb`)."""
        return {
            "weights": self.weights / GB,
            "optimizer": self.optimizer / GB,
            "io": self.io / GB,
            "total": self.total / GB,
        }

    def __add__(self, other: MemoryBreakdown) -> MemoryBreakdown:
        return MemoryBreakdown(self.weights + other.weights, self.optimizer + other.optimizer, self.io + other.io)


def _count(value: object) -> bool:
    """A positive int (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _check(unit: Table, sharding: str, num_shards: int, table_dim: int | None, table_rows: int | None) -> None:
    if sharding not in SHARDING_TYPES:
        raise PlanError(
            f"unit '{unit.name}': unknown sharding type '{sharding}'; expected one of {', '.join(SHARDING_TYPES)}"
        )
    if not _count(num_shards):
        raise PlanError(f"unit '{unit.name}': num_shards must be an integer >= 1, got {num_shards!r}")
    if table_dim is not None and not (_count(table_dim) and table_dim >= unit.embedding_dim):
        raise PlanError(
            f"unit '{unit.name}': table_dim {table_dim!r} is narrower than the unit's {unit.embedding_dim} columns"
        )
    if table_rows is not None and not (_count(table_rows) and table_rows >= unit.num_embeddings):
        raise PlanError(
            f"unit '{unit.name}': table_rows {table_rows!r} is fewer than the unit's {unit.num_embeddings} rows"
        )


def optimizer_bytes(
    unit: Table, optimizer: str, sharding: str = "table_wise", num_shards: int = 1, table_dim: int | None = None
) -> int:
    """Optimizer state of `unit` (TorchRec `_calculate_optimizer_sizes`: ceil(weights x multiplier)).

    Row-wise Adagrad's multiplier is 1 / the whole table's dim: for a column shard that is `table_dim`, by
    default its width x `num_shards` (equal shards, as TorchRec cuts them)."""
    weights = unit.size_bytes
    if optimizer == "sgd":
        return 0
    if optimizer == "adam":
        return ADAM_STATES * weights
    if optimizer == "rowwise_adagrad":
        full = unit.embedding_dim
        if sharding == "column_wise":
            full = table_dim if table_dim is not None else unit.embedding_dim * num_shards
        return -(-weights // full)  # ceil
    raise PlanError(f"unit '{unit.name}': unknown optimizer '{optimizer}'; expected sgd, rowwise_adagrad or adam")


def io_bytes(
    unit: Table, topology: Topology, sharding: str = "table_wise", num_shards: int = 1, table_rows: int | None = None
) -> tuple[int, int]:
    """(input, output) buffer bytes of `unit` for one batch, as TorchRec's `_calculate_shard_io_sizes` counts them
    (its default `PipelineType.NONE`): 8-byte indices in, pooled rows out, per rank's share of the batch
    (`topology.batch_size` is the global one), times the world for the sharded types; a row shard gets
    1 / num_shards of the indices. docs/architecture.md, "Device memory"."""
    world = topology.num_devices
    per_rank = topology.batch_size / world
    poolings = [f.pooling_factor for f in unit.feature_list]
    if table_rows is not None and sharding in ("row_wise", "table_row_wise"):
        poolings = [p * table_rows / unit.num_embeddings for p in poolings]  # the table's, from the unit's share
    inputs = sum(poolings) * per_rank
    outputs = sum(min(1.0, p) for p in poolings) * per_rank
    out_row = unit.embedding_dim * unit.bytes_per_element
    if sharding == "data_parallel":
        return math.ceil(inputs * INDEX_BYTES), math.ceil(outputs * out_row)
    if sharding in ("row_wise", "table_row_wise"):
        return math.ceil(inputs * world / num_shards * INDEX_BYTES), math.ceil(outputs * world * out_row)
    # table_wise, column_wise: every index of the table comes to this shard (a column shard's row is its width)
    return math.ceil(inputs * world * INDEX_BYTES), math.ceil(outputs * world * out_row)


def unit_memory(
    unit: Table,
    topology: Topology,
    sharding: str = "table_wise",
    num_shards: int = 1,
    *,
    table_dim: int | None = None,
    table_rows: int | None = None,
) -> MemoryBreakdown:
    """What `unit` needs on its device under `topology`'s optimizer and memory model.

    `num_shards`: how many shards the table is cut into (row shards: for the indices each receives; column
    shards: for row-wise Adagrad's share); `table_dim`: a column shard's whole table width when the shards are
    not equal; `table_rows`: a row shard's whole table rows when its pooling is its share of the lookups
    (`dreamshard.placement.expand.row_shard_table`). A PlanError naming the unit for an unknown sharding type,
    num_shards < 1, or a table_dim / table_rows smaller than the unit."""
    _check(unit, sharding, num_shards, table_dim, table_rows)
    opt = optimizer_bytes(unit, topology.optimizer, sharding, num_shards, table_dim)
    io = 0
    if topology.memory_model == "torchrec":
        io = sum(io_bytes(unit, topology, sharding, num_shards, table_rows))
    return MemoryBreakdown(weights=unit.size_bytes, optimizer=opt, io=io)


def _device(d: object) -> int:
    """A device number (ints, numpy ints), or -1 for anything else (a bool, a float, a string)."""
    if isinstance(d, bool) or not isinstance(d, SupportsIndex):
        return -1
    try:
        return operator.index(d)
    except TypeError:
        return -1


@dataclass
class _Siblings:
    """The units of one table of one kind: how many, their widths and rows, the devices they are on."""

    count: int = 0
    width: int = 0
    rows: int = 0
    devices: frozenset[int] = frozenset()


def _siblings(units: Inventory, placement: Mapping[str, int]) -> dict[tuple[str, str], _Siblings]:
    out: dict[tuple[str, str], _Siblings] = {}
    for t in units.tables:
        ref = parse_unit(t.name)
        if ref.kind == "table":
            continue
        s = out.setdefault((ref.table, ref.kind), _Siblings())
        s.count += 1
        s.width += t.embedding_dim
        s.rows = max(s.rows, ref.end)
        if t.name in placement:
            s.devices = s.devices | {_device(placement[t.name])}
    return out


def device_memory(
    units: Inventory,
    placement: Mapping[str, int],
    topology: Topology,
    sharding_of: Mapping[str, tuple[str, int]] | None = None,
) -> list[MemoryBreakdown]:
    """The memory of each device: the sum of `unit_memory` over the units `placement` ({unit name: device}) puts
    there. `sharding_of` gives (sharding, num_shards) per unit; by default each unit's comes from its name
    (dreamshard.values.units) and the other units of its table in `units`: a whole table is ("table_wise", 1), a
    column shard `t@a:b` ("column_wise", its table's column shards; their widths sum to the table's), a row shard
    `t@ra:b` ("row_wise", its table's row shards; "table_row_wise" when they sit on one host of several; its
    pooling read as its share of the lookups, the table's rows the last shard's end), a replica `t@dp<d>`
    ("data_parallel", its table's replicas). A PlanError naming the unit when it is not in `units`, its device is
    out of range, or its sharding is bad."""
    tables = units.by_name()
    given = sharding_of or {}
    groups = _siblings(units, placement)
    n = topology.num_devices
    used = [MemoryBreakdown()] * n
    for name, d in placement.items():
        table = tables.get(name)
        if table is None:
            raise PlanError(f"unit '{name}' is placed but is not a unit of inventory '{units.name}'")
        dev = _device(d)
        if not 0 <= dev < n:
            raise PlanError(f"unit '{name}' placed on device {d!r}; topology has {n} devices")
        ref = parse_unit(name)
        group = groups.get((ref.table, ref.kind), _Siblings(count=1))
        sharding, k = _KIND_SHARDING[ref.kind], group.count
        if ref.kind == "row" and topology.hosts > 1 and len({topology.host_of(x) for x in group.devices}) == 1:
            sharding = "table_row_wise"
        if name in given:
            sharding, k = given[name]
        table_dim = group.width if ref.kind == "column" and sharding == "column_wise" and k == group.count else None
        table_rows = group.rows if ref.kind == "row" and sharding in ("row_wise", "table_row_wise") else None
        used[dev] = used[dev] + unit_memory(table, topology, sharding, k, table_dim=table_dim, table_rows=table_rows)
    return used
