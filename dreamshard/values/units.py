"""Sharding types and the names of plan units (docs/architecture/data-model.md, "Sharding types").

A table is placed in one of TorchRec's sharding types:

* table-wise: whole, on one device (`Plan.placement`);
* column-wise: column ranges, each on one device (`Plan.column_shards`; units `table@start:end`);
* row-wise: row ranges over *every* device, block i on device i (`Plan.row_shards`; units `table@r<start>:<end>`);
* table-row-wise: row ranges over the devices of *one host*, block i on that host's i-th device (the same field;
  the devices say which type it is);
* data-parallel: a replica on every device (`Plan.data_parallel`; units `table@dp<device>`).

Row blocks follow TorchRec's rule (`row_blocks`: ceil(rows / k) rows each, the last one the rest), because its
row-wise kernels bucketise ids by that block size: a plan with other row ranges could not run in DMP. '@' is
outside the table-name character set (dreamshard.values.names), so no unit name collides with a table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from dreamshard.values.tables import Number, StrictModel

ShardingType = Literal["table_wise", "column_wise", "row_wise", "table_row_wise", "data_parallel"]
SHARDING_TYPES: tuple[ShardingType, ...] = ("table_wise", "column_wise", "row_wise", "table_row_wise", "data_parallel")
UnitKind = Literal["table", "column", "row", "replica"]

SHARD_SEP = "@"
ROW_TAG = "r"
REPLICA_TAG = "dp"


class _Shard(StrictModel):
    """[start, end) of one table's columns or rows, placed on one device."""

    _what: ClassVar[str] = "shard"
    start: Annotated[int, Number, Field(ge=0)]
    end: Annotated[int, Number, Field(ge=1)]
    device: Annotated[int, Number, Field(ge=0)]

    @model_validator(mode="after")
    def _check(self) -> _Shard:
        if self.end <= self.start:
            raise ValueError(f"{self._what} end {self.end} must be greater than start {self.start}")
        return self


class ColumnShard(_Shard):
    """Columns [start, end) of one table, placed on one device (TorchRec's column-wise sharding)."""

    _what: ClassVar[str] = "column shard"

    @property
    def width(self) -> int:
        return self.end - self.start


class RowShard(_Shard):
    """Rows [start, end) of one table, placed on one device (TorchRec's row-wise and table-row-wise sharding)."""

    _what: ClassVar[str] = "row shard"

    @property
    def rows(self) -> int:
        return self.end - self.start


def shard_name(table: str, start: int, end: int) -> str:
    """A column shard's unit name."""
    return f"{table}{SHARD_SEP}{start}:{end}"


def row_shard_name(table: str, start: int, end: int) -> str:
    return f"{table}{SHARD_SEP}{ROW_TAG}{start}:{end}"


def replica_name(table: str, device: int) -> str:
    return f"{table}{SHARD_SEP}{REPLICA_TAG}{device}"


@dataclass(frozen=True)
class UnitRef:
    """What a unit name says: its table, its kind, and its range (columns or rows) or replica device."""

    table: str
    kind: UnitKind
    start: int = 0
    end: int = 0
    device: int = -1

    @property
    def movable(self) -> bool:
        """Whole tables and column shards can go to any device; row shards and replicas sit where their sharding
        type puts them (block i on device i, a replica on every device)."""
        return self.kind in ("table", "column")


def _range(text: str) -> tuple[int, int] | None:
    start, colon, end = text.partition(":")
    if not colon or not start.isdigit() or not end.isdigit():
        return None
    return int(start), int(end)


def parse_unit(unit: str) -> UnitRef:
    """The table and kind of any unit name (a name without a shard suffix is a whole table)."""
    table, sep, rest = unit.rpartition(SHARD_SEP)
    if sep:
        if rest.startswith(ROW_TAG) and (r := _range(rest[len(ROW_TAG) :])) is not None:
            return UnitRef(table, "row", *r)
        if rest.startswith(REPLICA_TAG) and rest[len(REPLICA_TAG) :].isdigit():
            return UnitRef(table, "replica", device=int(rest[len(REPLICA_TAG) :]))
        if (r := _range(rest)) is not None:
            return UnitRef(table, "column", *r)
    return UnitRef(unit, "table")


def movable(unit: str) -> bool:
    """Whether the unit named `unit` may change device (`UnitRef.movable`)."""
    return parse_unit(unit).movable


def parse_shard_name(unit: str) -> tuple[str, int, int] | None:
    """(table, start, end) of a column-shard unit name, or None for any other unit."""
    ref = parse_unit(unit)
    return (ref.table, ref.start, ref.end) if ref.kind == "column" else None


def row_blocks(rows: int, k: int) -> list[tuple[int, int]]:
    """TorchRec's row blocks of a `rows`-row table over `k` devices: ceil(rows / k) rows each, the last one the
    rest; blocks past the end are empty (a table with fewer rows than that cannot be row-sharded here)."""
    block = max(1, math.ceil(rows / k))
    return [(min(i * block, rows), min((i + 1) * block, rows)) for i in range(k)]


def row_shards_for(rows: int, devices: list[int]) -> tuple[RowShard, ...]:
    """Row shards of a table over `devices` in order (block i on devices[i]); empty blocks are left out."""
    return tuple(
        RowShard(start=a, end=b, device=d)
        for (a, b), d in zip(row_blocks(rows, len(devices)), devices, strict=True)
        if b > a
    )
