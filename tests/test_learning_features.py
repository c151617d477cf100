"""Table features: 26 numbers per table (21 of the paper, the batch size, 4 linear), fixed normalisation, independent
of the task's other tables."""

from __future__ import annotations

import numpy as np

from dreamshard.inventory.synth import synth_inventory
from dreamshard.learning.features import DEFAULT_HISTOGRAM, NUM_FEATURES, table_features, tables_features
from dreamshard.learning.metrics import mape, rankdata, spearman
from dreamshard.values import Table


def test_shape_and_finite_over_extreme_tables():
    tables = [
        Table(name="tiny", num_embeddings=1, embedding_dim=4, pooling_factor=0.0),
        Table(name="huge", num_embeddings=2_000_000_000, embedding_dim=1024, pooling_factor=5000.0),
    ]
    f = tables_features(tables)
    assert f.shape == (2, NUM_FEATURES) == (2, 26)
    assert np.isfinite(f).all()
    assert (f[1, :4] > f[0, :4]).all()  # monotone in dim, rows, pooling, size
    assert (f[:, 4] == f[0, 4]).all()  # one batch size for all


def test_missing_histogram_is_the_assumed_one():
    from dreamshard.inventory.histogram import assumed_histogram

    t = Table(name="a", num_embeddings=100, embedding_dim=16, pooling_factor=2.0)
    assumed = assumed_histogram(100, 2.0)
    assert np.allclose(table_features(t)[5:22], assumed) and assumed[0] < 0.5  # 4096 lookups into 100 rows: reuse
    # linear: lookups, width, working set (2 x 2048 lookups, at most the 100 rows x 64 B), fp16 flag
    assert np.allclose(table_features(t)[22:], (16 * 2.0 / 1000.0, 16 / 100.0, 100 * 16 * 4 / 2**20, 0.0))
    assert table_features(t.model_copy(update={"dtype": "fp16"}))[25] == 1.0
    h = (0.5, 0.5) + (0.0,) * 15
    t2 = t.model_copy(update={"access_histogram": h})
    assert np.allclose(table_features(t2)[5:22], h)
    empty = t.model_copy(update={"pooling_factor": 0.0})  # no lookups: nothing to assume
    assert tuple(table_features(empty)[5:22]) == DEFAULT_HISTOGRAM


def test_batch_size_scales_the_per_batch_volumes():
    t = Table(name="a", num_embeddings=10**6, embedding_dim=32, pooling_factor=3.0)
    ref, half = table_features(t, 2048), table_features(t, 1024)
    assert half[4] < ref[4]  # the batch feature is monotone
    assert np.allclose(half[22:24], ref[22:24] / 2)  # lookups and output width per batch
    assert np.isclose(half[24], ref[24] / 2)  # 6144 vs 3072 unique rows of 10^6: the working set halves
    assert np.array_equal(half[:4], ref[:4]) and np.array_equal(half[5:22], ref[5:22])
    per_table = tables_features([t, t], [2048, 1024])
    assert np.array_equal(per_table[0], ref) and np.array_equal(per_table[1], half)


def test_features_do_not_depend_on_task_composition():
    pool = synth_inventory(40, seed=3)
    target = pool.tables[7]
    alone = tables_features([target])[0]
    rng = np.random.default_rng(0)
    for _ in range(5):
        others = [
            pool.tables[i]
            for i in rng.choice(40, size=int(rng.integers(1, 39)), replace=False)
            if pool.tables[i] != target
        ]
        mixed = others + [target]
        rng.shuffle(mixed)
        row = tables_features(mixed)[mixed.index(target)]
        assert np.array_equal(row, alone)


def test_metrics_helpers():
    assert rankdata(np.array([10.0, 30.0, 20.0, 20.0])).tolist() == [1.0, 4.0, 2.5, 2.5]
    assert spearman(np.array([1, 2, 3, 4.0]), np.array([10, 20, 30, 40.0])) == 1.0
    assert spearman(np.array([1, 2, 3, 4.0]), np.array([4, 3, 2, 1.0])) == -1.0
    assert abs(mape(np.array([110.0, 90.0]), np.array([100.0, 100.0])) - 0.1) < 1e-12
