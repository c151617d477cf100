"""Synthetic DLRM-like inventories: deterministic, realistic ranges, valid and consistent histograms."""

from __future__ import annotations

import numpy as np
import pytest

from dreamshard.errors import ConfigError
from dreamshard.inventory.synth import MAX_ROWS, MIN_ROWS, synth_inventory, zipf_histogram, zipf_ranks
from dreamshard.values import NUM_REUSE_BINS


@pytest.fixture(scope="module")
def inv200():
    return synth_inventory(200, seed=11)


def test_deterministic_per_seed() -> None:
    a, b, c = synth_inventory(30, 5), synth_inventory(30, 5), synth_inventory(30, 6)
    assert a == b and a.fingerprint() == b.fingerprint()
    assert a.fingerprint() != c.fingerprint()
    # a table does not depend on how many tables follow it
    assert synth_inventory(10, 5).tables == a.tables[:10]


def test_names_dims_and_name(inv200) -> None:
    assert inv200.table_names[:3] == ["t0000", "t0001", "t0002"]
    assert inv200.name == "synth-200-s11"
    assert synth_inventory(3, 0, name="pool").name == "pool"
    assert {t.embedding_dim for t in inv200.tables} == {16, 32, 64, 128}
    inv = synth_inventory(20, 1, dims=(8, 24))
    assert {t.embedding_dim for t in inv.tables} <= {8, 24}
    assert all(t.embedding_dim % 4 == 0 for t in inv.tables)


def test_dlrm_like_statistics(inv200) -> None:
    rows = np.array([t.num_embeddings for t in inv200.tables])
    pf = np.array([t.pooling_factor for t in inv200.tables])
    assert rows.min() >= MIN_ROWS and rows.max() <= MAX_ROWS
    assert (rows < 10_000).sum() >= 40 and (rows > 1_000_000).sum() >= 10  # heavy-tailed: small and huge
    assert pf.min() >= 0 and pf.max() <= 100
    assert ((pf >= 0.9) & (pf <= 1.3)).mean() >= 0.25  # many near one-hot features
    assert (pf < 1).sum() >= 5  # some sparse features
    assert (pf > 20).sum() >= 5  # a heavy multi-hot tail
    assert np.median(pf) < pf.mean()  # right-skewed


def test_histograms_valid_and_varied(inv200) -> None:
    first_bin = []
    for t in inv200.tables:
        assert t.access_histogram is not None
        h = np.array(t.access_histogram)
        assert h.shape == (NUM_REUSE_BINS,) and (h >= 0).all() and abs(h.sum() - 1) < 1e-6
        first_bin.append(h[0])
    first_bin = np.array(first_bin)
    assert (first_bin > 0.9).sum() >= 20  # flat (mostly touched once per batch)
    assert (first_bin < 0.3).sum() >= 10  # strongly reused


def test_zipf_histogram_follows_skew_and_pooling() -> None:
    rng = np.random.default_rng(0)
    flat = zipf_histogram(5_000_000, 1.0, 0.3, rng)
    hot = zipf_histogram(1_000, 50.0, 1.2, rng)
    assert flat is not None and hot is not None
    assert flat[0] > 0.99
    assert hot[0] < 0.5 and sum(hot[8:]) > 0.01  # rows read hundreds of times per batch
    assert zipf_histogram(100, 0.0, 1.0, rng) is None


def test_zipf_ranks_in_range_and_skewed() -> None:
    r = zipf_ranks(1000, 1.2, 100_000, np.random.default_rng(0))
    assert r.min() >= 0 and r.max() < 1000
    counts = np.bincount(r, minlength=1000)
    assert counts[0] > counts[10] > counts[500]


@pytest.mark.parametrize("dims", [(), (10,), (0,), (16, -4)])
def test_bad_dims_rejected(dims) -> None:
    with pytest.raises(ConfigError, match="dims"):
        synth_inventory(3, 0, dims=dims)


def test_bad_num_tables() -> None:
    with pytest.raises(ConfigError, match="num_tables"):
        synth_inventory(0, 0)
