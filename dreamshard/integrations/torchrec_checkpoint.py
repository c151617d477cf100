"""What a TorchRec training checkpoint holds, and how its entries map onto the state of a model under another plan
(docs/torchrec.md, "Moving a checkpoint to a new plan").

A checkpoint is what ``torch.distributed.checkpoint`` (DCP) saved of ``{"model": model.state_dict(), "optim":
optimizer.state_dict()}``: flat keys ``model.<fqn>`` (a table's weight: ``<fqn>`` ends in ``<table>.weight``)
and ``optim.state.<fqn>.<name>``. DCP reshards a tensor between any two layouts of one global shape under one key.
It cannot follow a table whose optimizer state changes name or shape with the plan, which this module maps
(`plan_moves`):

- a fused (sharded) table keeps ``<table>.momentum1``, a data-parallel one its dense optimizer's ``sum`` (and a
  ``step``, which fused kernels do not keep): the same state under two names (TorchRec issue #2394);
- a row-wise optimizer state (one value per row, e.g. EXACT_ROWWISE_ADAGRAD's ``momentum1``) has ``rows`` values,
  but ``rows x k`` under a column-wise plan of k shards (one row state per shard, in column order).

No torchrec import here: only DCP's metadata, so the checks run before any rank starts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.metadata import TensorStorageMetadata

from dreamshard.errors import CheckpointError, first_line

#: The checkpoint's top-level keys: the model's state_dict and the optimizer's.
MODEL, OPTIM = "model", "optim"
#: Where a table's weight sits in a module's state_dict: EmbeddingBagCollection, EmbeddingCollection.
_TABLE_FQN = re.compile(r"(?:^|\.)(?:embedding_bags|embeddings)\.([^.]+)\.weight$")
#: A dense optimizer's name for the state a fused kernel calls ``momentum1`` (torch's and TorchRec's Adagrads).
_DENSE_NAMES = {"sum": "momentum1"}


@dataclass(frozen=True)
class Stored:
    """One tensor of the checkpoint: its global shape, and the column widths of its chunks in column order (one
    width = whole rows)."""

    shape: tuple[int, ...]
    widths: tuple[int, ...]
    dtype: Any = None


@dataclass(frozen=True)
class Move:
    """How one entry of the new state is filled: ``copy`` (DCP loads `source` into it, renamed where the names
    differ), ``rowwise`` (a row state re-cut from `widths_from` column shards to `widths_to`) or ``fill`` (no
    stored counterpart: a dense optimizer's ``step``, set to 0)."""

    target: str
    source: str | None
    kind: Literal["copy", "rowwise", "fill"]
    table: str | None = None
    widths_from: tuple[int, ...] = ()
    widths_to: tuple[int, ...] = ()
    rows: int = 0  # the table's rows (a row state's block)


def table_of(fqn: str) -> str | None:
    """The table whose weight `fqn` is (``...embedding_bags.<table>.weight``), else None."""
    m = _TABLE_FQN.search(fqn)
    return m.group(1) if m else None


def column_widths(chunks: list[tuple[tuple[int, ...], tuple[int, ...]]], dim: int) -> tuple[int, ...]:
    """The column widths of a weight's chunks ``[(offsets, sizes)]`` in column order; ``(dim,)`` when every chunk
    spans whole rows (table-, row-wise, data-parallel)."""
    cols = sorted({(int(off[1]), int(size[1])) for off, size in chunks if len(off) == 2})
    return tuple(w for _, w in cols) if cols and cols != [(0, dim)] else (dim,)


def read_checkpoint(path: str | Path) -> dict[str, Stored]:
    """{flat key: Stored} of the tensors of the DCP checkpoint in `path`. CheckpointError (one line) when it is
    missing, has no readable metadata, or a data file is shorter than the metadata says (truncated)."""
    root = Path(path)
    if not root.is_dir():
        raise CheckpointError(f"checkpoint {root}: no such directory")
    try:
        meta = FileSystemReader(str(root)).read_metadata()
    except Exception as e:  # DCP's reader: a missing or corrupt .metadata file
        raise CheckpointError(f"checkpoint {root}: unreadable metadata ({first_line(e)})") from None
    need: dict[str, int] = {}
    for info in (meta.storage_data or {}).values():
        need[info.relative_path] = max(need.get(info.relative_path, 0), int(info.offset) + int(info.length))
    for rel, size in sorted(need.items()):
        have = (root / rel).stat().st_size if (root / rel).is_file() else -1
        if have < size:
            what = "missing" if have < 0 else f"truncated ({have} of {size} bytes)"
            raise CheckpointError(f"checkpoint {root}: data file {rel} is {what}")
    out: dict[str, Stored] = {}
    for key, md in meta.state_dict_metadata.items():
        if isinstance(md, TensorStorageMetadata):
            shape = tuple(int(x) for x in md.size)
            chunks = [(tuple(c.offsets), tuple(c.sizes)) for c in md.chunks]
            widths = column_widths(chunks, shape[1]) if len(shape) == 2 else ()
            out[key] = Stored(shape, widths, md.properties.dtype)
    return out


def _field(rest: str, table: str) -> str:
    """The optimizer field of ``optim.state.<fqn>.<rest>``: a fused ``<table>.momentum1`` and a dense ``sum`` are
    both ``momentum1``; anything else is its own name."""
    if rest.startswith(f"{table}."):
        return rest[len(table) + 1 :]
    return _DENSE_NAMES.get(rest, rest)


def _split(key: str, tables: Mapping[str, str]) -> tuple[str, str] | None:
    """(fqn, rest) of an ``optim.state.<fqn>.<rest>`` key of a table's weight, else None."""
    prefix = f"{OPTIM}.state."
    if not key.startswith(prefix):
        return None
    body = key[len(prefix) :]
    for fqn in tables:
        if body.startswith(f"{fqn}."):
            return fqn, body[len(fqn) + 1 :]
    return None


def _state_index(stored: Mapping[str, Stored], tables: Mapping[str, str]) -> dict[tuple[str, str], str]:
    """{(table fqn, field): stored key} of every optimizer state the checkpoint holds for a table."""
    out: dict[tuple[str, str], str] = {}
    for key in stored:
        split = _split(key, tables)
        if split is not None:
            fqn, rest = split
            out[(fqn, _field(rest, tables[fqn]))] = key
    return out


@dataclass(frozen=True)
class Wanted:
    """One tensor of the new state (this rank's view): its global shape, and for a table's weight the column widths
    of its shards under the new plan."""

    shape: tuple[int, ...]
    widths: tuple[int, ...] = ()


def _weight_move(key: str, want: Wanted, stored: Mapping[str, Stored], table: str | None) -> Move:
    """A model entry: the same key, of the same shape."""
    have = stored.get(key)
    what = f"table '{table}'" if table else f"'{key}'"
    if have is None:
        raise CheckpointError(f"{what} is not in the checkpoint ({key}); it was saved from another model")
    if have.shape != want.shape:
        shape = "x".join(map(str, have.shape)), "x".join(map(str, want.shape))
        raise CheckpointError(f"{what} is {shape[0]} in the checkpoint but {shape[1]} in the model")
    return Move(key, key, "copy", table)


def _state_move(key: str, want: Wanted, fqn: str, field: str, ctx: _Context) -> Move:
    """A table's optimizer state: found under its own name or the other form's (fused <-> dense), re-cut when it
    is a row state whose column shards differ."""
    table = ctx.tables[fqn]
    source = ctx.index.get((fqn, field))
    if source is None:
        if field == "step":
            return Move(key, None, "fill", table)
        raise CheckpointError(
            f"table '{table}': the checkpoint holds no optimizer state '{field}' for it (saved with another optimizer?)"
        )
    have = ctx.stored[source].shape
    weight = ctx.stored.get(f"{MODEL}.{fqn}")
    if weight is None:
        raise CheckpointError(
            f"table '{table}' is not in the checkpoint ({MODEL}.{fqn}); it was saved from another model"
        )
    rows = weight.shape[0]
    widths = ctx.wanted_widths[fqn]
    if have == want.shape and (len(have) != 1 or weight.widths == widths):
        return Move(key, source, "copy", table)
    if all(_row_state(s, rows) for s in (have, want.shape)) and (
        (_numel(have), _numel(want.shape)) == (rows * len(weight.widths), rows * len(widths))
    ):
        return Move(key, source, "rowwise", table, weight.widths, widths, rows)
    raise CheckpointError(
        f"table '{table}': optimizer state '{field}' is {tuple(have)} in the checkpoint but {tuple(want.shape)} "
        f"under the new plan"
    )


def _row_state(shape: tuple[int, ...], rows: int) -> bool:
    """A row state: one value per row (and column shard), as ``[rows * k]`` or ``[rows, 1]``."""
    return _numel(shape) % rows == 0 and all(x == 1 for x in shape[1:])


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for x in shape:
        n *= x
    return n


@dataclass(frozen=True)
class _Context:
    stored: Mapping[str, Stored]
    tables: Mapping[str, str]  # weight fqn -> table
    index: Mapping[tuple[str, str], str]  # (fqn, field) -> stored key
    wanted_widths: Mapping[str, tuple[int, ...]]  # weight fqn -> column widths under the new plan


def plan_moves(stored: Mapping[str, Stored], wanted: Mapping[str, Wanted]) -> list[Move]:
    """How every entry of the new state (`wanted`: flat key -> shape, this rank's view) is filled from the
    checkpoint (`stored`). CheckpointError naming the table and the field when the checkpoint lacks a table or a
    state, holds a table the model lacks, or a state the new optimizer has no place for. Entries that are not
    model or optimizer state (``optim.param_groups...``) are loaded when stored and kept as they are otherwise."""
    model = f"{MODEL}."
    tables = {k[len(model) :]: t for k in wanted if k.startswith(model) and (t := table_of(k[len(model) :]))}
    extra = [table_of(k[len(model) :]) or k for k in stored if k.startswith(model) and k not in wanted]
    if extra:
        raise CheckpointError(f"table '{extra[0]}' is in the checkpoint but not in the model ({len(extra)} such)")
    ctx = _Context(stored, tables, _state_index(stored, tables), {f: wanted[model + f].widths for f in tables})
    moves: list[Move] = []
    fields: dict[str, set[str]] = {}
    for key, want in wanted.items():
        split = _split(key, tables)
        if key.startswith(model):
            moves.append(_weight_move(key, want, stored, tables.get(key[len(model) :])))
        elif split is not None:
            field = _field(split[1], tables[split[0]])
            fields.setdefault(split[0], set()).add(field)
            moves.append(_state_move(key, want, split[0], field, ctx))
        elif key.startswith(f"{OPTIM}.state."):
            moves.append(_weight_move(key, want, stored, None))
        elif key in stored:
            moves.append(Move(key, key, "copy"))
    for (fqn, field), source in ctx.index.items():
        if fqn in fields and field != "step" and field not in fields[fqn]:
            raise CheckpointError(
                f"table '{tables[fqn]}': the checkpoint's optimizer state '{field}' ({source}) has no place under "
                f"the new optimizer (it keeps {', '.join(sorted(fields[fqn]))})"
            )
    return moves


def recut_rows(values: Any, rows: int, widths_from: tuple[int, ...], widths_to: tuple[int, ...]) -> Any:
    """A row state (one value per row and column shard, shards in column order) moved between column cuts: the
    shards' states averaged by width into the table's (exact for row-wise Adagrad's mean of squared gradients),
    then given to every new shard."""
    blocks = values.reshape(len(widths_from), rows)
    if len(widths_from) == 1:
        row = blocks[0]
    else:
        w = blocks.new_tensor(widths_from).unsqueeze(1)
        row = (blocks * w).sum(0) / sum(widths_from)
    return row.repeat(len(widths_to)) if len(widths_to) > 1 else row


#: The fused optimizers whose state a move translates, by what the checkpoint holds of a table (fbgemm's CPU
#: kernels run these three; EXACT_SGD keeps no state).
OPTIMIZERS = ("exact_sgd", "exact_adagrad", "exact_row_wise_adagrad")


def infer_optimizer(stored: Mapping[str, Stored]) -> str:
    """The fused optimizer (an `OPTIMIZERS` value) the checkpoint's tables were trained with: a ``momentum1`` the
    shape of the weight is EXACT_ADAGRAD's, a row state EXACT_ROWWISE_ADAGRAD's, none EXACT_SGD. CheckpointError
    naming the table for any other state."""
    tables = {
        k[len(MODEL) + 1 :]: t for k in stored if k.startswith(f"{MODEL}.") and (t := table_of(k[len(MODEL) + 1 :]))
    }
    kinds: dict[str, str] = {}
    for (fqn, field), key in _state_index(stored, tables).items():
        shape = stored[key].shape
        if field == "step":
            continue
        if field != "momentum1":
            raise CheckpointError(f"table '{tables[fqn]}': optimizer state '{field}' ({key}) is not one migrate moves")
        kinds[tables[fqn]] = "exact_adagrad" if len(shape) == 2 and shape[1] > 1 else "exact_row_wise_adagrad"
    found = sorted(set(kinds.values()))
    if len(found) > 1:
        raise CheckpointError(f"the checkpoint's tables were trained with {' and '.join(found)}; expected one")
    return found[0] if found else "exact_sgd"
