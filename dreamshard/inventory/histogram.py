"""The 17-bin per-batch reuse ("access") histogram (docs/architecture/data-model.md, "Data model").

For one batch of lookups into one table, every *unique* row is accessed c >= 1 times. Bin k holds the
fraction of unique rows whose count falls in (2^(k-1), 2^k] -- bin 0 is (0, 1], bin 1 is (1, 2],
bin 2 is (2, 4], ..., bin 15 is (16384, 32768] -- and bin 16 is (32768, inf).
For an integer count c >= 1 the bin is ``min(16, ceil(log2 c))`` == ``min(16, (c - 1).bit_length())``.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from dreamshard.values import NUM_REUSE_BINS, Table

#: Smallest and largest integer access count of each bin (the open last bin is capped at 2 * 32768
#: for synthesis; any count above 32768 lands in it).
BIN_LO: np.ndarray = np.array([1] + [2 ** (k - 1) + 1 for k in range(1, NUM_REUSE_BINS)], dtype=np.int64)
BIN_HI: np.ndarray = np.array([2**k for k in range(NUM_REUSE_BINS - 1)] + [2**16], dtype=np.int64)


def count_bins(counts: np.ndarray) -> np.ndarray:
    """Bin index (0..16) of each positive integer access count."""
    c = np.asarray(counts, dtype=np.int64)
    if c.size and int(c.min()) < 1:
        raise ValueError("access counts must be >= 1")
    # frexp(c - 1) gives the exponent e with (c - 1) = m * 2^e, m in [0.5, 1): e == (c - 1).bit_length().
    _, e = np.frexp((c - 1).astype(np.float64))
    return np.minimum(e.astype(np.int64), NUM_REUSE_BINS - 1)


def histogram_from_counts(counts: np.ndarray) -> np.ndarray:
    """17 fractions of unique rows per access-count bin; all zeros when there are no rows."""
    c = np.asarray(counts, dtype=np.int64)
    out = np.zeros(NUM_REUSE_BINS, dtype=np.float64)
    if c.size == 0:
        return out
    np.add.at(out, count_bins(c), 1.0)
    return out / c.size


def reuse_histogram(indices: np.ndarray) -> np.ndarray:
    """Reuse histogram of ONE batch of lookups (flat row indices of one table).

    Returns a float64 array of 17 fractions summing to 1, or all zeros for an empty batch.
    """
    idx = np.asarray(indices).ravel()
    if idx.size == 0:
        return np.zeros(NUM_REUSE_BINS, dtype=np.float64)
    _, counts = np.unique(idx, return_counts=True)
    return histogram_from_counts(counts)


def normalise_histogram(h: np.ndarray, decimals: int = 6) -> tuple[float, ...]:
    """Round a histogram for storage while keeping its sum exactly 1 (the remainder goes to the largest bin)."""
    a = np.asarray(h, dtype=np.float64)
    total = float(a.sum())
    if a.shape != (NUM_REUSE_BINS,) or total <= 0:
        raise ValueError(f"expected {NUM_REUSE_BINS} non-negative bins with a positive sum")
    r = np.round(a / total, decimals)
    r[int(np.argmax(r))] += 1.0 - float(r.sum())
    r = np.clip(r, 0.0, None)
    return tuple(float(round(x, decimals + 2)) for x in r)


def l1_distance(a: np.ndarray | tuple[float, ...], b: np.ndarray | tuple[float, ...]) -> float:
    """L1 distance between two histograms (0 = identical, 2 = disjoint)."""
    return float(np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)).sum())


#: What a table that declares no access histogram is assumed to look like (planning, profiling, the simulator):
#: Zipf-like row popularity with this exponent (the classic heavy tail the Criteo presets also assume), one batch at
#: the reference batch size. Production embedding tables are skewed; "every row touched once" (no reuse) is the
#: rare, cache-hostile case.
ASSUMED_ZIPF_EXPONENT = 1.05
_REFERENCE_BATCH = 2048
_GRID = 1500  # rank groups of the analytic histogram
_EXACT_BELOW = 40.0  # expected counts below this get the exact Poisson split over bins, above it their mean's bin
_MAX_EXACT_COUNT = 160


_EXACT_COUNTS = np.arange(1, _MAX_EXACT_COUNT + 1, dtype=np.int64)  # k = 1..160, split exactly over the bins
_LOG_FACTORIALS = np.array([math.lgamma(k + 1.0) for k in _EXACT_COUNTS])
_K_BINS = count_bins(_EXACT_COUNTS)  # the bin of each exact count k


@lru_cache(maxsize=16384)
def assumed_histogram(
    num_rows: int, pooling_factor: float, exponent: float = ASSUMED_ZIPF_EXPONENT
) -> tuple[float, ...] | None:
    """The reuse histogram of one batch of a Zipf(`exponent`) table (0: uniform ids), computed (no sampling, so the
    same table always gets the same histogram): ranks grouped geometrically, each group's rows hit Poisson(expected
    count) times; None when a batch has no lookups."""
    lookups = float(pooling_factor) * _REFERENCE_BATCH
    if not lookups > 0 or num_rows < 1:
        return None
    edges = np.unique(np.round(np.geomspace(1.0, num_rows + 1.0, _GRID + 1)).astype(np.int64))
    width = np.diff(edges).astype(np.float64)  # rows per group
    rank = np.sqrt(edges[:-1] * (edges[1:] - 1.0).clip(min=edges[:-1]))  # a group's middle rank
    weight = rank**-exponent
    expected = lookups * weight / float((width * weight).sum())  # expected count of one row of the group
    mass = np.zeros(NUM_REUSE_BINS, dtype=np.float64)
    big = expected >= _EXACT_BELOW
    if big.any():  # concentrated around its mean: the mean's bin
        bins = count_bins(np.maximum(1, np.round(expected[big])).astype(np.int64))
        mass += np.bincount(bins, weights=width[big], minlength=NUM_REUSE_BINS)
    small = ~big
    if small.any():
        lam = expected[small][:, None]
        with np.errstate(divide="ignore"):  # a group expected to see no lookup at all (lam 0): log 0 = -inf, pmf 0
            log_pmf = _EXACT_COUNTS * np.log(lam) - lam - _LOG_FACTORIALS
        rows_hit_k = width[small] @ np.exp(log_pmf)  # rows expected to be hit exactly k times, k = 1..160
        mass += np.bincount(_K_BINS, weights=rows_hit_k, minlength=NUM_REUSE_BINS)
    if not mass.sum() > 0:
        return None
    return normalise_histogram(mass)


def effective_histogram(table: Table) -> tuple[float, ...] | None:
    """The table's declared access histogram, else the assumed one (`assumed_histogram`); None without lookups."""
    if table.access_histogram is not None:
        return table.access_histogram
    return assumed_histogram(int(table.num_embeddings), float(table.pooling_factor))
