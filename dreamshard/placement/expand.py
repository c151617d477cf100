"""Plan units: a plan's whole tables, column shards, row shards and replicas, each a Table of its own for memory,
profiling and the cost model (docs/architecture/data-model.md, "Sharding types"; dreamshard.values.units names them).

A column shard keeps the table's rows and statistics with `embedding_dim` = its width; a row shard keeps the dim,
with its rows and their share of the lookups; a replica is the whole table. `expand` turns a plan into its units,
`fold_units` folds a {unit: device} map back, and the checks here say whether shards tile their table.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from dreamshard.errors import PlanError
from dreamshard.values import (
    DIM_ALIGN,
    ColumnShard,
    Inventory,
    Plan,
    RowShard,
    Table,
    Topology,
    dim_problem,
    parse_unit,
    replica_name,
    row_shard_name,
    shard_name,
)
from dreamshard.values.units import row_blocks


def even_bounds(dim: int, k: int) -> list[tuple[int, int]]:
    """`k` equal column ranges of a `dim`-wide table; PlanError unless dim / k is a legal width (`dim_problem`)."""
    if k < 1 or dim % k or dim_problem(dim // k):
        raise PlanError(f"cannot split {dim} columns into {k} equal shards that are multiples of {DIM_ALIGN}")
    w = dim // k
    return [(i * w, (i + 1) * w) for i in range(k)]


def split_counts(dim: int, max_shards: int | None = None) -> list[int]:
    """Every k >= 2 that splits a `dim`-wide table into equal shards of a legal width (ascending)."""
    out = []
    top = dim // DIM_ALIGN if max_shards is None else min(dim // DIM_ALIGN, max_shards)
    for k in range(2, top + 1):
        if dim % k == 0 and not dim_problem(dim // k):
            out.append(k)
    return out


def shard_table(table: Table, start: int, end: int) -> Table:
    """The unit for columns [start, end) of `table`."""
    return table.model_copy(update={"name": shard_name(table.name, start, end), "embedding_dim": end - start})


def check_column_shards(table: Table, shards: Sequence[ColumnShard]) -> None:
    """Shards must tile [0, dim) exactly, each of a legal width (PlanError naming the table otherwise)."""
    ordered = sorted(shards, key=lambda sh: sh.start)
    pos = 0
    for sh in ordered:
        if sh.start != pos:
            raise PlanError(
                f"column shards of table '{table.name}' do not tile its {table.embedding_dim} columns "
                f"(gap or overlap at column {pos})"
            )
        if dim_problem(sh.width):
            raise PlanError(
                f"column shard {sh.start}:{sh.end} of table '{table.name}' is {sh.width} columns wide; "
                f"shards must be multiples of {DIM_ALIGN}"
            )
        pos = sh.end
    if pos != table.embedding_dim:
        raise PlanError(f"column shards of table '{table.name}' cover {pos} of its {table.embedding_dim} columns")


def row_shard_table(table: Table, start: int, end: int) -> Table:
    """The unit for rows [start, end) of `table`: its share of the rows and of the lookups."""
    share = (end - start) / table.num_embeddings
    features = tuple(f.model_copy(update={"pooling_factor": f.pooling_factor * share}) for f in table.features)
    return table.model_copy(
        update={
            "name": row_shard_name(table.name, start, end),
            "num_embeddings": end - start,
            "pooling_factor": table.pooling_factor * share,
            "features": features,
        }
    )


def replica_table(table: Table, device: int) -> Table:
    """The unit of a data-parallel table on `device` (the whole table)."""
    return table.model_copy(update={"name": replica_name(table.name, device)})


def unit_table(tables: Mapping[str, Table], unit: str) -> Table:
    """The table the unit named `unit` runs as (a whole table, a column shard, a row shard or a replica of one of
    `tables`); PlanError naming the unit when its table is unknown or its range is not inside the table."""
    if unit in tables:
        return tables[unit]
    ref = parse_unit(unit)
    table = tables.get(ref.table)
    if table is None:
        raise PlanError(f"unit '{unit[:80]}' is of table '{ref.table[:80]}', which is not in the inventory")
    if ref.kind == "replica":
        return replica_table(table, ref.device)
    size = table.embedding_dim if ref.kind == "column" else table.num_embeddings
    if ref.kind == "table" or ref.end > size:
        what = "columns" if ref.kind == "column" else "rows"
        raise PlanError(f"unit '{unit[:80]}' is not a unit of table '{table.name}' ({size} {what})")
    if ref.kind == "column":
        if dim_problem(ref.end - ref.start):
            raise PlanError(
                f"column shard '{unit[:80]}' is {ref.end - ref.start} columns wide; shards must be "
                f"multiples of {DIM_ALIGN}"
            )
        return shard_table(table, ref.start, ref.end)
    return row_shard_table(table, ref.start, ref.end)


def with_units(inventory: Inventory, names: Iterable[str]) -> Inventory:
    """`inventory` with each table that has units among `names` (names that are not its tables: `unit_table`)
    replaced, in its place, by those units. A measurement of units (a profile kind that row-shards or replicates,
    a refinement of a mixed plan) is made on this inventory; its records keep the inventory's own name and
    fingerprint."""
    tables = inventory.by_name()
    units: dict[str, list[Table]] = {}
    for name in dict.fromkeys(names):
        if name not in tables:
            units.setdefault(parse_unit(name).table, []).append(unit_table(tables, name))
    if not units:
        return inventory
    return Inventory(name=inventory.name, tables=tuple(u for t in inventory.tables for u in units.get(t.name, [t])))


def brief(items: Sequence[object], keep: int = 8) -> str:
    """`items` as a list for an error line, at most `keep` of them (a hostile file may list 100k shards: the
    message stays one short line)."""
    shown = list(items[:keep])
    more = len(items) - len(shown)
    return f"{shown}" if not more else f"{str(shown)[:-1]}, ... ({more} more, {len(items)} in all)]"


def row_sharding_devices(table: Table, devices: Sequence[int], topology: Topology) -> str:
    """'row_wise' or 'table_row_wise' for row shards on `devices` (in row order); PlanError unless they are every
    device in order, or every device of one host in order (the layouts TorchRec's row-wise kernels run)."""
    n, local = topology.num_devices, topology.local_world_size
    if list(devices) == list(range(n)):
        return "row_wise"
    host = topology.host_of(devices[0]) if devices else 0
    if topology.hosts > 1 and list(devices) == list(range(host * local, (host + 1) * local)):
        return "table_row_wise"
    where = f"devices 0..{n - 1} in order" + (
        f", or the {local} devices of one host in order" if topology.hosts > 1 else ""
    )
    raise PlanError(
        f"row shards of table '{table.name}' are on devices {brief(list(devices))}; row-wise sharding needs {where}"
    )


def check_row_shards(table: Table, shards: Sequence[RowShard], topology: Topology) -> str:
    """Row shards must be TorchRec's row blocks (`dreamshard.values.units.row_blocks`) on every device or on the devices
    of one host, in order; returns the sharding type. PlanError naming the table otherwise."""
    ordered = sorted(shards, key=lambda rs: rs.start)
    kind = row_sharding_devices(table, [rs.device for rs in ordered], topology)
    want = row_blocks(table.num_embeddings, len(ordered))
    if any(b <= a for a, b in want):
        raise PlanError(f"table '{table.name}' has {table.num_embeddings} rows: too few for {len(ordered)} row shards")
    got = [(rs.start, rs.end) for rs in ordered]
    if got != want:
        raise PlanError(
            f"row shards of table '{table.name}' are {brief(got)}; {len(ordered)} row shards of its "
            f"{table.num_embeddings} rows are {brief(want)} (ceil(rows / shards) rows each, as TorchRec cuts them)"
        )
    return kind


def expand(
    inventory: Inventory,
    placement: Mapping[str, int],
    column_shards: Mapping[str, Sequence[ColumnShard]],
    row_shards: Mapping[str, Sequence[RowShard]] | None = None,
    data_parallel: Sequence[str] = (),
    topology: Topology | None = None,
) -> tuple[Inventory, dict[str, int]]:
    """(inventory of units, {unit: device}): whole tables as they are, split tables as their shards, data-parallel
    tables as one replica per device of `topology` (needed, with the row shards' check, when either is given).

    Raises PlanError if a split table is unknown or its shards are not a legal layout. Whole-table names are
    passed through untouched (checking them against the inventory is the placement validator's job).
    """
    rows = row_shards or {}
    if not column_shards and not rows and not data_parallel:
        return inventory, dict(placement)
    tables = inventory.by_name()
    for name in (*column_shards, *rows, *data_parallel):
        if name not in tables:
            raise PlanError(f"plan shards table '{name}', which is not in inventory '{inventory.name}'")
    if (rows or data_parallel) and topology is None:
        raise PlanError("row-wise and data-parallel tables need the plan's topology to expand")
    for name, shards in column_shards.items():
        check_column_shards(tables[name], shards)
    devices = range(0)  # where replicas go: every device of the topology (there is one when any table has them)
    if topology is not None:
        for name, rshards in rows.items():
            check_row_shards(tables[name], rshards, topology)
        devices = range(topology.num_devices)
    replicated = set(data_parallel)
    units: list[Table] = []
    unit_placement: dict[str, int] = {}
    for t in inventory.tables:
        if t.name in column_shards:
            for sh in sorted(column_shards[t.name], key=lambda s: s.start):
                u = shard_table(t, sh.start, sh.end)
                units.append(u)
                unit_placement[u.name] = sh.device
        elif t.name in rows:
            for rs in sorted(rows[t.name], key=lambda s: s.start):
                u = row_shard_table(t, rs.start, rs.end)
                units.append(u)
                unit_placement[u.name] = rs.device
        elif t.name in replicated:
            for d in devices:
                u = replica_table(t, d)
                units.append(u)
                unit_placement[u.name] = d
        else:
            units.append(t)
    unit_placement.update({k: int(v) for k, v in placement.items()})
    return Inventory(name=inventory.name, tables=tuple(units)), unit_placement


def expand_plan(inventory: Inventory, plan: Plan) -> tuple[Inventory, dict[str, int]]:
    """The units of `plan` over `inventory` and where each one goes."""
    return expand(inventory, plan.placement, plan.column_shards, plan.row_shards, plan.data_parallel, plan.topology)


@dataclass(frozen=True)
class Folded:
    """A {unit: device} map folded back into a plan's fields."""

    placement: dict[str, int]
    column_shards: dict[str, tuple[ColumnShard, ...]]
    row_shards: dict[str, tuple[RowShard, ...]]
    data_parallel: tuple[str, ...]

    def plan_fields(self) -> dict[str, object]:
        return {
            "placement": self.placement,
            "column_shards": self.column_shards,
            "row_shards": self.row_shards,
            "data_parallel": self.data_parallel,
        }


def fold_units(inventory: Inventory, unit_placement: Mapping[str, int]) -> Folded:
    """Inverse of `expand`: a {unit: device} map back to a plan's placement, shards and data-parallel tables."""
    placement: dict[str, int] = {}
    shards: dict[str, list[ColumnShard]] = {}
    rows: dict[str, list[RowShard]] = {}
    replicated: list[str] = []
    names = set(inventory.table_names)
    for unit, d in unit_placement.items():
        ref = parse_unit(unit) if unit not in names else None
        if ref is None or ref.kind == "table":
            placement[unit] = int(d)
        elif ref.kind == "column":
            shards.setdefault(ref.table, []).append(ColumnShard(start=ref.start, end=ref.end, device=int(d)))
        elif ref.kind == "row":
            rows.setdefault(ref.table, []).append(RowShard(start=ref.start, end=ref.end, device=int(d)))
        elif ref.table not in replicated:
            replicated.append(ref.table)
    return Folded(
        placement,
        {t: tuple(sorted(v, key=lambda sh: sh.start)) for t, v in shards.items()},
        {t: tuple(sorted(v, key=lambda rs: rs.start)) for t, v in rows.items()},
        tuple(replicated),
    )


def split_inventory(inventory: Inventory, splits: Mapping[str, int]) -> Inventory:
    """The units of `inventory` when table t is cut into `splits[t]` equal column shards (others stay whole)."""
    if not splits:
        return inventory
    units: list[Table] = []
    for t in inventory.tables:
        k = splits.get(t.name, 1)
        if k <= 1:
            units.append(t)
        else:
            units.extend(shard_table(t, a, b) for a, b in even_bounds(t.embedding_dim, k))
    return Inventory(name=inventory.name, tables=tuple(units))
