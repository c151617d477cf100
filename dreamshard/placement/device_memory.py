"""Device memory as a training job needs it, counted the way TorchRec's storage estimator counts it (torchrec
1.9.2, `torchrec/distributed/planner/shard_estimators.py`), so that both planners agree on what fits.

A unit (a whole table, a column shard, a row shard or a replica, cut to its size) takes its weights, its
optimizer's state and, under `memory_model: torchrec`, the input/output buffers of one batch (`unit_memory`);
`device_memory` sums the units of each device. Memory has two tiers on a cuda device: its own (HBM) and the host's
(DDR), where a `fused_uvm` table keeps its weights and a `fused_uvm_caching` one too, with a cache of `load_factor`
of them on the device (the kernel: dreamshard.placement.kernels). On a cpu device there is one tier. The formulas
per sharding type: docs/architecture/data-model.md, "Device memory"; tests/test_storage.py and
tests/test_memory_tiers.py check them against TorchRec's estimator.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping
from dataclasses import dataclass
from typing import SupportsIndex

from dreamshard.errors import PlanError
from dreamshard.placement.kernels import cache_load_factor, enforce_hbm, kernel_for
from dreamshard.values import GB, HOST_KERNELS, SHARDING_TYPES, Inventory, ShardingType, Table, Topology, parse_unit

__all__ = [
    "SHARDING_TYPES",
    "MemoryBreakdown",
    "ShardingType",
    "device_memory",
    "io_bytes",
    "optimizer_bytes",
    "unit_memory",
    "unit_needs",
]

#: Bytes of one input index (TorchRec's BIGINT_DTYPE: TBE converts int32 indices to int64).
INDEX_BYTES = 8
#: Optimizer state per weight element (TorchRec's `_get_optimizer_multipler`); row-wise Adagrad is per row.
ADAM_STATES = 2
#: A device cache's auxiliary state per row of the table (int32 index map) and per cached row (int64 slot state and
#: LRU timestamp): TorchRec's `_calculate_cache_aux_state_sizes`, rows x (4 + load factor x 16) bytes.
CACHE_INDEX_BYTES = 4
CACHE_SLOT_BYTES = 16
#: The sharding type of each kind of unit name (dreamshard.values.units); row units are row_wise or table_row_wise.
_KIND_SHARDING: dict[str, str] = {
    "table": "table_wise",
    "column": "column_wise",
    "row": "row_wise",
    "replica": "data_parallel",
}


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes one unit (or one device) needs: table weights, optimizer state, input/output buffers, and on a cuda
    device the part of weights and optimizer state kept in host memory (`host`, DDR) and a caching kernel's device
    cache (`cache`). `total` is the device's own memory (HBM): what `memory_per_device_gb` bounds."""

    weights: int = 0
    optimizer: int = 0
    io: int = 0
    cache: int = 0  # a fused_uvm_caching table's device cache: cached rows, their optimizer state, its aux state
    host: int = 0  # weights and optimizer state in host memory (DDR): fused_uvm and fused_uvm_caching on cuda

    @property
    def total(self) -> int:
        """Device memory (HBM; on a cpu device, all of it)."""
        return self.weights + self.optimizer + self.io + self.cache - self.host

    @property
    def device(self) -> int:
        return self.total

    @property
    def total_gb(self) -> float:
        return self.total / GB

    def gb(self) -> dict[str, float]:
        """{weights, optimizer, io, cache, host, total} in GB (1 GB = 2^30 bytes, as `memory_per_device_gb`)."""
        return {
            "weights": self.weights / GB,
            "optimizer": self.optimizer / GB,
            "io": self.io / GB,
            "cache": self.cache / GB,
            "host": self.host / GB,
            "total": self.total / GB,
        }

    def __add__(self, other: MemoryBreakdown) -> MemoryBreakdown:
        return MemoryBreakdown(
            self.weights + other.weights,
            self.optimizer + other.optimizer,
            self.io + other.io,
            self.cache + other.cache,
            self.host + other.host,
        )


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
    unit: Table,
    optimizer: str,
    sharding: str = "table_wise",
    num_shards: int = 1,
    table_dim: int | None = None,
    weights: int | None = None,
) -> int:
    """Optimizer state of `unit` (TorchRec `_calculate_optimizer_sizes`: ceil(weights x multiplier)); `weights`:
    of that many bytes of it (a device cache), by default all of them.

    Row-wise Adagrad's multiplier is 1 / the whole table's dim: for a column shard that is `table_dim`, by
    default its width x `num_shards` (equal shards, as TorchRec cuts them)."""
    weights = unit.size_bytes if weights is None else weights
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
    1 / num_shards of the indices. docs/architecture/data-model.md, "Device memory"."""
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
    kernel: str | None = None,
    load_factor: float | None = None,
) -> MemoryBreakdown:
    """What `unit` needs on its device (and its host) under `topology`'s optimizer and memory model.

    `num_shards`: how many shards the table is cut into (row shards: for the indices each receives; column
    shards: for row-wise Adagrad's share); `table_dim`: a column shard's whole table width when the shards are
    not equal; `table_rows`: a row shard's whole table rows when its pooling is its share of the lookups
    (`dreamshard.placement.expand.row_shard_table`); `kernel` and `load_factor`: the unit's compute kernel and
    cache share, by default what its constraints give (dreamshard.placement.kernels). A PlanError naming the unit
    for an unknown sharding type, num_shards < 1, or a table_dim / table_rows smaller than the unit."""
    _check(unit, sharding, num_shards, table_dim, table_rows)
    opt = optimizer_bytes(unit, topology.optimizer, sharding, num_shards, table_dim)
    io = 0
    if topology.memory_model == "torchrec":
        io = sum(io_bytes(unit, topology, sharding, num_shards, table_rows))
    kernel = (
        kernel
        or kernel_for(unit, sharding, topology.device_type)
        or ("dense" if sharding == "data_parallel" else "fused")
    )
    if topology.device_type != "cuda" or kernel not in HOST_KERNELS or enforce_hbm(unit):
        return MemoryBreakdown(weights=unit.size_bytes, optimizer=opt, io=io)
    cache = 0
    if kernel == "fused_uvm_caching":
        factor = load_factor if load_factor is not None else cache_load_factor(unit, kernel)
        cache = _cache_bytes(unit, topology.optimizer, sharding, num_shards, table_dim, factor or 0.0)
    return MemoryBreakdown(weights=unit.size_bytes, optimizer=opt, io=io, cache=cache, host=unit.size_bytes + opt)


def _cache_bytes(
    unit: Table, optimizer: str, sharding: str, num_shards: int, table_dim: int | None, factor: float
) -> int:
    """A `fused_uvm_caching` unit's device cache as TorchRec's `calculate_shard_storages` counts it: round(weights
    x load factor) of its rows with their optimizer state, plus the cache's auxiliary state (rows x (4 + load
    factor x 16) bytes)."""
    cached = round(unit.size_bytes * factor)
    state = optimizer_bytes(unit, optimizer, sharding, num_shards, table_dim, weights=cached)
    aux = math.ceil(unit.num_embeddings * (CACHE_INDEX_BYTES + factor * CACHE_SLOT_BYTES))
    return cached + state + aux


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


def unit_needs(
    units: Inventory,
    topology: Topology,
    placement: Mapping[str, int] | None = None,
    sharding_of: Mapping[str, tuple[str, int]] | None = None,
    kernels: Mapping[str, str] | None = None,
    load_factors: Mapping[str, float] | None = None,
) -> dict[str, MemoryBreakdown]:
    """What each unit of `units` needs wherever it goes (`device_memory` says how its sharding is read; `placement`
    only tells a table-row-wise table from a row-wise one). `kernels` / `load_factors`: a plan's, by table name
    (the others' come from their constraints, dreamshard.placement.kernels)."""
    given = sharding_of or {}
    where = placement or {}
    groups = _siblings(units, where)
    out: dict[str, MemoryBreakdown] = {}
    for table in units.tables:
        name = table.name
        ref = parse_unit(name)
        group = groups.get((ref.table, ref.kind), _Siblings(count=1))
        sharding, k = _KIND_SHARDING[ref.kind], group.count
        if ref.kind == "row" and topology.hosts > 1 and len({topology.host_of(x) for x in group.devices}) == 1:
            sharding = "table_row_wise"
        if name in given:
            sharding, k = given[name]
        table_dim = group.width if ref.kind == "column" and sharding == "column_wise" and k == group.count else None
        table_rows = group.rows if ref.kind == "row" and sharding in ("row_wise", "table_row_wise") else None
        out[name] = unit_memory(
            table,
            topology,
            sharding,
            k,
            table_dim=table_dim,
            table_rows=table_rows,
            kernel=(kernels or {}).get(ref.table),
            load_factor=(load_factors or {}).get(ref.table),
        )
    return out


def device_memory(
    units: Inventory,
    placement: Mapping[str, int],
    topology: Topology,
    sharding_of: Mapping[str, tuple[str, int]] | None = None,
    kernels: Mapping[str, str] | None = None,
    load_factors: Mapping[str, float] | None = None,
) -> list[MemoryBreakdown]:
    """The memory of each device: the sum of `unit_memory` over the units `placement` ({unit name: device}) puts
    there. `sharding_of` gives (sharding, num_shards) per unit; by default each unit's comes from its name
    (dreamshard.values.units) and the other units of its table in `units`: a whole table is ("table_wise", 1), a
    column shard `t@a:b` ("column_wise", its table's column shards; their widths sum to the table's), a row shard
    `t@ra:b` ("row_wise", its table's row shards; "table_row_wise" when they sit on one host of several; its
    pooling read as its share of the lookups, the table's rows the last shard's end), a replica `t@dp<d>`
    ("data_parallel", its table's replicas). `kernels` / `load_factors`: a plan's (`Plan.kernels`,
    `Plan.cache_load_factors`). A PlanError naming the unit when it is not in `units`, its device is out of range,
    or its sharding is bad."""
    tables = units.by_name()
    n = topology.num_devices
    for name, d in placement.items():
        if name not in tables:
            raise PlanError(f"unit '{name}' is placed but is not a unit of inventory '{units.name}'")
        if not 0 <= _device(d) < n:
            raise PlanError(f"unit '{name}' placed on device {d!r}; topology has {n} devices")
    needs = unit_needs(units, topology, placement, sharding_of, kernels, load_factors) if placement else {}
    used = [MemoryBreakdown()] * n
    for name, d in placement.items():
        dev = _device(d)
        used[dev] = used[dev] + needs[name]
    return used
