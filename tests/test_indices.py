"""Synthetic lookups match a table's pooling factor and per-batch reuse histogram."""

from __future__ import annotations

import numpy as np
import pytest

from dreamshard.inventory.histogram import BIN_HI, BIN_LO, l1_distance
from dreamshard.inventory.indices import reuse_histogram, synthesize_bag_lengths, synthesize_indices
from dreamshard.inventory.synth import synth_inventory, zipf_histogram
from dreamshard.values import NUM_REUSE_BINS, Table

BATCH = 2048
# Largest-remainder rounding leaves each bin's row count within 1 of U*h_k, so the realised histogram is
# within (#non-empty bins)/U <= 17/U of the target in L1. With U >= 170 unique rows that is <= 0.1.
L1_TOL = 0.1
MIN_UNIQUE = 170


def _hist(*pairs: tuple[int, float]) -> tuple[float, ...]:
    h = [0.0] * NUM_REUSE_BINS
    for k, v in pairs:
        h[k] = v
    return tuple(h)


def expected_unique(pooling: float, hist: tuple[float, ...]) -> float:
    return round(pooling * BATCH) / float(np.dot(hist, 0.5 * (BIN_LO + BIN_HI)))


def test_reuse_histogram_bins_edges() -> None:
    # counts 1, 2, 3, 4, 5, 8, 9 -> bins 0, 1, 2, 2, 3, 3, 4
    idx = np.concatenate([np.full(c, r) for r, c in enumerate([1, 2, 3, 4, 5, 8, 9])])
    h = reuse_histogram(np.random.default_rng(0).permutation(idx))
    assert h.shape == (NUM_REUSE_BINS,)
    np.testing.assert_allclose(h[:5], np.array([1, 1, 2, 2, 1]) / 7)
    assert h[5:].sum() == 0
    big = np.concatenate([np.full(32768, 1), np.full(32769, 2)])
    hb = reuse_histogram(big)
    assert hb[15] == 0.5 and hb[16] == 0.5
    assert reuse_histogram(np.zeros(0, dtype=np.int64)).sum() == 0


@pytest.mark.parametrize("pooling", [0.0, 0.05, 0.5, 1.0, 1.17, 3.3, 20.0, 100.0])
def test_bag_lengths_mean_matches_pooling(pooling: float) -> None:
    rng = np.random.default_rng(1)
    lengths = synthesize_bag_lengths(pooling, BATCH, rng)
    assert lengths.shape == (BATCH,) and lengths.dtype == np.int64 and (lengths >= 0).all()
    assert lengths.sum() == round(pooling * BATCH)
    if pooling > 0:
        assert abs(lengths.mean() - pooling) / pooling < 0.05
    if pooling > 1:
        assert lengths.std() > 0  # not every bag the same length


def test_zero_pooling_gives_empty_bags() -> None:
    t = Table(name="z", num_embeddings=10, embedding_dim=8, pooling_factor=0.0)
    idx, off = synthesize_indices(t, 64, np.random.default_rng(0))
    assert idx.size == 0 and off.dtype == np.int64 and off.shape == (65,) and (off == 0).all()


def test_no_histogram_draws_the_assumed_popularity() -> None:
    """A table that declares no histogram is measured with the assumed one (inventory.histogram.assumed_histogram,
    Zipf 1.05): some hot rows, most rows touched a few times, and the batch's reuse is the assumed histogram's."""
    from dreamshard.inventory.histogram import assumed_histogram, l1_distance, reuse_histogram

    t = Table(name="u", num_embeddings=100_000, embedding_dim=8, pooling_factor=10.0)
    idx, off = synthesize_indices(t, 2048, np.random.default_rng(0))
    assert idx.dtype == np.int64 and off[-1] == idx.size == 10 * 2048
    assert idx.min() >= 0 and idx.max() < 100_000
    counts = np.bincount(idx, minlength=100_000)
    assert counts.max() > 200 and (counts > 0).sum() < 0.2 * 100_000  # hot rows; far from uniform
    assert l1_distance(reuse_histogram(idx), assumed_histogram(100_000, 10.0)) < 0.1


def test_a_vanishing_pooling_gets_the_all_once_histogram_without_a_numpy_warning() -> None:
    """Groups expected to see no lookup at all (their expected count underflows to 0) have Poisson mass 0 at every
    count: log(0) is -inf there, not a RuntimeWarning in the user's log (hypothesis found one)."""
    import warnings

    from dreamshard.inventory.histogram import assumed_histogram

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        hist = assumed_histogram(1_000_000, 5e-324)
    assert hist is not None and hist[0] == 1.0 and sum(hist) == 1.0


HAND_CASES = [
    ("one-hot-flat", 1.0, _hist((0, 1.0))),
    ("sparse-flat", 0.4, _hist((0, 1.0))),
    ("mild", 5.0, _hist((0, 0.5), (1, 0.2), (2, 0.15), (3, 0.1), (4, 0.05))),
    (
        "skewed",
        30.0,
        _hist(
            (0, 0.3),
            (1, 0.1),
            (2, 0.1),
            (3, 0.1),
            (4, 0.1),
            (5, 0.1),
            (6, 0.05),
            (7, 0.05),
            (8, 0.04),
            (9, 0.03),
            (10, 0.02),
            (11, 0.01),
        ),
    ),
    ("hot", 100.0, _hist((6, 0.2), (8, 0.3), (10, 0.3), (12, 0.2))),
    ("very-hot-tail", 100.0, _hist((0, 0.95), (3, 0.03), (14, 0.015), (16, 0.005))),
]


@pytest.mark.parametrize("label,pooling,hist", HAND_CASES, ids=[c[0] for c in HAND_CASES])
def test_indices_match_pooling_and_histogram(label: str, pooling: float, hist: tuple[float, ...]) -> None:
    assert expected_unique(pooling, hist) >= MIN_UNIQUE, "case must be feasible for a batch of 2048"
    t = Table(name=label, num_embeddings=2_000_000, embedding_dim=16, pooling_factor=pooling, access_histogram=hist)
    idx, off = synthesize_indices(t, BATCH, np.random.default_rng(7))
    assert off.shape == (BATCH + 1,) and off[0] == 0 and (np.diff(off) >= 0).all() and off[-1] == idx.size
    assert abs(idx.size / BATCH - pooling) / pooling < 0.05
    assert 0 <= idx.min() and idx.max() < t.num_embeddings
    assert l1_distance(reuse_histogram(idx), hist) <= L1_TOL


def test_synth_inventory_tables_are_reproduced() -> None:
    """Every feasible table of a synthetic inventory (varied pooling and Zipf skew) is matched."""
    inv = synth_inventory(60, seed=3)
    rng = np.random.default_rng(0)
    checked = 0
    for t in inv.tables:
        if t.access_histogram is None or expected_unique(t.pooling_factor, t.access_histogram) < MIN_UNIQUE:
            continue
        idx, _ = synthesize_indices(t, BATCH, rng)
        assert abs(idx.size / BATCH - t.pooling_factor) / t.pooling_factor < 0.05, t.name
        assert l1_distance(reuse_histogram(idx), t.access_histogram) <= L1_TOL, t.name
        checked += 1
    assert checked >= 40


def test_scaled_down_rows_keep_pooling_and_reuse() -> None:
    hist = zipf_histogram(5_000_000, 20.0, 1.1, np.random.default_rng(0))
    assert hist is not None
    t = Table(name="big", num_embeddings=5_000_000, embedding_dim=64, pooling_factor=20.0, access_histogram=hist)
    idx, _ = synthesize_indices(t, BATCH, np.random.default_rng(1), num_rows=50_000)
    assert idx.max() < 50_000 and idx.min() >= 0
    assert abs(idx.size / BATCH - 20.0) / 20.0 < 0.05
    assert l1_distance(reuse_histogram(idx), hist) <= L1_TOL


def test_too_few_rows_stay_in_range_and_keep_pooling() -> None:
    hist = _hist((0, 1.0))  # wants 10 * 2048 distinct rows, only 100 exist
    t = Table(name="tiny", num_embeddings=100, embedding_dim=8, pooling_factor=10.0, access_histogram=hist)
    idx, off = synthesize_indices(t, BATCH, np.random.default_rng(0))
    assert off[-1] == idx.size == 10 * BATCH
    assert idx.min() >= 0 and idx.max() < 100
    assert len(np.unique(idx)) == 100  # every row used; the histogram shifts to heavier reuse


def test_deterministic_given_rng_seed() -> None:
    t = Table(name="d", num_embeddings=10_000, embedding_dim=8, pooling_factor=4.5, access_histogram=HAND_CASES[2][2])
    a = synthesize_indices(t, 256, np.random.default_rng(42))
    b = synthesize_indices(t, 256, np.random.default_rng(42))
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
