"""Synthetic lookup indices for one table that match its pooling factor and reuse histogram.

Profiling backends feed FBGEMM's table-batched embedding with a batch of (indices, offsets) per table.
``synthesize_indices`` draws such a batch so that the table's two access statistics hold *for that batch*:

1. **Bag lengths** (pooling). The target total is ``L = round(pooling_factor * batch_size)``.
   Per-sample lengths are drawn around the pooling factor -- Bernoulli(p) for p <= 1 (one-hot and
   sparse features), ``1 + gamma-Poisson`` (mean p - 1, shape 2: over-dispersed, heavy right tail like
   multi-hot DLRM features) for p > 1 -- and then corrected one lookup at a time on random samples
   until they sum to exactly ``L``. The realised mean is therefore ``round(p * B) / B``: within
   ``0.5 / B`` of p. ``pooling_factor == 0`` gives empty bags.

2. **Row counts** (reuse). Without a histogram, the ``L`` rows are uniform in ``[0, num_rows)``.
   With histogram h, the batch's unique rows are given access counts whose bins follow h:
   a. Bin k covers integer counts ``[lo_k, hi_k]`` (1, 2, 3-4, 5-8, ..., 16385-32768, and 32769-65536
      for the open last bin). With bin-midpoint counts the number of unique rows is
      ``U = L / sum_k h_k (lo_k + hi_k) / 2``, capped at ``num_rows``.
   b. ``n_k`` = largest-remainder rounding of ``U * h_k`` (exact integer counts per bin).
   c. Within each bin, counts are drawn log-uniformly (a Zipf-like density inside a power-of-two
      range), then the total is corrected to exactly ``L`` by moving counts inside their own bins
      (raising counts that have room below ``hi_k`` or lowering those above ``lo_k``, in random order),
      so the histogram is untouched. Only if that is impossible (U was capped by ``num_rows``, or a
      tiny batch) are counts pushed outside their bins -- the histogram then shifts towards heavier
      reuse, which is the only honest way to put L lookups on fewer rows.
   d. The U unique rows are distinct random rows of ``[0, num_rows)``; each is repeated by its count,
      the ``L`` lookups are shuffled and cut into bags by the offsets.
   The realised histogram differs from h only by the rounding in (b): L1 <= (#non-empty bins) / U,
   i.e. below 0.1 once a batch touches a few hundred unique rows (see tests/test_indices.py).

``num_rows`` (default ``table.num_embeddings``) lets the profiler scale big tables down: indices stay in
``[0, num_rows)`` and, as long as ``num_rows >= U``, pooling and reuse are unchanged. Everything is
vectorised numpy: 2048 samples x pooling 100 takes a few milliseconds.

**The index budget** (THE bound on generated lookups; docs/architecture.md, "Where each rule lives"). Lookups
cannot be scaled down the way rows are (the lookups ARE the work measured), so what one generation would hold is
sized before anything is drawn: ``index_bytes`` = 8 bytes (int64) per lookup (``round(p x B)`` per feature) and
per offset (``num_outputs x B + 1`` per table), for every batch of every table generated together. At most
``MAX_INDEX_BYTES`` (2 GiB; generating them takes a few times that transiently):

- a measurement (``profiling.base.TorchBackend.time_device``) draws up to ``NUM_BATCHES`` batches of each table of
  its device and cycles through them; a device whose batches do not fit draws fewer (``batches_within_budget``:
  the first k of the same seeded batches, so a batch never depends on the other tables; such batches are far
  larger than any cache, so one distinct batch measures the same), and one batch that does not fit is refused;
- one batch of one table (``synthesize_indices``, and a reuse histogram's simulated batch,
  ``inventory.synth.zipf_histogram``: synth, presets) is refused above it.

A refusal is ``IndexBudgetError`` naming the table (the one with the most lookups), its ``pooling_factor``, the
batch size and the limit. The weights beside them are bounded by the profiling scaling rule
(``profiling/scaling.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dreamshard.errors import InventoryError, format_gb
from dreamshard.inventory.histogram import BIN_HI, BIN_LO, effective_histogram, reuse_histogram
from dreamshard.values import GB, Table

__all__ = [
    "MAX_INDEX_BYTES",
    "IndexBudgetError",
    "batches_within_budget",
    "check_index_budget",
    "check_lookup_budget",
    "index_bytes",
    "reuse_histogram",
    "synthesize_bag_lengths",
    "synthesize_indices",
    "synthesize_row_counts",
]

#: The most bytes of int64 indices and offsets one generation may hold (module docstring, "The index budget").
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
        f"dreamshard.inventory.indices); nothing was generated: lower pooling_factor or the batch size"
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


_DISPERSION_SHAPE = 2.0  # gamma shape of the gamma-Poisson extra lookups (smaller = heavier tail)


def _fix_total(values: np.ndarray, target: int, lo: np.ndarray, hi: np.ndarray, rng: np.random.Generator) -> int:
    """Move ``values`` (in place) towards sum ``target`` within [lo, hi] element-wise; return what is left."""
    diff = int(target - int(values.sum()))
    if diff == 0 or values.size == 0:
        return diff
    room = (hi - values) if diff > 0 else (values - lo)
    room = np.maximum(room, 0)
    order = rng.permutation(values.size)
    cum = np.cumsum(room[order])
    need = abs(diff)
    # Take full room from the first rows of the random order, and part of the room of the next one.
    n_full = int(np.searchsorted(cum, need, side="right"))
    step = np.zeros(values.size, dtype=np.int64)
    step[order[:n_full]] = room[order[:n_full]]
    taken = int(cum[n_full - 1]) if n_full > 0 else 0
    if n_full < values.size and taken < need:
        step[order[n_full]] = need - taken
        taken = need
    values += step if diff > 0 else -step
    return int(np.sign(diff)) * (need - taken)


def synthesize_bag_lengths(pooling_factor: float, batch_size: int, rng: np.random.Generator) -> np.ndarray:
    """Per-sample bag lengths (int64, ``batch_size`` of them) summing to ``round(pooling_factor * batch_size)``."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    p = float(pooling_factor)
    target = int(round(p * batch_size))
    if target <= 0:
        return np.zeros(batch_size, dtype=np.int64)
    if p <= 1.0:
        lengths = (rng.random(batch_size) < p).astype(np.int64)
    else:
        lam = rng.gamma(_DISPERSION_SHAPE, (p - 1.0) / _DISPERSION_SHAPE, size=batch_size)
        lengths = 1 + rng.poisson(lam).astype(np.int64)
    cap = np.full(batch_size, target, dtype=np.int64)  # no bag can exceed the total
    left = _fix_total(lengths, target, np.zeros(batch_size, dtype=np.int64), cap, rng)
    assert left == 0
    return lengths


def _largest_remainder(weights: np.ndarray, total: int) -> np.ndarray:
    raw = weights * total
    base = np.floor(raw).astype(np.int64)
    short = total - int(base.sum())
    if short > 0:
        base[np.argsort(-(raw - base), kind="stable")[:short]] += 1
    return base


def synthesize_row_counts(histogram: np.ndarray, total: int, max_rows: int, rng: np.random.Generator) -> np.ndarray:
    """Access counts of the unique rows of one batch: ``total`` lookups, binned like ``histogram``."""
    if total <= 0:
        return np.zeros(0, dtype=np.int64)
    h = np.asarray(histogram, dtype=np.float64)
    h = h / h.sum()
    mid = 0.5 * (BIN_LO + BIN_HI)
    n_unique = int(round(total / float((h * mid).sum())))
    n_unique = max(1, min(n_unique, max_rows, total))
    n_bin = _largest_remainder(h, n_unique)
    bins = np.repeat(np.arange(h.size), n_bin)
    lo, hi = BIN_LO[bins], BIN_HI[bins]
    # Log-uniform inside each bin: more rows near the bottom of the range, as in a Zipf tail.
    u = rng.random(bins.size)
    counts = np.floor(np.exp(np.log(lo) + u * (np.log(hi + 1.0) - np.log(lo)))).astype(np.int64)
    counts = np.clip(counts, lo, hi)
    left = _fix_total(counts, total, lo, hi, rng)
    if left != 0:
        # Infeasible inside the bins (rows capped or tiny batch): leave the bins, keep every row >= 1.
        ones = np.ones_like(counts)
        cap = np.full_like(counts, total)  # no row can exceed the total
        left = _fix_total(counts, total, ones, cap, rng)
    assert left == 0 and int(counts.sum()) == total
    return counts


def synthesize_indices(
    table: Table,
    batch_size: int,
    rng: np.random.Generator,
    num_rows: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """One batch of lookups for ``table``: (indices int64, offsets int64 of length batch_size + 1).

    Indices lie in ``[0, num_rows)`` (default ``table.num_embeddings``); see the module docstring.
    """
    rows = int(table.num_embeddings if num_rows is None else num_rows)
    if rows < 1:
        raise ValueError(f"table '{table.name}': num_rows must be >= 1, got {rows}")
    check_lookup_budget(table.name, table.pooling_factor, batch_size, "one batch of it")  # before any draw
    lengths = synthesize_bag_lengths(table.pooling_factor, batch_size, rng)
    offsets = np.zeros(batch_size + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    if total == 0:
        return np.zeros(0, dtype=np.int64), offsets
    hist = effective_histogram(table)  # declared, else the assumed one (inventory.histogram)
    if hist is None:
        return rng.integers(0, rows, size=total, dtype=np.int64), offsets
    counts = synthesize_row_counts(np.asarray(hist), total, rows, rng)
    unique_rows = rng.choice(rows, size=counts.size, replace=False).astype(np.int64)
    indices = np.repeat(unique_rows, counts)
    rng.shuffle(indices)
    return indices, offsets
