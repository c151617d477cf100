"""Real-world inventories from public cardinalities: the 26 categorical features of the Criteo datasets.

* ``criteo-kaggle``: Criteo Display Advertising Challenge (Kaggle), the per-feature cardinalities DLRM's
  reference implementation reports for it (33.8 M rows in all; 2.0 GB at dim 16 in fp32); default dim 16, as in
  DLRM's Kaggle configuration.
* ``criteo-terabyte``: Criteo 1TB Click Logs, the cardinalities of TorchRec's DLRM example and MLPerf DLRM
  (no hashing; 177.9 M rows, the largest feature 48,937,457 rows); default dim 128, as in MLPerf DLRM. At dim 128
  in fp32 it is 84.9 GB (GB = 2^30 bytes, as everywhere in dreamshard), its largest table 23.3 GB: no 16 GB
  device holds that table whole, so only column splits place it.

Tables are named ``t_cat_0`` ... ``t_cat_25``, the names TorchRec's DLRM example gives them (feature
``cat_i``), so a plan of a preset loads into that model as it is
(``dreamshard.integrations.torchrec.load_sharding_plan``).

What the public data does not say is ASSUMED, the same for every feature:

* pooling factor 1 by default: Criteo's categorical features are one-hot (one id per sample); ``pooling``
  overrides it (e.g. to model multi-hot variants);
* row popularity Zipf-like with exponent ``zipf_exponent`` (default 1.05, a classic heavy-tailed Zipf;
  Criteo's categorical values are known to be heavily skewed, but their per-feature exponents are not
  published); the 17-bin reuse histogram is that of one batch at the reference batch size, simulated by
  ``dreamshard.inventory.synth.zipf_histogram`` with a generator seeded from the preset and table names, so
  the same arguments always give the same inventory (and fingerprint).
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
    """The inventory of `preset` (module docstring); ConfigError naming the bad argument otherwise."""
    if preset not in CARDINALITIES:
        raise ConfigError(f"unknown preset '{preset}'; choose from {', '.join(PRESETS)}")
    if name is not None:
        check_name(name, "--name")  # the inventory-name rule (inventory.validation), before anything is built
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
