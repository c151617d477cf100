"""A table's feasible shardings on a topology: the one enumeration every sharder chooses from
(docs/architecture/data-model.md, "Tables larger than a device").

`table_options` lists, in a fixed order (fewest units first), what the table's constraints, its module kind and
the memory of one device allow:

* table-wise: the table whole on one device;
* column-wise: k equal column shards for every k the dim allows (widths multiples of 4 and at least
  `min_column_width`: the constraint's `min_partition`, else TorchRec's MIN_CW_DIM of 128 columns, or the dim when
  narrower, so a table of dim <= 128 is cut into no column shards unless its `min_partition` allows); k is at most
  the devices the table may use, since two shards of one table on one device hold the bytes of one wider shard
  (k = 1 only where table-wise is not allowed and column-wise is);
* row-wise: TorchRec's row blocks over every device, block i on device i;
* table-row-wise: the row blocks over the devices of one host, one option per host (topologies with hosts; never
  a sequence table: TorchRec's EmbeddingCollection has no such sharding);
* data-parallel: a replica on every device, for small tables (DP_MAX_BYTES of weights; any size the constraints
  ask for by naming only data_parallel).

Each option's units must fit one device alone (device and host memory, dreamshard.placement.device_memory); the
shard count (`TableOption.shards`, as constraints count it: row-wise the blocks, data-parallel 1) within
`min_shards` / `max_shards`; the kernel one the constraints allow (dreamshard.placement.kernels).

Memory tiers: on cuda devices every sharded option in device memory (HBM, the `fused` kernel) is followed by the
same cut with `fused_uvm_caching` (`TableOption.tier` 1: weights and optimizer state in host memory, a cache of
`load_factor` of them on the device), where the constraints leave the kernel open and do not `enforce_hbm`. A
cached lookup misses into host memory at a fraction of HBM's bandwidth, so a cached layout costs more than the same
layout in HBM: the planners take one only when no layout in HBM packs (dreamshard.placement.layout), as TorchRec's
planner, whose cost model prices the tiers, does for a table larger than every device. The option's units carry
the kernel as their constraint, so every packer counts their memory by it. Constraints that
contradict the topology (a device it lacks, another device group, more shards than the table can be cut into, no
kernel) are `constraint_problem`, one line; a table no option fits is `no_option_error`, one line.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from dreamshard.errors import InfeasiblePlacementError, PlanError, format_gb
from dreamshard.placement.device_memory import unit_needs
from dreamshard.placement.expand import even_bounds, replica_table, row_shard_table, shard_table, split_counts
from dreamshard.placement.kernels import device_kernel_problem, kernel_for
from dreamshard.values import GB, Inventory, ShardingType, Table, TableConstraints, Topology
from dreamshard.values.constraints import CACHING_KERNEL
from dreamshard.values.units import row_blocks

#: The largest table the planners replicate on their own (its gradient is all-reduced every step).
DP_MAX_BYTES = 4 << 20
#: The narrowest column shard a plan cuts unless a table's `min_partition` says otherwise: TorchRec's MIN_CW_DIM.
#: On GPUs a narrow shard is one more small lookup and one more all-to-all slice per step.
MIN_COLUMN_WIDTH = 128


def min_column_width(table: Table) -> int:
    """The narrowest column shard of `table`: its `min_partition`, else MIN_COLUMN_WIDTH, or its dim when narrower
    (TorchRec's rule: such a table keeps its columns together)."""
    c = table.constraints
    if c is not None and c.min_partition is not None:
        return c.min_partition
    return min(MIN_COLUMN_WIDTH, table.embedding_dim)


def column_split_counts(table: Table) -> list[int]:
    """Every k >= 2 that cuts `table` into equal column shards no narrower than `min_column_width` (ascending)."""
    narrowest = min_column_width(table)
    return [k for k in split_counts(table.embedding_dim) if table.embedding_dim // k >= narrowest]


@dataclass(frozen=True)
class TableOption:
    """One way to shard `table`: its type, shard count and kernel; `devices` are the devices of its fixed units
    (row blocks in row order, or every device for replicas); empty when its units may go to any allowed device."""

    table: Table
    kind: ShardingType
    shards: int
    kernel: str
    devices: tuple[int, ...] = ()

    @property
    def label(self) -> str:
        if self.kind == "column_wise":
            base = f"column_wise x{self.shards}"
        elif self.kind == "table_row_wise":
            base = f"table_row_wise on devices {self.devices[0]}..{self.devices[-1]}"
        else:
            base = str(self.kind)
        return base + (f" with {self.kernel}" if self.tier else "")

    @property
    def tier(self) -> int:
        """0: the table in device memory (HBM); 1: cached from host memory (a layout the planners take only when no
        tier-0 layout packs)."""
        return 1 if self.kernel == CACHING_KERNEL and _kernel_open(self.table) else 0

    def _unit_table(self) -> Table:
        """The table with the option's memory tier as its kernel constraint, for an option of tier 1."""
        if not self.tier:
            return self.table
        c = self.table.constraints or TableConstraints()
        return self.table.model_copy(update={"constraints": c.model_copy(update={"compute_kernels": (self.kernel,)})})

    def units(self) -> list[Table]:
        """The option's plan units (dreamshard.placement.expand names them), carrying its kernel when it is a
        memory tier the table's constraints leave open."""
        t = self._unit_table()
        if self.kind == "table_wise":
            return [t]
        if self.kind == "column_wise":
            return [shard_table(t, a, b) for a, b in even_bounds(t.embedding_dim, self.shards)]
        if self.kind == "data_parallel":
            return [replica_table(t, d) for d in self.devices]
        return [row_shard_table(t, a, b) for a, b in row_blocks(t.num_embeddings, len(self.devices))]

    def fixed(self) -> dict[str, int]:
        """{unit: device} of the units whose device the type decides (row blocks, replicas)."""
        if not self.devices:
            return {}
        return {u.name: d for u, d in zip(self.units(), self.devices, strict=True)}


def _kernel_open(table: Table) -> bool:
    """The table's constraints let a planner choose its memory tier: fused and the caching kernel both allowed,
    all of it not kept in device memory (`enforce_hbm`)."""
    c = table.constraints
    return c is None or (c.allows_kernel("fused") and c.allows_kernel(CACHING_KERNEL) and not c.enforce_hbm)


def allowed_devices(table: Table, topology: Topology) -> tuple[int, ...]:
    """The devices the table's units may occupy: its `devices` constraint (those in range), else every device."""
    pin = table.constraints.devices if table.constraints is not None else None
    n = topology.num_devices
    return every_device(n) if pin is None else tuple(sorted(d for d in pin if d < n))


@functools.lru_cache(maxsize=64)
def every_device(num_devices: int) -> tuple[int, ...]:
    """(0, 1, ..., num_devices - 1), one tuple shared by every unconstrained table (10,000 tables on 1,024 devices
    would otherwise hold 10 million entries)."""
    return tuple(range(num_devices))


def _allows(table: Table, kind: str, shards: int) -> bool:
    c = table.constraints
    return c is None or (c.allows_type(kind) and c.allows_shards(shards))


def _fits(units: list[Table], topology: Topology) -> bool:
    """Every unit alone within one device's memory and its host's."""
    needs = unit_needs(Inventory(name="option", tables=tuple(units)), topology)
    host = topology.host_memory_per_device_gb * GB
    return all(m.total <= topology.usable_memory_bytes and m.host <= host for m in needs.values())


def _column_counts(table: Table, topology: Topology) -> list[int]:
    """The column shard counts the dim, the narrowest shard and the devices the table may use allow (ascending)."""
    counts = column_split_counts(table)
    if not _allows(table, "table_wise", 1):
        counts = [1, *counts]
    return [k for k in counts if k <= len(allowed_devices(table, topology))]


def _candidates(table: Table, topology: Topology) -> list[TableOption]:
    """Every option the constraints and the module kind allow, before memory (in the module docstring's order)."""
    n, local = topology.num_devices, topology.local_world_size
    pinned = allowed_devices(table, topology)
    everywhere = len(pinned) == n
    found: list[tuple[ShardingType, int, tuple[int, ...]]] = [("table_wise", 1, ())]
    found += [("column_wise", k, ()) for k in _column_counts(table, topology)]
    if everywhere and n > 1:
        found.append(("row_wise", n, tuple(range(n))))
    if table.pooled and topology.hosts > 1:
        hosts = [tuple(range(h * local, (h + 1) * local)) for h in range(topology.hosts)]
        found += [("table_row_wise", local, devs) for devs in hosts if set(devs) <= set(pinned)]
    c = table.constraints
    asked = c is not None and c.sharding_types is not None and set(c.sharding_types) <= {"data_parallel"}
    if everywhere and (table.size_bytes <= DP_MAX_BYTES or asked):
        found.append(("data_parallel", 1, tuple(range(n))))
    out: list[TableOption] = []
    for kind, shards, devices in found:
        kernel = kernel_for(table, kind, topology.device_type)
        if kernel is None or not _allows(table, kind, shards) or not pinned:
            continue
        if kind in ("row_wise", "table_row_wise") and any(b <= a for a, b in row_blocks(table.num_embeddings, shards)):
            continue  # too few rows for that many blocks
        out.append(TableOption(table, kind, shards, kernel, devices))
    if topology.device_type == "cuda" and _kernel_open(table):  # the host tier, after every option in HBM
        out += [replace(o, kernel=CACHING_KERNEL) for o in out if o.kernel == "fused"]
    return out


def table_options(table: Table, topology: Topology) -> list[TableOption]:
    """The table's feasible shardings on `topology` (module docstring), fewest units first; empty when none fits
    (`constraint_problem` / `no_option_error` say why)."""
    c = table.constraints
    if c is not None and c.device_group is not None and c.device_group != topology.device_type:
        return []
    return [o for o in _candidates(table, topology) if _fits(o.units(), topology)]


def max_shards(table: Table, topology: Topology) -> int:
    """The most shards the table can be cut into here, whatever the memory: its narrowest column shards
    (`min_column_width`, at most one per device), row blocks over every device."""
    columns = max([1, *column_split_counts(table)])
    return max(min(columns, topology.num_devices), topology.num_devices if table.num_embeddings >= 2 else 1)


def constraint_problem(table: Table, topology: Topology) -> str | None:
    """One line naming the table and the constraint when its constraints contradict the topology or each other;
    None when they do not (the table may still fit nowhere: `no_option_error`)."""
    c = table.constraints
    if c is None:
        return None
    n = topology.num_devices
    where = f"table '{table.name}': constraint"
    if c.device_group is not None and c.device_group != topology.device_type:
        return f"{where} device_group '{c.device_group}', but the topology's devices are {topology.device_type}"
    if c.devices is not None and (outside := [d for d in c.devices if d >= n]):
        return f"{where} devices {list(c.devices)} names device {outside[0]}; the topology has {n} (0..{n - 1})"
    top = max_shards(table, topology)
    if c.min_shards is not None and c.min_shards > top:
        return (
            f"{where} min_shards {c.min_shards}: it can be cut into at most {top} shards on {n} devices "
            f"(dim {table.embedding_dim}, {table.num_embeddings} rows)"
        )
    if problem := device_kernel_problem(table, topology.device_type):
        return problem
    if c.sharding_types is not None and not any(kernel_for(table, k, topology.device_type) for k in c.sharding_types):
        kernels = list(c.compute_kernels or ())
        return f"{where} compute_kernels {kernels} run none of sharding_types {list(c.sharding_types)}"
    if c.compute_kernels is not None and not any(
        kernel_for(table, k, topology.device_type) for k in ("table_wise", "data_parallel")
    ):
        return f"{where} compute_kernels {list(c.compute_kernels)}: none is a kernel a plan can run"
    if not _candidates(table, topology):
        return f"{where}s {c.given()} leave no sharding type on {n} devices"
    return None


def no_option_error(table: Table, topology: Topology) -> PlanError | InfeasiblePlacementError:
    """Why `table` has no option: its constraints' contradiction (a PlanError), or memory: the finest cuts its
    constraints allow do not fit one device (InfeasiblePlacementError naming the table and the limit)."""
    problem = constraint_problem(table, topology)
    if problem is not None:
        return PlanError(problem)
    cap = topology.usable_memory_bytes
    need = unit_needs(Inventory(name="t", tables=(table,)), topology)[table.name].total
    tried = _candidates(table, topology)
    columns = max((o.shards for o in tried if o.kind == "column_wise"), default=0)
    parts = ["whole"] if not columns else []
    if columns:
        parts.append(
            f"even split into {columns} column shards of {table.embedding_dim // columns} columns "
            f"({format_gb(table.size_gb / columns)} each)"
        )
    if any(o.kind == "row_wise" for o in tried):
        parts.append(f"in {topology.num_devices} row blocks ({format_gb(table.size_gb / topology.num_devices)} each)")
    limited = f" within its constraints {table.constraints.given()}" if table.constraints is not None else ""
    cached = any(o.tier for o in tried)
    tiers = f", in device memory or cached from host memory ({CACHING_KERNEL})" if cached else ""
    hint = f"larger than one device {' or '.join(parts)}{tiers}{limited}; add memory per device or shrink the table"
    return InfeasiblePlacementError(table.name, need / GB, cap / GB, hint)


def options_or_error(table: Table, topology: Topology) -> list[TableOption]:
    """`table_options`, or the one-line error saying why there is none."""
    options = table_options(table, topology)
    if not options:
        raise no_option_error(table, topology)
    return options


def check_constraints(inventory: Inventory, topology: Topology) -> None:
    """A PlanError naming the first table whose constraints contradict the topology (`constraint_problem`)."""
    for t in inventory.tables:
        problem = constraint_problem(t, topology)
        if problem is not None:
            raise PlanError(problem)
