"""Synthetic DLRM-like inventories, deterministic per seed: many small tables and a few huge ones, mostly one-hot
features with a heavy multi-hot tail, Zipf-like row popularity, as the open DLRM embedding traces show.

Each table's reuse histogram is simulated for one batch at the batch size and pooling factor the profiler uses
(`zipf_histogram`), so dreamshard.inventory.indices.synthesize_indices reproduces it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dreamshard.errors import ConfigError
from dreamshard.inventory.histogram import histogram_from_counts, normalise_histogram
from dreamshard.inventory.index_budget import check_lookup_budget
from dreamshard.values import Inventory, Table, dim_problem

REFERENCE_BATCH_SIZE = 2048
MIN_ROWS, MAX_ROWS = 100, 5_000_000
DEFAULT_DIMS: tuple[int, ...] = (16, 32, 64, 128)
_MIN_SIM_LOOKUPS = 4096


def check_dims(dims: Sequence[int]) -> tuple[int, ...]:
    """Validate an embedding-dim list: non-empty, each a legal embedding dim
    (`dreamshard.values.tables.dim_problem`)."""
    out = tuple(int(d) for d in dims)
    if not out:
        raise ConfigError("dims: give at least one embedding dim (e.g. 16,32,64,128)")
    for d in out:
        problem = dim_problem(d)
        if problem:
            raise ConfigError(f"dims: {problem}")
    return out


def zipf_ranks(num_rows: int, exponent: float, size: int, rng: np.random.Generator) -> np.ndarray:
    """``size`` row ranks in [0, num_rows) with P(rank r) ~ (r + 1)^-exponent (continuous approximation)."""
    u = rng.random(size)
    top = float(num_rows) + 1.0
    if abs(exponent - 1.0) < 1e-9:
        x = np.exp(u * np.log(top))
    else:
        a = 1.0 - exponent
        x = (1.0 + u * (top**a - 1.0)) ** (1.0 / a)
    return np.clip(np.floor(x).astype(np.int64) - 1, 0, num_rows - 1)


def zipf_histogram(
    num_rows: int,
    pooling_factor: float,
    exponent: float,
    rng: np.random.Generator,
    batch_size: int = REFERENCE_BATCH_SIZE,
    name: str = "table",
) -> tuple[float, ...] | None:
    """Reuse histogram of a Zipf(exponent) table at ``batch_size``; None when a batch has no lookups.

    ``round(p x batch_size)`` row ranks are drawn from a continuous power law on [1, rows + 1) by inverse CDF
    (independent of the row count), floored and binned; a batch with few lookups is averaged over several. The
    simulated batch is sized first (`inventory.index_budget.check_lookup_budget`: IndexBudgetError naming table
    `name`)."""
    check_lookup_budget(name, pooling_factor, batch_size, "simulating its reuse histogram (one batch)")
    lookups = int(round(pooling_factor * batch_size))
    if lookups <= 0:
        return None
    repeats = max(1, -(-_MIN_SIM_LOOKUPS // lookups))
    acc = np.zeros(17, dtype=np.float64)
    for _ in range(repeats):
        ranks = zipf_ranks(num_rows, exponent, lookups, rng)
        acc += histogram_from_counts(np.unique(ranks, return_counts=True)[1])  # O(lookups), not O(rows)
    return normalise_histogram(acc / repeats)


def _pooling_factor(rng: np.random.Generator) -> float:
    kind = rng.random()
    if kind < 0.10:
        p = rng.uniform(0.05, 1.0)
    elif kind < 0.45:
        p = rng.uniform(1.0, 1.3)
    else:
        p = float(np.clip(rng.lognormal(np.log(6.0), 1.0), 1.0, 100.0))
    return round(float(p), 3)


def synth_table(name: str, rng: np.random.Generator, dims: Sequence[int] = DEFAULT_DIMS) -> Table:
    """One DLRM-like table drawn from ``rng``: rows log-uniform in [100, 5e6]; pooling 10% sparse in [0.05, 1),
    35% near one-hot in [1, 1.3], 55% multi-hot (log-normal, median 6, sigma 1, clipped to [1, 100]); dim uniform
    over ``dims``; Zipf popularity with exponent uniform in [0.3, 1.5]."""
    dims = check_dims(dims)
    rows = int(round(np.exp(rng.uniform(np.log(MIN_ROWS), np.log(MAX_ROWS)))))
    dim = int(dims[int(rng.integers(len(dims)))])
    pooling = _pooling_factor(rng)
    exponent = float(rng.uniform(0.3, 1.5))
    hist = zipf_histogram(rows, pooling, exponent, rng)
    return Table(name=name, num_embeddings=rows, embedding_dim=dim, pooling_factor=pooling, access_histogram=hist)


def synth_inventory(
    num_tables: int,
    seed: int,
    dims: Sequence[int] = DEFAULT_DIMS,
    name: str | None = None,
) -> Inventory:
    """``num_tables`` DLRM-like tables named t0000, t0001, ...; the same seed gives the same inventory."""
    if num_tables < 1:
        raise ConfigError(f"num_tables must be >= 1, got {num_tables}")
    dims = check_dims(dims)
    width = max(4, len(str(num_tables - 1)))
    root = np.random.SeedSequence(int(seed))
    # One independent stream per table: table i does not depend on how many tables come after it.
    tables = [
        synth_table(f"t{i:0{width}d}", np.random.default_rng(child), dims)
        for i, child in enumerate(root.spawn(num_tables))
    ]
    return Inventory(name=name or f"synth-{num_tables}-s{seed}", tables=tuple(tables))
