"""Held-out table generators for judging a model on inventories no training family resembles (docs/benchmarks.md,
"Generalisation"; the release gate of `pretrain`). Neither feeds pre-training or the pipeline.

* `ctr` -- the categorical features of public click-through datasets (Criteo Kaggle, Avazu, KDD Cup 2012 track 2,
  Taobao user behaviour, MovieLens-20M): one dataset per inventory (drawn), its features repeated and their
  cardinalities jittered x0.5-2 (capped at `CTR_MAX_ROWS`, so that every baseline can place them whole) until the
  requested number of tables; one-hot (pooling 1) unless the feature is a
  history (lognormal pooling, median 20, sigma 1); dims 16/32/64/128; ids Zipf with exponent 0.4-1.5.
* `lognormal` -- rows lognormal (median 3e4, sigma 2.5, 10..5e7), dims 8-256 (powers of two and 3x them),
  pooling heavy-tailed (Pareto alpha 1.1 + 1, capped at 300) or exactly 1 (40%), ids Zipf 0.2-1.6, 30% fp16.

Half of the tables (a per-inventory coin per table) declare no access histogram, as inventories written by hand
do; planning then assumes one (dreamshard.inventory.histogram).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from dreamshard.errors import ConfigError
from dreamshard.inventory.presets import CARDINALITIES
from dreamshard.inventory.synth import zipf_histogram
from dreamshard.values import DType, Inventory, Table

#: Public cardinalities per dataset: (feature, rows, is a history feature)
PUBLIC_CARDINALITIES: dict[str, tuple[tuple[str, int, bool], ...]] = {
    "criteo": tuple((f"C{i + 1}", n, False) for i, n in enumerate(CARDINALITIES["criteo-kaggle"])),
    "avazu": (
        ("C1", 7, False),
        ("banner_pos", 7, False),
        ("site_id", 4737, False),
        ("site_domain", 7745, False),
        ("site_category", 26, False),
        ("app_id", 8552, False),
        ("app_domain", 559, False),
        ("app_category", 36, False),
        ("device_id", 2686408, False),
        ("device_ip", 6729486, False),
        ("device_model", 8251, False),
        ("device_type", 5, False),
        ("device_conn_type", 4, False),
        ("C14", 2626, False),
        ("C15", 8, False),
        ("C16", 9, False),
        ("C17", 435, False),
        ("C18", 4, False),
        ("C19", 68, False),
        ("C20", 172, False),
        ("C21", 60, False),
        ("hour", 240, False),
    ),
    "kdd12": (
        ("user", 23907634, False),
        ("ad", 641707, False),
        ("query", 26243606, False),
        ("keyword", 1249785, False),
        ("title", 4051441, False),
        ("description", 3171830, False),
        ("advertiser", 14847, False),
        ("display_url", 27045, False),
        ("query_tokens", 1100000, True),
        ("title_tokens", 900000, True),
    ),
    "taobao": (
        ("user", 987994, False),
        ("item", 4162024, False),
        ("category", 9439, False),
        ("item_history", 4162024, True),
        ("category_history", 9439, True),
        ("behavior", 4, False),
    ),
    "movielens": (
        ("user", 138493, False),
        ("movie", 27278, False),
        ("genre", 20, False),
        ("movie_history", 27278, True),
        ("tag_history", 38644, True),
    ),
}
CTR_DIMS: tuple[int, ...] = (16, 32, 64, 128)
CTR_MAX_ROWS = 10_000_000
LOGNORMAL_DIMS: tuple[int, ...] = (8, 16, 24, 32, 48, 64, 96, 128, 192, 256)
#: share of tables that declare no access histogram
WITHOUT_HISTOGRAM = 0.5


def _histogram(rows: int, pooling: float, rng: np.random.Generator, lo: float, hi: float) -> tuple[float, ...] | None:
    """A Zipf reuse histogram (exponent drawn in lo..hi), or None for half of the tables (`WITHOUT_HISTOGRAM`);
    the draw happens either way, so a seed gives the same tables with and without histograms."""
    hist = zipf_histogram(rows, pooling, float(rng.uniform(lo, hi)), rng)
    return None if rng.random() < WITHOUT_HISTOGRAM else hist


def _ctr_tables(num_tables: int, rng: np.random.Generator) -> list[Table]:
    dataset = str(rng.choice(sorted(PUBLIC_CARDINALITIES)))
    features = PUBLIC_CARDINALITIES[dataset]
    width = max(4, len(str(num_tables - 1)))
    tables = []
    for i in range(num_tables):
        feature, rows, history = features[i % len(features)]
        rows = max(2, int(round(rows * float(np.exp(rng.uniform(np.log(0.5), np.log(2.0)))))))
        rows = min(rows, CTR_MAX_ROWS)
        pooling = round(float(min(300.0, max(2.0, rng.lognormal(np.log(20.0), 1.0)))), 3) if history else 1.0
        dim = int(rng.choice(CTR_DIMS))
        tables.append(
            Table(
                name=f"t{i:0{width}d}_{dataset}_{feature}",
                num_embeddings=rows,
                embedding_dim=dim,
                pooling_factor=pooling,
                access_histogram=_histogram(rows, pooling, rng, 0.4, 1.5),
            )
        )
    return tables


def _lognormal_table(name: str, rng: np.random.Generator) -> Table:
    rows = int(min(5e7, max(10.0, rng.lognormal(np.log(3e4), 2.5))))
    dim = int(rng.choice(LOGNORMAL_DIMS))
    pooling = 1.0 if rng.random() < 0.4 else round(float(min(300.0, rng.pareto(1.1) + 1.0)), 3)
    dtype: DType = "fp16" if rng.random() < 0.3 else "fp32"
    hist = _histogram(rows, pooling, rng, 0.2, 1.6)
    return Table(
        name=name, num_embeddings=rows, embedding_dim=dim, pooling_factor=pooling, access_histogram=hist, dtype=dtype
    )


def _lognormal_tables(num_tables: int, rng: np.random.Generator) -> list[Table]:
    width = max(4, len(str(num_tables - 1)))
    return [_lognormal_table(f"t{i:0{width}d}", rng) for i in range(num_tables)]


HELDOUT_FAMILIES: dict[str, Callable[[int, np.random.Generator], list[Table]]] = {
    "ctr": _ctr_tables,
    "lognormal": _lognormal_tables,
}


def heldout_inventory(family: str, num_tables: int, seed: int, histograms: bool = True) -> Inventory:
    """`num_tables` tables of held-out `family` (deterministic per seed); `histograms=False`: every table without
    one (the same tables otherwise)."""
    try:
        make = HELDOUT_FAMILIES[family]
    except KeyError:
        raise ConfigError(f"unknown held-out generator '{family}'; choose from {', '.join(HELDOUT_FAMILIES)}") from None
    if num_tables < 1:
        raise ConfigError(f"num_tables must be >= 1, got {num_tables}")
    tables = make(num_tables, np.random.default_rng(np.random.SeedSequence([seed, 4141])))
    if not histograms:
        tables = [t.model_copy(update={"access_histogram": None}) for t in tables]
    suffix = "" if histograms else "-nohist"
    return Inventory(name=f"heldout-{family}-{num_tables}-s{seed}{suffix}", tables=tuple(tables))
