"""The table features the cost model and the policy read (docs/architecture/learning.md, "Learning").

Per table: DreamShard's 21 (dim, rows, pooling factor, size = rows x dim, 17 reuse bins, log-scaled), the log
batch size it is looked up at, and 4 linear ones: lookup volume and output width per batch (its output elements
per sample: a sequence table's grow with its lookups), the per-batch working set in MB, and a half-precision flag.
A device is the SUM of its tables' latents, so the linear features let the network form the summed volumes fused
cost grows with; the working set lets it see when a device's tables stop fitting in cache. Scaling is fixed (log1p,
then a constant affine map), so a table's features never depend on which other tables share its task. A table
without an access histogram gets the assumed one (dreamshard.inventory.histogram.effective_histogram).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from dreamshard.inventory.histogram import effective_histogram
from dreamshard.values import NUM_REUSE_BINS, Table

#: Bump when the feature definition or scaling changes: models trained on another spec are rejected.
FEATURE_SPEC_VERSION = "5"
NUM_LINEAR_FEATURES = 4
#: batch size the access histograms (and so the working-set feature) refer to
REFERENCE_BATCH = 2048
NUM_LOG_FEATURES = 5
NUM_FEATURES = NUM_LOG_FEATURES + NUM_REUSE_BINS + NUM_LINEAR_FEATURES
FEATURE_NAMES: tuple[str, ...] = (
    ("dim", "rows", "pooling_factor", "size", "batch_size")
    + tuple(f"reuse_bin_{i}" for i in range(NUM_REUSE_BINS))
    + ("lookups_linear", "dim_linear", "working_set_mb", "half_precision")
)

# (center, scale) applied after log1p. Chosen to map typical recommender ranges to about [-1, 1]:
# dim 4..1024, rows 10..1e9, pooling 0..1000, size 1e2..1e11, batch 256..65536. Values outside stay finite and
# monotone.
_LOG_AFFINE: tuple[tuple[float, float], ...] = (
    (math.log1p(64.0), 2.0),  # dim
    (math.log1p(1e5), 7.0),  # rows
    (math.log1p(10.0), 2.5),  # pooling factor
    (math.log1p(1e6), 9.0),  # size = rows x dim
    (math.log1p(float(REFERENCE_BATCH)), 3.0),  # batch size
)

DEFAULT_HISTOGRAM: tuple[float, ...] = (1.0,) + (0.0,) * (NUM_REUSE_BINS - 1)


def table_features(table: Table, batch_size: float = REFERENCE_BATCH) -> np.ndarray:
    """The NUM_FEATURES normalised features of one table looked up at `batch_size` samples (float32): [0:5]
    log-affine dim, rows, pooling, size, batch; [5:22] reuse histogram; [22:26] linear lookup volume and output
    width per batch, working set (MB), fp16 flag."""
    if not batch_size > 0:
        raise ValueError(f"batch size must be positive, got {batch_size}")
    raw = (
        float(table.embedding_dim),
        float(table.num_embeddings),
        float(table.pooling_factor),
        float(table.num_embeddings) * float(table.embedding_dim),
        float(batch_size),
    )
    out = np.empty(NUM_FEATURES, dtype=np.float32)
    for i, (x, (c, s)) in enumerate(zip(raw, _LOG_AFFINE, strict=True)):
        out[i] = (math.log1p(x) - c) / s
    hist = effective_histogram(table) or DEFAULT_HISTOGRAM
    b = NUM_LOG_FEATURES + NUM_REUSE_BINS
    scale = float(batch_size) / REFERENCE_BATCH
    out[NUM_LOG_FEATURES:b] = np.asarray(hist, dtype=np.float32)
    out[b] = float(table.embedding_dim) * float(table.pooling_factor) * scale / 1000.0
    # output width: dim x features (a shared table's outputs), dim x lookups for a sequence table
    out[b + 1] = table.output_elements_per_sample * scale / 100.0
    out[b + 2] = unique_rows(table, batch_size) * table.embedding_dim * table.bytes_per_element / 2**20
    out[b + 3] = 1.0 if table.dtype == "fp16" else 0.0
    return out


def mean_accesses_per_row(hist: Sequence[float]) -> float:
    """Mean accesses per unique row of one batch implied by a reuse histogram (bin k holds counts in
    (2^(k-1), 2^k]; the bin's geometric middle stands for it)."""
    acc = 0.0
    for k, frac in enumerate(hist):
        lo = 1.0 if k == 0 else 2.0 ** (k - 1) + 1.0
        hi = 1.0 if k == 0 else 2.0**k
        acc += frac * math.sqrt(lo * hi)
    return max(1.0, acc)


def unique_rows(table: Table, batch_size: float = REFERENCE_BATCH) -> float:
    """Expected unique rows one batch touches (never more than the table's rows)."""
    lookups = float(table.pooling_factor) * batch_size
    hist = effective_histogram(table) or DEFAULT_HISTOGRAM
    return min(float(table.num_embeddings), lookups / mean_accesses_per_row(hist))


def tables_features(tables: Sequence[Table], batch_size: float | Sequence[float] = REFERENCE_BATCH) -> np.ndarray:
    """Feature matrix (N, NUM_FEATURES) of a sequence of tables, row i for tables[i] at `batch_size` (one for all,
    or one per table)."""
    if not tables:
        return np.zeros((0, NUM_FEATURES), dtype=np.float32)
    batches = (
        [float(batch_size)] * len(tables) if isinstance(batch_size, (int, float)) else [float(b) for b in batch_size]
    )
    if len(batches) != len(tables):
        raise ValueError(f"{len(batches)} batch sizes for {len(tables)} tables")
    return np.stack([table_features(t, b) for t, b in zip(tables, batches, strict=True)])
