"""THE index budget: the bound on the lookups one generation of synthetic indices may hold (docs/architecture/rules.md,
"Where each rule lives").

Lookups cannot be scaled down the way rows are (they are the work measured), so what a generation would hold is
sized before anything is drawn: 8 bytes (int64) per lookup and per offset, for every batch of every table generated
together, at most `MAX_INDEX_BYTES`. A device whose batches do not fit cycles through fewer of them
(`batches_within_budget`); one batch that does not fit is an `IndexBudgetError` naming the table.
"""

from __future__ import annotations

from collections.abc import Sequence

from dreamshard.errors import InventoryError, format_gb
from dreamshard.values import GB, Table

#: The most bytes of int64 indices and offsets one generation may hold (generating them takes a few times
#: that transiently).
MAX_INDEX_BYTES = 2 * 1024**3
#: Bytes per index and per offset (int64).
INDEX_ITEM_BYTES = 8

#: What the budget sees of a table: its name and its features' pooling factors (one entry without features).
LookupSpec = tuple[str, tuple[float, ...]]


class IndexBudgetError(InventoryError):
    """A table's lookups at a batch size would take more index memory than MAX_INDEX_BYTES."""


def lookup_spec(table: Table) -> LookupSpec:
    return table.name, tuple(f.pooling_factor for f in table.feature_list)


def _lookups(spec: LookupSpec, batch_size: int) -> int:
    return sum(int(round(float(p) * batch_size)) for p in spec[1])


def _spec_bytes(spec: LookupSpec, batch_size: int, num_batches: int) -> int:
    return num_batches * INDEX_ITEM_BYTES * (_lookups(spec, batch_size) + len(spec[1]) * batch_size + 1)


def index_bytes(tables: Sequence[Table], batch_size: int, num_batches: int = 1) -> int:
    """Bytes of the int64 indices and offsets of `num_batches` batches of each of `tables` (nothing is drawn)."""
    return sum(_spec_bytes(lookup_spec(t), batch_size, num_batches) for t in tables)


def _check(specs: Sequence[LookupSpec], batch_size: int, num_batches: int, what: str) -> int:
    total = sum(_spec_bytes(s, batch_size, num_batches) for s in specs)
    if total <= MAX_INDEX_BYTES or not specs:
        return total
    worst = max(specs, key=lambda s: _lookups(s, batch_size))
    raise IndexBudgetError(
        f"table '{worst[0]}': pooling_factor {sum(worst[1]):g} at batch size {batch_size} is "
        f"{_lookups(worst, batch_size):,} lookups per batch; {what} would take {format_gb(total / GB)} of int64 "
        f"indices and offsets, above the limit of {format_gb(MAX_INDEX_BYTES / GB)} (MAX_INDEX_BYTES, "
        f"dreamshard.inventory.index_budget); nothing was generated: lower pooling_factor or the batch size"
    )


def check_index_budget(tables: Sequence[Table], batch_size: int, num_batches: int = 1, what: str = "") -> int:
    """THE index budget: the bytes `index_bytes` gives, or IndexBudgetError above MAX_INDEX_BYTES (call it before
    generating anything)."""
    if not what:
        what = f"{num_batches} batch(es) of {'it' if len(tables) == 1 else f'the {len(tables)} tables'}"
    return _check([lookup_spec(t) for t in tables], batch_size, num_batches, what)


def batches_within_budget(tables: Sequence[Table], batch_size: int, num_batches: int, what: str) -> int:
    """How many of `num_batches` batches of each of `tables` fit MAX_INDEX_BYTES (at least one: IndexBudgetError
    when even one batch does not fit)."""
    one = check_index_budget(tables, batch_size, 1, what)
    return max(1, min(num_batches, MAX_INDEX_BYTES // max(1, one)))


def check_lookup_budget(name: str, pooling_factor: float, batch_size: int, what: str) -> int:
    """The index budget for one batch of one table given by its name and pooling factor (a simulated batch)."""
    return _check([(name, (float(pooling_factor),))], batch_size, 1, what)
