"""Column shards: a table split into column ranges, each placed on one device.

A plan's *units* are its whole tables plus the column shards of its split tables. A shard is a table of its
own for every purpose that matters to placement (memory, profiling, the cost model): it keeps the table's
rows, pooling factor, reuse histogram and dtype, with `embedding_dim` = its width. Shards are named
``table@start:end`` (`dreamshard.types.shard_name`, which `Plan.units` uses too); '@' is outside the character
set allowed in table names (dreamshard.inventory validation), so a shard name never collides with a table. A
shard's width obeys the embedding-dim rule (`dreamshard.tables.dim_problem`: a positive multiple of 4, as FBGEMM's
TBE and TorchRec's column-wise sharding want).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from dreamshard.errors import PlanError
from dreamshard.types import (
    DIM_ALIGN,
    ColumnShard,
    Inventory,
    Plan,
    Table,
    dim_problem,
    parse_shard_name,
    shard_name,
)

#: DIM_ALIGN under the name dreamshard.sharders.torchrec_sharder imports; the rule itself is dim_problem.
COLUMN_ALIGN = DIM_ALIGN


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
        raise PlanError(
            f"column shards of table '{table.name}' cover {pos} of its {table.embedding_dim} columns"
        )


def expand(
    inventory: Inventory, placement: Mapping[str, int], column_shards: Mapping[str, Sequence[ColumnShard]]
) -> tuple[Inventory, dict[str, int]]:
    """(inventory of units, {unit: device}): whole tables as they are, split tables as their shards.

    Raises PlanError if a split table is unknown or its shards do not tile it. Whole-table names are passed
    through untouched (checking them against the inventory is the placement validator's job).
    """
    if not column_shards:
        return inventory, dict(placement)
    tables = inventory.by_name()
    units: list[Table] = []
    unit_placement: dict[str, int] = {}
    for name, shards in column_shards.items():
        if name not in tables:
            raise PlanError(f"plan splits table '{name}', which is not in inventory '{inventory.name}'")
        check_column_shards(tables[name], shards)
    for t in inventory.tables:
        if t.name in column_shards:
            for sh in sorted(column_shards[t.name], key=lambda s: s.start):
                u = shard_table(t, sh.start, sh.end)
                units.append(u)
                unit_placement[u.name] = sh.device
        else:
            units.append(t)
    unit_placement.update({k: int(v) for k, v in placement.items()})
    return Inventory(name=inventory.name, tables=tuple(units)), unit_placement


def expand_plan(inventory: Inventory, plan: Plan) -> tuple[Inventory, dict[str, int]]:
    """The units of `plan` over `inventory` and where each one goes."""
    return expand(inventory, plan.placement, plan.column_shards)


def fold(
    inventory: Inventory, unit_placement: Mapping[str, int]
) -> tuple[dict[str, int], dict[str, tuple[ColumnShard, ...]]]:
    """Inverse of `expand`: a {unit: device} map back to (placement, column_shards) over `inventory`'s tables."""
    placement: dict[str, int] = {}
    shards: dict[str, list[ColumnShard]] = {}
    names = set(inventory.table_names)
    for unit, d in unit_placement.items():
        parsed = parse_shard_name(unit)
        if parsed is not None and unit not in names:
            table, start, end = parsed
            shards.setdefault(table, []).append(ColumnShard(start=start, end=end, device=int(d)))
        else:
            placement[unit] = int(d)
    ordered = {t: tuple(sorted(v, key=lambda sh: sh.start)) for t, v in shards.items()}
    return placement, ordered


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
