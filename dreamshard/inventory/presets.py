"""Real-world inventories from public cardinalities: the 26 categorical features of the Criteo datasets
(`criteo-kaggle`, as DLRM's reference implementation reports them, default dim 16; `criteo-terabyte`, as TorchRec's
DLRM example and MLPerf DLRM use them, default dim 128).

Tables are named ``t_cat_0`` ... ``t_cat_25`` as in TorchRec's DLRM example, so a plan of a preset loads into that
model as it is. What the public data does not say is assumed, the same for every feature (`preset_inventory`).
"""

from __future__ import annotations

import zlib
from typing import Literal, get_args

import numpy as np

from dreamshard.errors import ConfigError
from dreamshard.inventory.synth import zipf_histogram
from dreamshard.values import MAX_POOLING, Inventory, Table, aligned_dim, dim_problem
from dreamshard.values.names import check_name

PresetName = Literal["criteo-kaggle", "criteo-terabyte"]
PRESETS: tuple[str, ...] = get_args(PresetName)

CARDINALITIES: dict[str, tuple[int, ...]] = {
    "criteo-kaggle": (
        1460,
        583,
        10131227,
        2202608,
        305,
        24,
        12517,
        633,
        3,
        93145,
        5683,
        8351593,
        3194,
        27,
        14992,
        5461306,
        10,
        5652,
        2173,
        4,
        7046547,
        18,
        15,
        286181,
        105,
        142572,
    ),
    "criteo-terabyte": (
        45833188,
        36746,
        17245,
        7413,
        20243,
        3,
        7114,
        1441,
        62,
        29275261,
        1572176,
        345138,
        10,
        2209,
        11267,
        128,
        4,
        974,
        14,
        48937457,
        11316796,
        40094537,
        452104,
        12606,
        104,
        35,
    ),
}
DEFAULT_DIM: dict[str, int] = {"criteo-kaggle": 16, "criteo-terabyte": 128}
DEFAULT_POOLING = 1.0
DEFAULT_ZIPF_EXPONENT = 1.05


def table_names(count: int) -> list[str]:
    """TorchRec's DLRM example names: t_cat_0, t_cat_1, ..."""
    return [f"t_cat_{i}" for i in range(count)]


def preset_inventory(
    preset: str,
    dim: int | None = None,
    pooling: float = DEFAULT_POOLING,
    zipf_exponent: float = DEFAULT_ZIPF_EXPONENT,
    name: str | None = None,
) -> Inventory:
    """The inventory of `preset`; ConfigError naming the bad argument otherwise.

    Assumed, as the public data does not say: pooling factor `pooling` (default 1: Criteo's features are one-hot),
    and Zipf-like popularity with exponent `zipf_exponent` (default 1.05: the values are known to be skewed, their
    exponents are not published), its reuse histogram simulated at the reference batch size with a generator
    seeded from the preset and table names, so the same arguments always give the same inventory."""
    if preset not in CARDINALITIES:
        raise ConfigError(f"unknown preset '{preset}'; choose from {', '.join(PRESETS)}")
    if name is not None:
        check_name(name, "--name")  # the inventory-name rule (values.names), before anything is built
    width = DEFAULT_DIM[preset] if dim is None else dim
    problem = dim_problem(width)
    if problem:
        raise ConfigError(f"dim {problem}; try --dim {aligned_dim(width)}")
    if not (0 <= pooling <= MAX_POOLING):  # a table's bound (tables.MAX_POOLING); NaN fails it too
        raise ConfigError(f"pooling factor must be a finite number >= 0 and <= {MAX_POOLING:g}, got {pooling:g}")
    if not (0 < zipf_exponent <= 4):
        raise ConfigError(f"zipf exponent must be in (0, 4], got {zipf_exponent}")
    rows = CARDINALITIES[preset]
    tables = []
    for table, n in zip(table_names(len(rows)), rows, strict=True):
        rng = np.random.default_rng(zlib.crc32(f"{preset}/{table}".encode()))
        tables.append(
            Table(
                name=table,
                num_embeddings=n,
                embedding_dim=width,
                pooling_factor=float(pooling),
                access_histogram=zipf_histogram(n, pooling, zipf_exponent, rng, name=table),
            )
        )
    return Inventory(name=name or preset, tables=tuple(tables))
