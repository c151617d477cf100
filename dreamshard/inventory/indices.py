"""Synthetic lookup indices for one table that match its pooling factor and reuse histogram
(docs/architecture/measuring.md, "Measuring").

``synthesize_indices`` draws one batch of (indices, offsets) so that the table's two access statistics hold *for
that batch*: the bag lengths sum to exactly ``round(pooling_factor x batch_size)`` (`synthesize_bag_lengths`), and
the unique rows get access counts whose bins follow the reuse histogram (`synthesize_row_counts`). Indices lie in
``[0, num_rows)``, so the profiler can scale big tables down without changing either statistic. Every generation
is sized first (dreamshard.inventory.index_budget).
"""

from __future__ import annotations

import numpy as np

from dreamshard.inventory.histogram import BIN_HI, BIN_LO, effective_histogram, reuse_histogram
from dreamshard.inventory.index_budget import (
    MAX_INDEX_BYTES,
    IndexBudgetError,
    batches_within_budget,
    check_index_budget,
    check_lookup_budget,
    index_bytes,
)
from dreamshard.values import Table

# The index budget's names are re-exported: dreamshard.inventory.indices was their home.
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
    """Per-sample bag lengths (int64, ``batch_size`` of them) summing to ``round(pooling_factor * batch_size)``.

    Drawn around the pooling factor p (Bernoulli(p) for p <= 1; 1 + gamma-Poisson with mean p - 1 above it, an
    over-dispersed tail like multi-hot features), then corrected one lookup at a time on random samples."""
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
    """Access counts of the unique rows of one batch: ``total`` lookups, binned like ``histogram``.

    The number of unique rows comes from the bins' midpoints (at most `max_rows`), each bin's share by largest
    remainder; counts are log-uniform inside their bin, then moved inside their own bins until they sum to
    `total`. Only when that cannot work (rows capped, a tiny batch) do counts leave their bins, towards more
    reuse: the only honest way to put `total` lookups on fewer rows."""
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

    Indices lie in ``[0, num_rows)`` (default ``table.num_embeddings``): distinct random rows, each repeated by its
    count, shuffled and cut into bags; uniform rows when the table has no histogram (`effective_histogram`).
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
