"""Table generators besides the DLRM-like pool of dreamshard.inventory.synth, deterministic per seed: `wide`, the
pretraining distribution (as wide as real inventories get; dreamshard.learning.pretrain), and `mixed`, one that is
not the training one, for judging generalisation. Each table's reuse histogram is simulated at the reference batch
size, so profiling reproduces it.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from dreamshard.errors import ConfigError
from dreamshard.inventory.histogram import histogram_from_counts, normalise_histogram
from dreamshard.inventory.synth import REFERENCE_BATCH_SIZE, synth_inventory, zipf_histogram
from dreamshard.values import DType, Inventory, Table

WIDE_DIMS: tuple[int, int] = (4, 512)
WIDE_ROWS: tuple[float, float] = (10.0, 1e8)
WIDE_MAX_POOLING = 500.0
MIXED_DIMS: tuple[int, ...] = (8, 12, 16, 24, 32, 48, 64, 96, 128)


def _log_uniform(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(np.exp(rng.uniform(np.log(lo), np.log(hi))))


def wide_table(name: str, rng: np.random.Generator) -> Table:
    """One table of the pretraining distribution: dims 4-512 (multiples of 4, log-uniform), rows 10-1e8
    (log-uniform), pooling exactly 1.0 (30%: one-hot), sparse in 0-1 (10%) or a heavy tail (60%: log-normal, median
    8, sigma 1.4, capped at 500); Zipf popularity with exponent 0.3-1.6 (80%) or near-uniform (0-0.1); 25% fp16."""
    dim = int(round(_log_uniform(rng, WIDE_DIMS[0], WIDE_DIMS[1]) / 4.0)) * 4
    dim = min(max(dim, WIDE_DIMS[0]), WIDE_DIMS[1])
    rows = max(10, int(round(_log_uniform(rng, *WIDE_ROWS))))
    kind = rng.random()
    if kind < 0.30:
        pooling = 1.0
    elif kind < 0.40:
        pooling = round(float(rng.uniform(0.0, 1.0)), 3)
    else:
        pooling = round(float(min(WIDE_MAX_POOLING, max(1.0, rng.lognormal(np.log(8.0), 1.4)))), 3)
    exponent = float(rng.uniform(0.3, 1.6)) if rng.random() < 0.8 else float(rng.uniform(0.0, 0.1))
    hist = zipf_histogram(rows, pooling, exponent, rng)
    dtype: DType = "fp16" if rng.random() < 0.25 else "fp32"
    return Table(
        name=name, num_embeddings=rows, embedding_dim=dim, pooling_factor=pooling, access_histogram=hist, dtype=dtype
    )


def _mandelbrot_histogram(num_rows: int, pooling: float, rng: np.random.Generator) -> tuple[float, ...] | None:
    """Reuse histogram of one batch when row r is drawn with probability ~ (r + q)^-s (q shifts the head)."""
    lookups = int(round(pooling * REFERENCE_BATCH_SIZE))
    if lookups <= 0:
        return None
    s = float(rng.uniform(0.6, 1.4))
    q = float(rng.uniform(1.0, 50.0))
    u = rng.random(lookups)
    top = num_rows + q
    a = 1.0 - s
    if abs(a) < 1e-9:
        x = q * np.exp(u * np.log(top / q))
    else:
        x = (q**a + u * (top**a - q**a)) ** (1.0 / a)
    ranks = np.clip(np.floor(x - q).astype(np.int64), 0, num_rows - 1)
    return normalise_histogram(histogram_from_counts(np.unique(ranks, return_counts=True)[1]))


def mixed_table(name: str, rng: np.random.Generator) -> Table:
    """One table of the `mixed` evaluation generator: dims from `MIXED_DIMS`, Pareto pooling (alpha 1.2, scale 1)
    capped at 200, rows log-uniform 1e3-2e6, popularity from a shifted power law (Zipf-Mandelbrot-like), fp32."""
    dim = int(rng.choice(MIXED_DIMS))
    rows = int(round(_log_uniform(rng, 1e3, 2e6)))
    pooling = round(float(min(200.0, rng.pareto(1.2) + 1.0)), 3)
    return Table(
        name=name,
        num_embeddings=rows,
        embedding_dim=dim,
        pooling_factor=pooling,
        access_histogram=_mandelbrot_histogram(rows, pooling, rng),
    )


#: A generator family: (number of tables, seed, inventory name or None) -> the inventory.
Family = Callable[[int, int, str | None], Inventory]


def _family(make: Callable[[str, np.random.Generator], Table], prefix: str) -> Family:
    def build(num_tables: int, seed: int, name: str | None = None) -> Inventory:
        if num_tables < 1:
            raise ConfigError(f"num_tables must be >= 1, got {num_tables}")
        width = max(4, len(str(num_tables - 1)))
        children = np.random.SeedSequence(int(seed)).spawn(num_tables)
        tables = [make(f"t{i:0{width}d}", np.random.default_rng(c)) for i, c in enumerate(children)]
        return Inventory(name=name or f"{prefix}-{num_tables}-s{seed}", tables=tuple(tables))

    return build


wide_inventory = _family(wide_table, "wide")
mixed_inventory = _family(mixed_table, "mixed")


def _dlrm(num_tables: int, seed: int, name: str | None = None) -> Inventory:
    return synth_inventory(num_tables, seed, name=name)


#: generator families by name (`dreamshard inventory synth --family`)
FAMILIES: dict[str, Family] = {"dlrm": _dlrm, "wide": wide_inventory, "mixed": mixed_inventory}


def family_inventory(family: str, num_tables: int, seed: int, name: str | None = None) -> Inventory:
    try:
        build = FAMILIES[family]
    except KeyError:
        raise ConfigError(f"unknown table generator '{family}'; choose from {', '.join(FAMILIES)}") from None
    return build(num_tables, seed, name)
