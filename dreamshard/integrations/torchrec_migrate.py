"""A training checkpoint follows the plan and the model: the job restarts under a new plan, or with a changed model,
with the weights and optimizer state it saved (docs/torchrec.md, "Moving a checkpoint to a new plan" and "When
the model changes").

Inside the job, on every rank, after building the model under the new plan (DMP) and its optimizer::

    from dreamshard.integrations.torchrec_migrate import load_checkpoint
    report = load_checkpoint("ckpt/step-1000", model, optimizer)  # instead of dcp.load + load_state_dict

The checkpoint is DCP's of ``{"model": model.state_dict(), "optim": optimizer.state_dict()}`` saved under any
plan and world size. DCP itself moves every tensor whose name and global shape stay; `plan_moves`
(dreamshard.integrations.torchrec_moves) maps the rest: a table turning data-parallel or back, a row-wise state
re-cut for new column shards, a table renamed by the caller's map; tables and dense parameters new in the model
stay as the model initialised them, those gone from it are dropped. The checkpoint is read without running code
it carries (dreamshard.integrations.dcp_reader). `save_migrated` also writes the moved state as a new checkpoint
(what ``dreamshard torchrec migrate`` runs in its ranks).
"""

from __future__ import annotations

import time
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from pydantic import BaseModel, ConfigDict
from torch.distributed.checkpoint.api import CheckpointException

from dreamshard.errors import CheckpointError, DreamshardError, first_line
from dreamshard.integrations.dcp_reader import SafeLoadPlanner, SafeReader
from dreamshard.integrations.torchrec_checkpoint import MODEL, OPTIM, Stored, column_widths, read_checkpoint, table_of
from dreamshard.integrations.torchrec_moves import Move, Moves, Wanted, plan_moves, recut_rows


class LoadReport(BaseModel):
    """What `load_checkpoint` did on this rank: the tables whose stored state changed name or layout (the gap DCP
    leaves), those carried, initialised (new in the model) and dropped (gone from it), the renames, the dense
    entries (an MLP's parameters and buffers) likewise, the entries loaded and the seconds it took."""

    model_config = ConfigDict(frozen=True)

    translated_tables: tuple[str, ...]
    relaid_tables: tuple[str, ...]  # column cuts or data-parallel <-> sharded differ from the checkpoint's
    carried_tables: tuple[str, ...] = ()
    initialised_tables: tuple[str, ...] = ()
    dropped_tables: tuple[str, ...] = ()
    renamed_tables: tuple[tuple[str, str], ...] = ()
    dense_carried: tuple[str, ...] = ()
    dense_initialised: tuple[str, ...] = ()
    dense_dropped: tuple[str, ...] = ()
    entries: int
    seconds: float


def _flatten(prefix: str, value: Any) -> Iterator[tuple[str, Any]]:
    """DCP's flat keys of a nested state dict (mappings joined with '.')."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            yield from _flatten(f"{prefix}.{k}" if prefix else str(k), v)
    else:
        yield prefix, value


def _boxes(value: Any) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """[(offsets, sizes)] of every shard of a sharded tensor (all ranks'), one box for a plain tensor."""
    meta = getattr(value, "metadata", None)
    if callable(meta) and hasattr(value, "local_shards"):
        return [(tuple(s.shard_offsets), tuple(s.shard_sizes)) for s in meta().shards_metadata]
    if isinstance(value, torch.Tensor) and type(value) is not torch.Tensor and hasattr(value, "placements"):
        raise CheckpointError("the model's state holds DTensors; migrate moves ShardedTensor and plain tensor state")
    return [((0,) * value.dim(), tuple(value.shape))]


def wanted_state(flat: Mapping[str, Any]) -> dict[str, Wanted]:
    """{flat key: Wanted} of the tensors of the new state (global shapes; a table weight's column widths)."""
    out: dict[str, Wanted] = {}
    for key, value in flat.items():
        if not isinstance(value, torch.Tensor) and not hasattr(value, "local_shards"):
            continue
        shape = tuple(int(x) for x in value.size())
        widths = column_widths(_boxes(value), shape[1]) if key.startswith(f"{MODEL}.") and len(shape) == 2 else ()
        out[key] = Wanted(shape, widths)
    return out


def _agree(error: DreamshardError | None) -> None:
    """Every rank raises the first rank's error, or none does (a collective: no rank is left waiting in DCP)."""
    if not dist.is_initialized():
        if error is not None:
            raise error
        return
    found: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(found, None if error is None else (type(error), str(error)))
    first = next((e for e in found if e is not None), None)
    if first is not None:
        kind, message = first
        raise kind(message) if issubclass(kind, DreamshardError) else CheckpointError(message)


def _write_rows(dest: Any, full: torch.Tensor) -> None:
    """Copy a row state of the whole table (`full`, flat) into this rank's part of `dest`."""
    if hasattr(dest, "local_shards"):
        for sh in dest.local_shards():
            start, n = int(sh.metadata.shard_offsets[0]), sh.tensor.numel()
            sh.tensor.copy_(full[start : start + n].reshape(sh.tensor.shape))
    else:
        dest.copy_(full.reshape(dest.shape))


def _plan(
    path: Path, flat: Mapping[str, Any], renames: Mapping[str, str], init: Collection[str], allow_pickle: bool
) -> tuple[dict[str, Stored], Moves]:
    """The checkpoint's tensors and the moves of this rank's new state, agreed on by every rank."""
    stored: dict[str, Stored] = {}
    moves = Moves(())
    error: DreamshardError | None = None
    try:
        stored = read_checkpoint(path, allow_pickle)
        moves = plan_moves(stored, wanted_state(flat), renames, init)
    except DreamshardError as e:
        error = e
    _agree(error)
    return stored, moves


def load_checkpoint(
    path: str | Path,
    model: Any,
    optimizer: Any,
    *,
    renames: Mapping[str, str] | None = None,
    init: Collection[str] = (),
    allow_pickle: bool = False,
) -> LoadReport:
    """Load the DCP checkpoint in `path` (saved under any plan, by this model or an earlier version of it) into
    `model` (DMP under the new plan) and `optimizer` (its fused optimizer, combined with the job's dense one), on
    every rank. `renames` ({old: new}) maps tables renamed since; tables and dense parameters new in the model
    keep their initial values, those gone from it are dropped (the report lists both); `init` names tables and
    dense modules (``mlp.0``) that keep their initial values though the checkpoint has them (a layer whose shape
    changed: never cut to fit). `allow_pickle` reads the
    checkpoint's pickles as DCP does (trusted checkpoints only). CheckpointError (one line, on every rank, before
    anything is loaded) naming the table and the field when the checkpoint does not fit them."""
    t0 = time.perf_counter()
    nested = {MODEL: model.state_dict(), OPTIM: optimizer.state_dict()}
    flat = dict(_flatten("", nested))
    stored, moves = _plan(Path(path), flat, renames or {}, init, allow_pickle)
    load: dict[str, Any] = {}
    recut: list[tuple[Move, torch.Tensor]] = []
    for m in moves.moves:
        if m.kind == "copy" and m.source is not None:
            load[m.source] = flat[m.target]
        elif m.kind == "rowwise" and m.source is not None:
            have = stored[m.source]
            load[m.source] = torch.empty(have.shape, dtype=have.dtype or torch.float32)
            recut.append((m, load[m.source]))
        elif m.kind == "fill":
            flat[m.target].zero_()  # a dense optimizer's step: fused kernels keep none
    try:
        dcp.load(load, storage_reader=SafeReader(path, allow_pickle), planner=SafeLoadPlanner(allow_pickle))
    except CheckpointException as e:  # a BaseException: a data file DCP could not read on some rank
        raise CheckpointError(f"checkpoint {path}: {_dcp_reason(e)}") from None
    for m, values in recut:
        _write_rows(flat[m.target], recut_rows(values.flatten(), m.rows, m.widths_from, m.widths_to))
    model.load_state_dict(nested[MODEL])
    optimizer.load_state_dict(nested[OPTIM])
    return LoadReport(
        translated_tables=moves.translated,
        relaid_tables=tuple(_relaid(stored, wanted_state(flat), moves)),
        carried_tables=moves.carried,
        initialised_tables=moves.initialised,
        dropped_tables=moves.dropped,
        renamed_tables=moves.renamed,
        dense_carried=moves.dense_carried,
        dense_initialised=moves.dense_initialised,
        dense_dropped=moves.dense_dropped,
        entries=sum(m.kind != "keep" for m in moves.moves),
        seconds=time.perf_counter() - t0,
    )


def _dcp_reason(e: CheckpointException) -> str:
    """The first rank's error of a failed DCP call, in one line."""
    failures = getattr(e, "failures", {}) or {}
    first = next(iter(failures.values()), e)
    return f"{type(first).__name__}: {first_line(first)}"


def _relaid(stored: Mapping[str, Stored], wanted: Mapping[str, Wanted], moves: Moves) -> list[str]:
    """The carried tables whose column cuts differ between the checkpoint and the new plan."""
    sources = {m.target: m.source for m in moves.moves if m.kind == "copy" and m.source}
    return sorted(
        t
        for key, want in wanted.items()
        if key.startswith(f"{MODEL}.") and (t := table_of(key[len(MODEL) + 1 :])) and key in sources
        if stored[sources[key]].widths != want.widths
    )


def save_migrated(
    source: str | Path,
    out: str | Path,
    model: Any,
    optimizer: Any,
    *,
    renames: Mapping[str, str] | None = None,
    init: Collection[str] = (),
    allow_pickle: bool = False,
) -> LoadReport:
    """`load_checkpoint` from `source`, then the state saved (DCP) as a new checkpoint into `out`, a fresh
    directory of the caller's (``dreamshard torchrec migrate`` renames it into place once every rank reported
    success). Every rank calls it."""
    report = load_checkpoint(source, model, optimizer, renames=renames, init=init, allow_pickle=allow_pickle)
    dcp.save({MODEL: model.state_dict(), OPTIM: optimizer.state_dict()}, checkpoint_id=str(out))
    if dist.is_initialized():
        dist.barrier()
    return report
