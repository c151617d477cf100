"""What a TorchRec training checkpoint holds: its tensors (`read_checkpoint`), which of them are tables, and the
optimizers its tables and its dense parameters were trained with (`infer_optimizer`, `infer_dense_optimizer`)
(docs/torchrec.md, "Moving a checkpoint to a new plan").

A checkpoint is what ``torch.distributed.checkpoint`` (DCP) saved of ``{"model": model.state_dict(), "optim":
optimizer.state_dict()}``: flat keys ``model.<fqn>`` (a table's weight: ``<fqn>`` ends in ``<table>.weight``)
and ``optim.state.<fqn>.<name>``. Its metadata is read without running code (dreamshard.integrations.dcp_reader);
how its entries map onto a new model's is dreamshard.integrations.torchrec_moves. No torchrec import here: only
DCP's metadata, so the checks run before any rank starts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch.distributed.checkpoint.metadata import TensorStorageMetadata

from dreamshard.errors import CheckpointError, first_line
from dreamshard.integrations.dcp_reader import SafeReader

#: The checkpoint's top-level keys: the model's state_dict and the optimizer's.
MODEL, OPTIM = "model", "optim"
#: Where a table's weight sits in a module's state_dict: EmbeddingBagCollection, EmbeddingCollection.
_TABLE_FQN = re.compile(r"(?:^|\.)(?:embedding_bags|embeddings)\.([^.]+)\.weight$")


@dataclass(frozen=True)
class Stored:
    """One tensor of the checkpoint: its global shape, and the column widths of its chunks in column order (one
    width = whole rows)."""

    shape: tuple[int, ...]
    widths: tuple[int, ...]
    dtype: Any = None


def table_of(fqn: str) -> str | None:
    """The table whose weight `fqn` is (``...embedding_bags.<table>.weight``), else None."""
    m = _TABLE_FQN.search(fqn)
    return m.group(1) if m else None


def column_widths(chunks: list[tuple[tuple[int, ...], tuple[int, ...]]], dim: int) -> tuple[int, ...]:
    """The column widths of a weight's chunks ``[(offsets, sizes)]`` in column order; ``(dim,)`` when every chunk
    spans whole rows (table-, row-wise, data-parallel)."""
    cols = sorted({(int(off[1]), int(size[1])) for off, size in chunks if len(off) == 2})
    return tuple(w for _, w in cols) if cols and cols != [(0, dim)] else (dim,)


def read_checkpoint(path: str | Path, allow_pickle: bool = False) -> dict[str, Stored]:
    """{flat key: Stored} of the tensors of the DCP checkpoint in `path`, its metadata read by
    `dcp_reader.SafeReader` (`allow_pickle`: by DCP's ``pickle.load``). CheckpointError (one line) when it is
    missing, has no readable metadata, holds a pickled global DCP's metadata never holds, or a data file is shorter
    than the metadata says (truncated)."""
    root = Path(path)
    if not root.is_dir():
        raise CheckpointError(f"checkpoint {root}: no such directory")
    try:
        meta = SafeReader(root, allow_pickle).read_metadata()
    except CheckpointError:
        raise
    except Exception as e:  # DCP's reader: a missing or corrupt .metadata file
        raise CheckpointError(f"checkpoint {root}: unreadable metadata ({first_line(e)})") from None
    need: dict[str, int] = {}
    for info in (meta.storage_data or {}).values():
        need[info.relative_path] = max(need.get(info.relative_path, 0), int(info.offset) + int(info.length))
    for rel, size in sorted(need.items()):
        if Path(rel).is_absolute() or ".." in Path(rel).parts:
            raise CheckpointError(f"checkpoint {root}: data file {rel} lies outside the checkpoint's directory")
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


def _stored_tables(stored: Mapping[str, Stored]) -> dict[str, str]:
    """{weight fqn: table} of the checkpoint's tables."""
    model = f"{MODEL}."
    return {k[len(model) :]: t for k in stored if k.startswith(model) and (t := table_of(k[len(model) :]))}


def _states(stored: Mapping[str, Stored], fqns: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """{fqn: {field: stored key}} of the optimizer state the checkpoint holds for each of `fqns` ({fqn: table or
    ""}): a fused ``<table>.<field>`` under its field, a dense ``<field>`` under its own name."""
    out: dict[str, dict[str, str]] = {}
    prefix = f"{OPTIM}.state."
    ordered = sorted(fqns, key=len, reverse=True)
    for key in stored:
        if not key.startswith(prefix):
            continue
        body = key[len(prefix) :]
        fqn = next((f for f in ordered if body.startswith(f"{f}.")), None)
        if fqn is not None:
            rest = body[len(fqn) + 1 :]
            table = fqns[fqn]
            out.setdefault(fqn, {})[rest[len(table) + 1 :] if table and rest.startswith(f"{table}.") else rest] = key
    return out


#: The fused optimizers of the tables, by the state the checkpoint holds for them (EXACT_SGD keeps none).
#: ``adam``: two moments the weight's shape (Adam, or LAMB: the same state); ``partial_row_wise_adam``: a row-wise
#: second moment (PARTIAL_ROWWISE_ADAM or PARTIAL_ROWWISE_LAMB).
OPTIMIZERS = ("exact_sgd", "exact_adagrad", "exact_row_wise_adagrad", "adam", "partial_row_wise_adam")
#: The fused optimizers fbgemm's CPU kernels run (ADAM and LAMB: "not supported in CPU mode").
CPU_OPTIMIZERS = ("exact_sgd", "exact_adagrad", "exact_row_wise_adagrad")
#: A data-parallel table's dense names for the fused state (torch's Adagrad, TorchRec's RowWiseAdagrad, torch's Adam).
_AS_FUSED = {"sum": "momentum1", "exp_avg": "momentum1"}


def _full(shape: tuple[int, ...]) -> bool:
    """A state the shape of the weight (not one value per row)."""
    return len(shape) == 2 and shape[1] > 1


def _table_kind(table: str, fields: Mapping[str, tuple[int, ...]]) -> str | None:
    """The fused optimizer whose state `fields` ({field: shape}, dense names read as fused ones) is, else None for
    no state; CheckpointError naming the table for a state migrate does not move."""
    other = sorted(set(fields) - {"momentum1", "exp_avg_sq"})
    if other or (fields and "momentum1" not in fields):
        bad = other[0] if other else sorted(fields)[0]
        raise CheckpointError(f"table '{table}': optimizer state '{bad}' is not one migrate moves")
    if "exp_avg_sq" in fields:
        return "adam" if _full(fields["exp_avg_sq"]) else "partial_row_wise_adam"
    if fields:
        return "exact_adagrad" if _full(fields["momentum1"]) else "exact_row_wise_adagrad"
    return None


def infer_optimizer(stored: Mapping[str, Stored]) -> tuple[str, str]:
    """(the fused optimizer of the sharded tables, the one whose dense counterpart the data-parallel tables had:
    `OPTIMIZERS` values) as the checkpoint's state says: a ``momentum1`` the shape of the weight is EXACT_ADAGRAD's,
    a row state EXACT_ROWWISE_ADAGRAD's, with an ``exp_avg_sq`` Adam's or LAMB's (``partial_row_wise_adam`` when it
    is a row state), none EXACT_SGD. A data-parallel table's dense state (``sum``, ``exp_avg``) is read as the
    fused one it stands for; with no table of one kind, that kind is the other's. CheckpointError naming the
    table for any other state, or tables of one kind trained with two optimizers."""
    tables = _stored_tables(stored)
    kinds: dict[bool, dict[str, str]] = {True: {}, False: {}}  # fused form?
    for fqn, states in _states(stored, tables).items():
        fused = any(k.endswith(f".{tables[fqn]}.{f}") for f, k in states.items())
        fields = {_AS_FUSED.get(f, f): stored[k].shape for f, k in states.items() if f != "step"}
        kind = _table_kind(tables[fqn], fields)
        if kind is not None:
            kinds[fused][tables[fqn]] = kind
    found: dict[bool, str | None] = {}
    for fused, by_table in kinds.items():
        distinct = sorted(set(by_table.values()))
        if len(distinct) > 1:
            what = "sharded" if fused else "data-parallel"
            raise CheckpointError(f"the checkpoint's {what} tables were trained with {' and '.join(distinct)}")
        found[fused] = distinct[0] if distinct else None
    sharded = found[True] or found[False] or "exact_sgd"
    return sharded, found[False] or sharded


#: The dense optimizers whose state migrate rebuilds, by the fields a parameter's state holds.
DENSE_OPTIMIZERS: dict[frozenset[str], str] = {
    frozenset(): "sgd",
    frozenset({"momentum_buffer"}): "sgd_momentum",
    frozenset({"sum", "step"}): "adagrad",
    frozenset({"exp_avg", "exp_avg_sq", "step"}): "adam",
    frozenset({"exp_avg", "exp_avg_sq", "max_exp_avg_sq", "step"}): "adam_amsgrad",
}


def infer_dense_optimizer(stored: Mapping[str, Stored]) -> str:
    """The job's dense optimizer (a `DENSE_OPTIMIZERS` value) as the checkpoint's dense parameters (those that are
    not a table's weight: an MLP's) hold its state: ``sum`` Adagrad's, ``exp_avg`` Adam's (or AdamW's), none
    SGD's. CheckpointError naming the parameter for another state, or parameters trained with two optimizers."""
    model = f"{MODEL}."
    tables = _stored_tables(stored)
    dense = {k[len(model) :]: "" for k in stored if k.startswith(model) and k[len(model) :] not in tables}
    states = _states(stored, dense)
    kinds: dict[str, str] = {}
    for fqn in dense:
        fields = frozenset(states.get(fqn, {}))
        kind = DENSE_OPTIMIZERS.get(fields)
        if kind is None:
            raise CheckpointError(
                f"'{fqn}': optimizer state {', '.join(sorted(fields))} is not one of a dense optimizer migrate "
                f"rebuilds (SGD, Adagrad, Adam)"
            )
        kinds[fqn] = kind
    found = sorted(set(kinds.values()) - ({"sgd"} if len(set(kinds.values())) > 1 else set()))
    if len(found) > 1:
        raise CheckpointError(f"the checkpoint's dense parameters were trained with {' and '.join(found)}")
    return found[0] if found else "sgd"
