"""An inventory from a TorchRec model and its data: `inventory_from_module(model, batches, batch_size)`
(docs/torchrec.md; docs/architecture.md, "Integrations").

The tables are the model's `EmbeddingBagCollection`s' (weighted ones too), named as TorchRec names them, with
their rows, dims, dtypes and features; `module_inventory` is that schema alone (what `load_current_sharding_plan`
fingerprints). The statistics come from the model's own batches: pooling per feature (lookups per sample) and each
table's reuse histogram at the planned batch size. Bad batches are one-line typed errors naming the batch, feature
or table.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn as nn
from pydantic import ValidationError

from dreamshard.errors import ConfigError, InputFileError, InventoryError, first_line
from dreamshard.integrations import require_torchrec
from dreamshard.inventory.histogram import count_bins, histogram_from_counts, normalise_histogram
from dreamshard.values import NUM_REUSE_BINS, DType, Feature, Inventory, Table
from dreamshard.values.names import check_inventory_names

#: One batch as numpy: {feature: (values int64, lengths int64)}
Batch = dict[str, tuple[np.ndarray, np.ndarray]]


def embedding_bag_collections(model: nn.Module) -> list[tuple[str, Any]]:
    """[(module path, EmbeddingBagCollection)]: every EBC (weighted or not) in `model`, outermost only."""
    require_torchrec()
    from torchrec.modules.embedding_modules import EmbeddingBagCollection  # optional dependency: torchrec

    if not isinstance(model, nn.Module):
        raise InventoryError(f"expected a torch module holding EmbeddingBagCollections, got {type(model).__name__}")
    found: list[tuple[str, Any]] = []
    for path, sub in model.named_modules():
        if isinstance(sub, EmbeddingBagCollection) and not any(path.startswith(f"{p}.") for p, _ in found if p):
            found.append((path, sub))
    if not found:
        raise InventoryError(f"{type(model).__name__} holds no EmbeddingBagCollection")
    return found


def _reason(e: ValidationError) -> str:
    err = e.errors()[0]
    field = ".".join(str(x) for x in err.get("loc", ()))
    return f"{field}: {err['msg']}" if field else str(err["msg"])


#: TorchRec's data types dreamshard plans, by their enum name.
_DTYPES: dict[str, DType] = {"FP32": "fp32", "FP16": "fp16"}


def _table(config: Any, where: str, pooling: dict[str, float] | None = None) -> Table:
    """The Table of one EmbeddingBagConfig (pooling per feature from `pooling`, 0 without it)."""
    dtype = _DTYPES.get(getattr(config.data_type, "name", str(config.data_type)))
    if dtype is None:
        raise InventoryError(
            f"table '{config.name}' of {where} has data type {config.data_type}; dreamshard plans fp32 and fp16 tables"
        )
    names = list(config.feature_names)
    pool = pooling or {}
    features = () if names == [config.name] else tuple(Feature(name=f, pooling_factor=pool.get(f, 0.0)) for f in names)
    try:
        return Table(
            name=config.name,
            num_embeddings=int(config.num_embeddings),
            embedding_dim=int(config.embedding_dim),
            pooling_factor=sum(pool.get(f, 0.0) for f in names),
            dtype=dtype,
            features=features,
        )
    except ValidationError as e:  # a dim FBGEMM cannot run, rows out of bounds, ...
        raise InventoryError(f"table '{config.name}' of {where}: {_reason(e)}") from None


def module_tables(model: nn.Module, pooling: dict[str, float] | None = None) -> list[Table]:
    """The tables of every EBC in `model`, named as TorchRec names them; a table whose only feature is named like
    it has no `features` (one output), any other lists its features. InventoryError if two share a name or a
    feature."""
    tables: dict[str, tuple[str, Table]] = {}
    for path, ebc in embedding_bag_collections(model):
        where = f"module '{path}'" if path else "the module"
        for config in ebc.embedding_bag_configs():
            t = _table(config, where, pooling)
            if t.name in tables:
                raise InventoryError(
                    f"table '{t.name}' is in both {tables[t.name][0]} and {where}; give them distinct names"
                )
            tables[t.name] = (where, t)
    return [t for _, t in tables.values()]


def module_inventory(model: nn.Module, name: str = "module") -> Inventory:
    """The model's tables as an inventory, schema only (pooling 0): its `schema_fingerprint` is the model's."""
    try:
        return Inventory(name=name, tables=tuple(module_tables(model)))
    except ValidationError as e:
        raise InventoryError(f"the model's tables: {_reason(e)}") from None


def schema_fingerprints(model: nn.Module, names: dict[str, str] | None = None) -> tuple[str, ...]:
    """The schema fingerprints a plan for `model` may carry: its tables' schema as measured by `module_inventory`
    (tables renamed by `names`: TorchRec name -> dreamshard name), then, when it differs, the same with the
    features of single-feature tables left out (an inventory written by hand names no features; a shared
    table's features always count)."""
    tables = [t.model_copy(update={"name": (names or {}).get(t.name, t.name)}) for t in module_tables(model)]
    full = Inventory(name="module", tables=tuple(tables)).schema_fingerprint()
    plain = [t.model_copy(update={"features": ()}) if t.num_outputs == 1 else t for t in tables]
    lean = Inventory(name="module", tables=tuple(plain)).schema_fingerprint()
    return (full,) if lean == full else (full, lean)


# ------------------------------------------------------------------------------------------------ batches


def _np(x: Any, what: str) -> np.ndarray:
    if not isinstance(x, torch.Tensor):
        raise InputFileError(f"{what} must be a tensor, got {type(x).__name__}")
    if x.is_floating_point() or x.is_complex():
        raise InputFileError(f"{what} must hold integers, got {x.dtype}")
    return x.detach().cpu().numpy().astype(np.int64, copy=False).ravel()


def _batch(item: Any, i: int, batch_size: int) -> Batch:
    """One batch (a KeyedJaggedTensor or the dict form) as {feature: (values, lengths)}."""
    where = f"batch {i}"
    if isinstance(item, dict):
        keys = item.get("keys")
        if not isinstance(keys, (list, tuple)) or not all(isinstance(k, str) for k in keys) or not keys:
            raise InputFileError(f"{where}: 'keys' must be a non-empty list of feature names")
        if "values" not in item or "lengths" not in item:
            raise InputFileError(f"{where}: a batch dict holds 'keys', 'values', 'lengths' (and optional 'weights')")
        values, lengths = _np(item["values"], f"{where} values"), _np(item["lengths"], f"{where} lengths")
    elif hasattr(item, "keys") and hasattr(item, "lengths") and hasattr(item, "values"):  # a KeyedJaggedTensor
        keys = list(item.keys())
        values, lengths = _np(item.values(), f"{where} values"), _np(item.lengths(), f"{where} lengths")
    else:
        raise InputFileError(
            f"{where} is a {type(item).__name__}; expected a KeyedJaggedTensor or a dict with keys/values/lengths"
        )
    if lengths.size != len(keys) * batch_size:
        raise InputFileError(
            f"{where} has {lengths.size} lengths for {len(keys)} keys, not {batch_size} per key; give --batch-size "
            f"{lengths.size // max(1, len(keys))} (the samples per batch)"
        )
    if (lengths < 0).any() or int(lengths.sum()) != values.size:
        raise InputFileError(f"{where}: lengths must be >= 0 and sum to the {values.size} values")
    out: Batch = {}
    pos = 0
    for k, key in enumerate(keys):
        ln = lengths[k * batch_size : (k + 1) * batch_size]
        n = int(ln.sum())
        if key in out:
            raise InputFileError(f"{where} lists key '{key}' twice")
        out[key] = (values[pos : pos + n], ln)
        pos += n
    return out


def load_batches(source: str | Path | Sequence[Any], batch_size: int, allow_pickle: bool = False) -> list[Batch]:
    """The batches of a file written by ``torch.save`` (or an in-memory list), each as {feature: (values,
    lengths)}. The file holds dicts ``{"keys", "values", "lengths"[, "weights"]}`` (lengths key-major:
    ``batch_size`` per key), read under ``weights_only=True``; a list of KeyedJaggedTensors is a pickle of torchrec
    objects, read only with `allow_pickle` (trusted files only)."""
    if isinstance(source, (str, Path)):
        p = Path(source)
        if not p.is_file():
            raise InputFileError(f"batches file not found: {p}")
        if allow_pickle:
            require_torchrec()
            import torchrec  # noqa: F401  # optional dependency: torchrec (the pickled KeyedJaggedTensor class)
        try:
            items = torch.load(p, map_location="cpu", weights_only=not allow_pickle)
        except Exception as e:  # torch's unpicklers raise many types on foreign bytes
            if "weights_only" in str(e) or "Unsupported global" in str(e):
                raise InputFileError(
                    f"{p} holds objects other than tensors (a pickled KeyedJaggedTensor?), which "
                    "torch.load(weights_only=True) refuses: save dicts {keys, values, lengths} instead, or load it "
                    "with weights_only=False (--allow-pickle; only for files you trust)"
                ) from None
            raise InputFileError(f"{p}: not a torch file of batches ({type(e).__name__})") from None
        where = str(p)
    else:
        items, where = source, "batches"
    if not isinstance(items, (list, tuple)) or not items:
        raise InputFileError(f"{where}: expected a non-empty list of batches, got {type(items).__name__}")
    return [_batch(item, i, batch_size) for i, item in enumerate(items)]


# ------------------------------------------------------------------------------------------------ statistics


def rescaled_histogram(counts: np.ndarray, ratio: float) -> np.ndarray:
    """The reuse histogram of one batch's unique-row access `counts` at `ratio` x the batch.

    Each count c is rescaled to the planned batch: r >= 1 keeps the row with count c x r (rows the observed batch
    never saw are not invented: the histogram leans to more reuse); r < 1 keeps it with probability
    1 - (1 - r)^c and, when kept, the expected count c x r / (1 - (1 - r)^c). Counts are then re-binned."""
    c = np.asarray(counts, dtype=np.float64)
    if ratio == 1.0:
        return histogram_from_counts(c.astype(np.int64))
    if ratio > 1.0:
        kept, scaled = np.ones_like(c), c * ratio
    else:
        kept = 1.0 - (1.0 - ratio) ** c
        scaled = c * ratio / np.maximum(kept, 1e-12)
    bins = count_bins(np.maximum(1, np.ceil(scaled - 1e-9)).astype(np.int64))
    out = np.zeros(NUM_REUSE_BINS, dtype=np.float64)
    np.add.at(out, bins, kept)
    return out / out.sum() if out.sum() > 0 else out


def _histogram(per_batch: list[np.ndarray], batch_size: int, planned: int) -> tuple[float, ...] | None:
    """The table's averaged reuse histogram at the planned batch from its per-batch lookups: when `planned` is a
    multiple m of `batch_size` and there are at least m batches, m consecutive batches are merged (the real counts
    of a planned batch); otherwise each batch's counts are rescaled (`rescaled_histogram`)."""
    m = planned // batch_size
    if planned % batch_size == 0 and 1 < m <= len(per_batch):
        per_batch = [np.concatenate(per_batch[i : i + m]) for i in range(0, len(per_batch) - m + 1, m)]
        ratio = 1.0
    else:
        ratio = planned / batch_size
    hists = [rescaled_histogram(np.unique(ix, return_counts=True)[1], ratio) for ix in per_batch if ix.size]
    return normalise_histogram(np.mean(hists, axis=0)) if hists else None


def measure_module(
    model: nn.Module,
    batches: str | Path | Sequence[Any],
    batch_size: int,
    planned_batch_size: int = 2048,
    name: str | None = None,
    allow_pickle: bool = False,
) -> tuple[Inventory, list[str]]:
    """(the inventory, warnings): `inventory_from_module` with its warnings returned instead of emitted."""
    if batch_size < 1 or planned_batch_size < 1:
        raise InventoryError("batch_size and planned_batch_size must be >= 1")
    schema = module_tables(model)
    served = {f: t for t in schema for f in t.feature_names}
    data = load_batches(batches, batch_size, allow_pickle)
    lookups = {f: 0 for f in served}
    seen: set[str] = set()
    per_table: dict[str, list[np.ndarray]] = {t.name: [] for t in schema}
    for i, batch in enumerate(data):
        parts: dict[str, list[np.ndarray]] = {}
        for key, (values, _) in batch.items():
            t = served.get(key)
            if t is None:
                raise InventoryError(f"batch {i} has key '{key}', which no table of the model serves")
            if values.size and (int(values.min()) < 0 or int(values.max()) >= t.num_embeddings):
                bad = int(values.max()) if int(values.max()) >= t.num_embeddings else int(values.min())
                raise InventoryError(
                    f"batch {i}: feature '{key}' looks up row {bad} of table '{t.name}', "
                    f"which has {t.num_embeddings} rows"
                )
            seen.add(key)
            lookups[key] += values.size
            parts.setdefault(t.name, []).append(values)
        for table, vals in parts.items():
            per_table[table].append(np.concatenate(vals))
    notes: list[str] = []
    tables = []
    for t in schema:
        if not any(f in seen for f in t.feature_names):
            raise InventoryError(
                f"table '{t.name}' has no batch data: "
                f"none of its features ({', '.join(t.feature_names)}) is in any batch"
            )
        pooling = {f: lookups[f] / (len(data) * batch_size) for f in t.feature_names}
        notes += [
            f"feature '{f}' of table '{t.name}' has no lookups in the batches: pooling 0"
            for f in t.feature_names
            if pooling[f] == 0
        ]
        features = tuple(Feature(name=f.name, pooling_factor=pooling[f.name]) for f in t.features)
        tables.append(
            t.model_copy(
                update={
                    "pooling_factor": math.fsum(pooling.values()),
                    "features": features,
                    "access_histogram": _histogram(per_table[t.name], batch_size, planned_batch_size),
                }
            )
        )
    try:
        inv = Inventory.model_validate({"name": name or "torchrec", "tables": [x.model_dump() for x in tables]})
    except ValidationError as e:
        raise InventoryError(f"the model's tables: {_reason(e)}") from None
    return check_inventory_names(inv, "the model"), notes


def inventory_from_module(
    model: nn.Module,
    batches: str | Path | Sequence[Any],
    batch_size: int,
    planned_batch_size: int = 2048,
    name: str | None = None,
    allow_pickle: bool = False,
) -> Inventory:
    """The inventory of a TorchRec model measured from its batches; a feature with no lookups is warned about
    (``UserWarning``). A batch key no table serves, a table none of whose features is in any batch, an index
    outside ``[0, num_embeddings)`` or a batch of another size is an InventoryError."""
    inv, notes = measure_module(model, batches, batch_size, planned_batch_size, name, allow_pickle)
    for note in notes:
        warnings.warn(note, stacklevel=2)
    return inv


def load_model(spec: str) -> nn.Module:
    """The model `spec` names: ``pkg.mod:build`` (imported with importlib) or ``path/to/file.py:build``, where
    ``build`` is a callable returning the module (called without arguments). ConfigError, one line, otherwise."""
    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr.isidentifier():
        raise ConfigError(f"--model {spec!r}: expected MODULE:CALLABLE (pkg.mod:build or path/to/file.py:build)")
    try:
        if target.endswith(".py"):
            path = Path(target)
            if not path.is_file():
                raise ConfigError(f"--model {spec!r}: file {path} not found")
            mod_name = f"_dreamshard_model_{abs(hash(str(path.resolve())))}"
            loader = importlib.util.spec_from_file_location(mod_name, path)
            assert loader is not None and loader.loader is not None
            module = importlib.util.module_from_spec(loader)
            sys.modules[mod_name] = module
            loader.loader.exec_module(module)
        else:
            module = importlib.import_module(target)
    except ConfigError:
        raise
    except Exception as e:  # the user's code: any failure to import it
        raise ConfigError(f"--model {spec!r}: cannot import {target} ({type(e).__name__}: {first_line(e)})") from None
    build = getattr(module, attr, None)
    if not callable(build):
        raise ConfigError(f"--model {spec!r}: {target} has no callable '{attr}'")
    try:
        model = build()
    except Exception as e:  # the user's code
        raise ConfigError(f"--model {spec!r}: {attr}() failed ({type(e).__name__}: {first_line(e)})") from None
    if not isinstance(model, nn.Module):
        raise ConfigError(f"--model {spec!r}: {attr}() returned {type(model).__name__}, not a torch module")
    return model
