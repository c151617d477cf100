"""A TorchRec model's batches: the KeyedJaggedTensors (or their dict form) a team saved, read as numpy per feature,
and the reuse histogram of a table's lookups at the planned batch (docs/torchrec.md, "The model and its batches").

Bad batches are one-line typed errors naming the batch and the field or key: a field is read only from a dense,
1-d, plain tensor of integers (weights: real numbers), never converted from anything else (sparse, meta, nested,
quantized, a subclass, 2-d), and every batch carries the same features. `dreamshard.integrations.torchrec_model`
turns them into a model's statistics.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dreamshard.errors import InputFileError
from dreamshard.integrations import require_torchrec
from dreamshard.inventory.histogram import count_bins, histogram_from_counts, normalise_histogram
from dreamshard.inventory.tensors import tensor_problem
from dreamshard.values import NUM_REUSE_BINS

#: One batch as numpy: {feature: (values int64, lengths int64)}
Batch = dict[str, tuple[np.ndarray, np.ndarray]]


#: The dtypes of ids and lengths: integers (a bool is not a number of lookups, nor a row).
_INTEGER = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.uint16, torch.uint32, torch.uint64)
#: The dtypes of per-id weights: real numbers.
_REAL = (*_INTEGER, torch.float16, torch.bfloat16, torch.float32, torch.float64)
_INT64_MAX = np.iinfo(np.int64).max


def _np(x: Any, where: str, field: str, kind: str = "integer") -> np.ndarray:
    """Batch field `field` as a 1-d numpy array (int64 for `kind` "integer", float64 for "real"): a dense, 1-d CPU
    tensor of that kind, else one InputFileError line naming the batch and the field. Nothing is converted that is
    not a plain tensor holding data (a sparse, meta, nested or quantized tensor, a subclass, a 2-d tensor)."""
    what = f"{where}: '{field}'"
    expected = f"a dense 1-d {kind} tensor is expected"
    if (problem := tensor_problem(x)) is not None:
        raise InputFileError(f"{what} {problem}; {expected}")
    if x.dtype not in (_INTEGER if kind == "integer" else _REAL):
        raise InputFileError(f"{what} holds {x.dtype}; {expected}")
    if x.dim() != 1:
        raise InputFileError(f"{what} has {x.dim()} dimensions {tuple(x.shape)}; {expected}")
    if kind != "integer":
        arr = x.detach().cpu().to(torch.float64).numpy()  # bfloat16 has no numpy dtype
        if not np.isfinite(arr).all():
            raise InputFileError(f"{what} holds {arr[~np.isfinite(arr)][0]}; weights are finite numbers")
        return arr
    arr = x.detach().cpu().numpy()
    if arr.dtype == np.uint64 and arr.size and int(arr.max()) > _INT64_MAX:
        raise InputFileError(f"{what} holds {int(arr.max())}, past the int64 range of ids and lengths")
    return arr.astype(np.int64, copy=False)


def _lengths_checked(lengths: np.ndarray, values: np.ndarray, where: str) -> None:
    """Lengths >= 0 summing to the values' count; each is compared first, so no int64 sum can wrap around."""
    if lengths.size and int(lengths.min()) < 0:
        raise InputFileError(f"{where}: 'lengths' holds {int(lengths.min())}; lengths are >= 0")
    if lengths.size and int(lengths.max()) > values.size:
        raise InputFileError(
            f"{where}: 'lengths' holds {int(lengths.max())}, more than the batch's {values.size} values"
        )
    total = int(lengths.sum())  # each <= values.size: exact for any batch that fits in memory
    if total != values.size:
        raise InputFileError(f"{where}: 'lengths' sum to {total}, not to the batch's {values.size} values")


def _batch(item: Any, i: int, batch_size: int) -> Batch:
    """One batch (a KeyedJaggedTensor or the dict form) as {feature: (values, lengths)}."""
    where = f"batch {i}"
    if isinstance(item, dict):
        keys = item.get("keys")
        if not isinstance(keys, (list, tuple)) or not all(isinstance(k, str) for k in keys) or not keys:
            raise InputFileError(f"{where}: 'keys' must be a non-empty list of feature names")
        for field in ("values", "lengths"):
            if field not in item:
                raise InputFileError(
                    f"{where}: no '{field}'; a batch dict holds 'keys', 'values', 'lengths' (and optional 'weights')"
                )
        raw_values, raw_lengths, raw_weights = item["values"], item["lengths"], item.get("weights")
    elif hasattr(item, "keys") and hasattr(item, "lengths") and hasattr(item, "values"):  # a KeyedJaggedTensor
        try:
            keys = list(item.keys())
            raw_values, raw_lengths = item.values(), item.lengths()
            raw_weights = item.weights_or_none() if hasattr(item, "weights_or_none") else None
        except Exception as e:  # a pickled object's own methods (trusted files only, --allow-pickle)
            raise InputFileError(f"{where}: its keys, values or lengths cannot be read ({type(e).__name__})") from None
    else:
        raise InputFileError(
            f"{where} is a {type(item).__name__}; expected a KeyedJaggedTensor or a dict with keys/values/lengths"
        )
    values, lengths = _np(raw_values, where, "values"), _np(raw_lengths, where, "lengths")
    if raw_weights is not None:
        weights = _np(raw_weights, where, "weights", "real")
        if weights.size != values.size:
            raise InputFileError(f"{where}: 'weights' holds {weights.size} weights for the {values.size} values")
    if lengths.size != len(keys) * batch_size:
        raise InputFileError(
            f"{where} has {lengths.size} lengths for {len(keys)} keys, not {batch_size} per key; give --batch-size "
            f"{lengths.size // max(1, len(keys))} (the samples per batch)"
        )
    _lengths_checked(lengths, values, where)
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
            with warnings.catch_warnings():  # torch's own deprecations on what it unpickles (quantized, TypedStorage)
                warnings.simplefilter("ignore")
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
    return _same_features([_batch(item, i, batch_size) for i, item in enumerate(items)])


def _same_features(batches: list[Batch]) -> list[Batch]:
    """`batches`, each carrying every feature any of them carries: a batch lacking one would count as no lookups
    of it (its pooling diluted), so it is refused, naming the batch, the feature and a batch that has it."""
    first: dict[str, int] = {}
    for i, batch in enumerate(batches):
        for key in batch:
            first.setdefault(key, i)
    for i, batch in enumerate(batches):
        if missing := [k for k in first if k not in batch]:
            key = missing[0]
            raise InputFileError(
                f"batch {i} lacks feature '{key}', which batch {first[key]} has: every batch carries the same "
                "features (a feature with no lookups in a batch has lengths 0)"
            )
    return batches


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


def table_histogram(per_batch: list[np.ndarray], batch_size: int, planned: int) -> tuple[float, ...] | None:
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
