"""Inventories from the open DLRM embedding-lookup traces (facebookresearch/dlrm_datasets): one table per trace
table, its rows, pooling and reuse histogram measured from the file (`inventory_from_trace`); embedding dims are
not in a trace, so every table gets the same `dim`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from dreamshard.errors import InputFileError
from dreamshard.inventory.histogram import normalise_histogram, reuse_histogram
from dreamshard.inventory.tensors import tensor_problem
from dreamshard.values import Inventory, Table
from dreamshard.values.names import ALLOWED, check_name, name_problem

DEFAULT_TRACE_DIM = 64


def _as_numpy(obj: object, what: str, path: Path) -> np.ndarray:
    if isinstance(obj, torch.Tensor):
        if (problem := tensor_problem(obj)) is not None:
            raise InputFileError(f"{path}: {what} {problem}; a dense integer tensor is expected")
        if obj.dtype == torch.bool:
            raise InputFileError(f"{path}: {what} must hold integers, got dtype {obj.dtype}")
        arr = obj.detach().cpu().numpy()
    elif isinstance(obj, np.ndarray):
        arr = obj
    else:
        raise InputFileError(f"{path}: {what} must be a tensor, got {type(obj).__name__}")
    if arr.dtype.kind not in "iu":
        raise InputFileError(f"{path}: {what} must hold integers, got dtype {arr.dtype}")
    return arr.astype(np.int64, copy=False)


def load_trace(path: str | Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Read and check a trace file; returns (indices, offsets, lengths) as int64 numpy arrays.

    A trace is a torch file holding ``(indices, offsets, lengths)``: ``lengths`` of shape ``[tables, batch]`` (the
    lookups of each sample into each table), ``offsets`` flat of length ``tables x batch + 1`` (the bag of sample b
    of table t is ``indices[offsets[t x batch + b] : offsets[t x batch + b + 1]]``), ``indices`` flat row ids."""
    p = Path(path)
    if p.is_dir():
        raise InputFileError(f"trace {p} is a directory; give the torch file itself")
    if not p.is_file():
        raise InputFileError(f"trace file not found: {p}")
    try:
        obj = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as e:  # torch's (weights-only) unpickler raises many types on foreign bytes
        raise InputFileError(
            f"{p}: not a torch file holding tensors (indices, offsets, lengths) ({type(e).__name__})"
        ) from None
    if not isinstance(obj, (tuple, list)) or len(obj) != 3:
        kind = f"{type(obj).__name__} of length {len(obj)}" if isinstance(obj, (tuple, list)) else type(obj).__name__
        raise InputFileError(f"{p}: expected a tuple (indices, offsets, lengths), got {kind}")
    indices = _as_numpy(obj[0], "indices", p).ravel()
    offsets = _as_numpy(obj[1], "offsets", p)
    lengths = _as_numpy(obj[2], "lengths", p)
    if lengths.ndim != 2 or lengths.shape[0] < 1 or lengths.shape[1] < 1:
        raise InputFileError(f"{p}: lengths must have shape [tables, batch], got {list(lengths.shape)}")
    num_tables, batch = lengths.shape
    if lengths.size and int(lengths.min()) < 0:
        t, b = (int(x[0]) for x in np.nonzero(lengths < 0))
        raise InputFileError(f"{p}: table {t}: lengths[{t}, {b}] = {int(lengths[t, b])}; lengths must be >= 0")
    if offsets.ndim != 1 or offsets.shape[0] != num_tables * batch + 1:
        raise InputFileError(
            f"{p}: offsets must be flat of length tables*batch+1 = {num_tables * batch + 1}, "
            f"got shape {list(offsets.shape)}"
        )
    if offsets[0] != 0 or offsets[-1] != indices.size:
        raise InputFileError(
            f"{p}: offsets must start at 0 and end at len(indices) = {indices.size}, "
            f"got {int(offsets[0])}..{int(offsets[-1])}"
        )
    bag = np.diff(offsets).reshape(num_tables, batch)
    bad = np.nonzero((bag != lengths).any(axis=1))[0]
    if bad.size:
        t = int(bad[0])
        b = int(np.nonzero(bag[t] != lengths[t])[0][0])
        raise InputFileError(
            f"{p}: table {t}: lengths[{t}, {b}] = {int(lengths[t, b])} but offsets give {int(bag[t, b])}"
            " (offsets must be the running sum of lengths)"
        )
    if indices.size and int(indices.min()) < 0:
        t = int(np.searchsorted(offsets, int(np.argmin(indices)), side="right") - 1) // batch
        raise InputFileError(f"{p}: table {t}: negative row index {int(indices.min())}")
    return indices, offsets, lengths


def table_name(t: int, num_tables: int) -> str:
    return f"t{t:0{max(4, len(str(num_tables - 1)))}d}"


def inventory_from_trace(
    path: str | Path,
    name: str | None = None,
    batch_size: int | None = None,
    *,
    max_tables: int | None = None,
    dim: int = DEFAULT_TRACE_DIM,
) -> Inventory:
    """An inventory with one table per trace table (the first ``max_tables`` if given).

    Per table: ``num_embeddings`` = max index + 1 (1 without lookups), ``pooling_factor`` = mean lookups per sample
    over the file, ``access_histogram`` = the reuse histogram of each batch of ``batch_size`` samples (default: the
    file's whole batch), averaged over the batches with lookups (None when none has)."""
    p = Path(path)
    inv_name = check_name(name, "inventory name") if name is not None else p.stem
    if name is None and name_problem(inv_name):
        raise InputFileError(f"{p}: the file name {inv_name!r} is not a usable inventory name; pass --name ({ALLOWED})")
    indices, offsets, lengths = load_trace(p)
    num_tables, batch = lengths.shape
    bs = batch if batch_size is None else int(batch_size)
    if bs < 1 or bs > batch:
        raise InputFileError(f"{p}: batch_size must be in [1, {batch}] (the file's batch), got {bs}")
    if max_tables is not None and max_tables < 1:
        raise InputFileError(f"max_tables must be >= 1, got {max_tables}")
    keep = num_tables if max_tables is None else min(num_tables, max_tables)
    num_batches = batch // bs
    tables: list[Table] = []
    for t in range(keep):
        start, end = int(offsets[t * batch]), int(offsets[(t + 1) * batch])
        rows_idx = indices[start:end]
        rows = int(rows_idx.max()) + 1 if rows_idx.size else 1
        pooling = float(lengths[t].sum()) / batch
        hists = []
        for k in range(num_batches):
            lo = int(offsets[t * batch + k * bs])
            hi = int(offsets[t * batch + (k + 1) * bs])
            if hi > lo:
                hists.append(reuse_histogram(indices[lo:hi]))
        hist = normalise_histogram(np.mean(hists, axis=0)) if hists else None
        tables.append(
            Table(
                name=table_name(t, num_tables),
                num_embeddings=rows,
                embedding_dim=dim,
                pooling_factor=round(pooling, 6),
                access_histogram=hist,
            )
        )
    return Inventory(name=inv_name, tables=tuple(tables))
