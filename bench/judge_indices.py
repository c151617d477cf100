"""The judge's own lookups: how many rows of each table it allocates, and the ids of one batch (numpy only).

Rows: a table keeps at most `TABLE_CAP_BYTES` (16 MB) of rows, and a device at most `DEVICE_CAP_BYTES` (2 GB): when
the kept tables still exceed it, every table of the device is shrunk by one factor, never below `MIN_ROWS`. Ids are
always drawn inside the kept rows, so lookups per sample (and bytes read and updated) are the unscaled ones.

Lengths: each feature a table serves (`Table.feature_list`) gets ``floor(p)`` or ``floor(p) + 1`` ids per sample,
the latter with probability ``p - floor(p)`` (mean p, the feature's pooling factor).

Ids, when the table declares an `access_histogram` (fractions of unique rows by access count in one batch, taken
as at the batch measured): U = lookups / (mean accesses per unique row) distinct rows are drawn, each given its bin's
mid access count, the counts brought to the batch's lookups exactly (`exact_total`), and each row is looked up
exactly its count times, shuffled: the batch then holds U distinct rows, as the histogram says. (Until 2026-12-05 the
ids were drawn from the U rows with replacement, weighted by count: a row of count 1 then went unused 37% of the
time, and a batch held about 0.64 U distinct rows, where the planner's own generator holds U.) Without a
histogram the judge ASSUMES Zipf(1.05) over the kept rows (rank k with probability proportional to k^-1.05, ranks
scattered over the rows by a seeded permutation).
"""

from __future__ import annotations

import functools
import math
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np

MB = 1024 * 1024
TABLE_CAP_BYTES = 16 * MB
DEVICE_CAP_BYTES = 2048 * MB
MIN_ROWS = 1024
ZIPF_EXPONENT = 1.05
#: Mid access count of each of the 17 histogram bins (0,1], (1,2], (2,4], ..., (16384,32768], (32768, inf).
BIN_COUNTS: tuple[float, ...] = (1.0, 2.0) + tuple((2 ** (i - 1) + 1 + 2**i) / 2 for i in range(2, 16)) + (65536.0,)

Table = dict[str, Any]  # a unit table as JSON (`dreamshard.values.Table.model_dump`), as the worker receives it


def element_bytes(table: Table) -> int:
    return 2 if table.get("dtype") == "fp16" else 4


def kept_rows(tables: Sequence[Table]) -> list[int]:
    """Rows allocated for each of one device's tables: the 16 MB per-table cap, then the 2 GB device cap."""
    rows = [
        max(1, min(int(t["num_embeddings"]), TABLE_CAP_BYTES // (int(t["embedding_dim"]) * element_bytes(t))))
        for t in tables
    ]
    total = sum(r * int(t["embedding_dim"]) * element_bytes(t) for r, t in zip(rows, tables, strict=True))
    if total > DEVICE_CAP_BYTES:
        factor = DEVICE_CAP_BYTES / total
        rows = [max(min(r, MIN_ROWS), int(r * factor)) for r in rows]
    return rows


def feature_poolings(table: Table) -> list[float]:
    """Mean ids per sample of each feature the table serves (one feature named like the table when none listed)."""
    features = table.get("features") or ()
    return [float(f["pooling_factor"]) for f in features] or [float(table["pooling_factor"])]


def lengths(pooling: float, batch: int, rng: np.random.Generator) -> np.ndarray:
    """Ids per sample: floor(p), plus one with probability frac(p)."""
    base = math.floor(pooling)
    extra = rng.random(batch) < (pooling - base)
    return (base + extra).astype(np.int64)


@functools.lru_cache(maxsize=64)
def _zipf_cdf(rows: int) -> np.ndarray:
    weights = np.arange(1, rows + 1, dtype=np.float64) ** -ZIPF_EXPONENT
    cdf: np.ndarray = np.cumsum(weights)
    cdf /= cdf[-1]
    return cdf


def zipf_ids(rows: int, count: int, rng: np.random.Generator) -> np.ndarray:
    """`count` ids over `rows` rows, Zipf(1.05) by rank, the ranks scattered over the rows."""
    ranks = np.minimum(np.searchsorted(_zipf_cdf(rows), rng.random(count)), rows - 1)
    return rng.permutation(rows)[ranks].astype(np.int64)


def histogram_ids(histogram: Sequence[float], rows: int, count: int, rng: np.random.Generator) -> np.ndarray:
    """`count` ids over `rows` rows whose unique rows' access counts follow `histogram` (module docstring)."""
    fractions = np.asarray(histogram, dtype=np.float64)
    fractions = fractions / fractions.sum()
    per_row = float(np.dot(fractions, BIN_COUNTS))
    unique = int(min(rows, count, max(1, round(count / per_row))))
    bins = rng.choice(len(BIN_COUNTS), size=unique, p=fractions)
    counts = exact_total(np.maximum(1, np.rint(np.asarray(BIN_COUNTS)[bins])).astype(np.int64), count, rng)
    ids = np.repeat(rng.choice(rows, size=unique, replace=False), counts)
    rng.shuffle(ids)
    return ids.astype(np.int64)


def exact_total(counts: np.ndarray, total: int, rng: np.random.Generator) -> np.ndarray:
    """`counts` (each >= 1, no more of them than `total`) changed to sum to `total`, every count kept >= 1: a
    surplus taken from the counts above 1 in proportion to what they have above it (the rest one each from the
    largest), a shortfall added one lookup at a time to random rows."""
    out = counts.copy()
    surplus = int(out.sum()) - total
    if surplus < 0:
        np.add.at(out, rng.integers(0, out.size, size=-surplus), 1)
    elif surplus > 0:
        spare = out - 1
        take = np.floor(spare * (surplus / spare.sum())).astype(np.int64)
        out -= take
        rest = surplus - int(take.sum())
        out[np.argsort(-(out - 1), kind="stable")[:rest]] -= 1
    return out


def table_ids(table: Table, rows: int, count: int, rng: np.random.Generator) -> np.ndarray:
    """`count` ids of one table inside its `rows` kept rows."""
    if count == 0:
        return np.zeros(0, dtype=np.int64)
    histogram = table.get("access_histogram")
    if histogram:
        return histogram_ids(histogram, rows, count, rng)
    return zipf_ids(rows, count, rng)


def table_rng(seed: int, table: Table) -> np.random.Generator:
    """The ids' generator of one table in one judge round (`seed`): seeded by the round and the table's name, so a
    table looks up the same ids in every plan of the round (common random numbers: two plans' figures differ by
    where the tables are, not by which ids were drawn; the same plan judged twice, only by the timing)."""
    return np.random.default_rng([seed, zlib.crc32(str(table["name"]).encode())])


def batch_inputs(
    tables: Sequence[Table], rows: Sequence[int], batch: int, rng: np.random.Generator | Sequence[np.random.Generator]
) -> tuple[np.ndarray, np.ndarray]:
    """(indices, offsets) of one TBE batch over `tables`: feature-major bags (every feature's `batch` bags in
    turn), a shared table's features drawing from one pool of its ids. `rng`: one generator for all, or one per
    table (`table_rng`)."""
    rngs = [rng] * len(tables) if isinstance(rng, np.random.Generator) else list(rng)
    parts: list[np.ndarray] = []
    sizes: list[np.ndarray] = []
    for table, kept, rng in zip(tables, rows, rngs, strict=True):
        lens = [lengths(p, batch, rng) for p in feature_poolings(table)]
        ids = table_ids(table, kept, int(sum(int(x.sum()) for x in lens)), rng)
        parts.append(ids)
        sizes.extend(lens)
    offsets = np.concatenate([[0], np.cumsum(np.concatenate(sizes))]).astype(np.int64)
    return np.concatenate(parts).astype(np.int64), offsets
