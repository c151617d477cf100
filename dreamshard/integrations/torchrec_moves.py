"""How the entries of a model's new state are filled from a training checkpoint saved under another plan, or from
another version of the model (docs/torchrec.md, "Moving a checkpoint to a new plan" and "When the model changes").

`plan_moves` maps every tensor of the new state (flat DCP keys, this rank's view) onto the checkpoint's:

- the same key and global shape: DCP loads it under any sharding (a dense parameter, an MLP's optimizer state, a
  table's weight and a pointwise optimizer state);
- the other form's name: a fused (sharded) table keeps ``<table>.momentum1`` (and ``<table>.exp_avg_sq`` for
  Adam and LAMB), a data-parallel one its dense optimizer's ``sum`` (Adagrad) or ``exp_avg`` / ``exp_avg_sq``
  (Adam), with a ``step`` fused kernels do not keep (TorchRec issue #2394);
- a row state re-cut: one value per row, but ``rows x k`` under a column-wise plan of k shards;
- a table renamed by the caller's map (``{old: new}``; never guessed), its state under the old name.

A table of the model the checkpoint lacks is *initialised*: left as the new model initialised it (weights and
optimizer state); a table of the checkpoint the model lacks is *dropped*; dense entries (an MLP's parameters,
buffers) alike. `Moves` lists them for the report. No torch import here.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from dreamshard.errors import CheckpointError
from dreamshard.integrations.torchrec_checkpoint import MODEL, OPTIM, Stored, table_of

#: A dense optimizer's name for the state a fused kernel keeps as ``momentum1`` (torch's Adagrad and TorchRec's
#: RowWiseAdagrad: ``sum``; torch's Adam: ``exp_avg``); the second moment has one name in both forms.
_DENSE_NAMES = {"sum": "momentum1", "exp_avg": "momentum1"}
_STATE = f"{OPTIM}.state."


@dataclass(frozen=True)
class Wanted:
    """One tensor of the new state (this rank's view): its global shape, and for a table's weight the column widths
    of its shards under the new plan."""

    shape: tuple[int, ...]
    widths: tuple[int, ...] = ()


@dataclass(frozen=True)
class Move:
    """How one entry of the new state is filled: ``copy`` (DCP loads `source` into it, renamed where the names
    differ), ``rowwise`` (a row state re-cut from `widths_from` column shards to `widths_to`), ``fill`` (a dense
    optimizer's ``step`` with no stored counterpart: set to 0) or ``keep`` (a new table's or parameter's entry: left
    as the model initialised it). `translated`: the stored state changes name or layout (what DCP alone cannot
    load)."""

    target: str
    source: str | None
    kind: Literal["copy", "rowwise", "fill", "keep"]
    table: str | None = None
    widths_from: tuple[int, ...] = ()
    widths_to: tuple[int, ...] = ()
    rows: int = 0  # the table's rows (a row state's block)
    translated: bool = False


@dataclass(frozen=True)
class Moves:
    """Every entry's move, and what the model change did: tables carried (by their new names), initialised
    (new in the model) and dropped (gone from it), the renames applied, and the same for the dense entries."""

    moves: tuple[Move, ...]
    carried: tuple[str, ...] = ()
    initialised: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()
    renamed: tuple[tuple[str, str], ...] = ()
    dense_carried: tuple[str, ...] = ()
    dense_initialised: tuple[str, ...] = ()
    dense_dropped: tuple[str, ...] = ()

    @property
    def translated(self) -> tuple[str, ...]:
        return tuple(sorted({m.table for m in self.moves if m.table and m.translated}))


def field_of(rest: str, table: str) -> str:
    """The optimizer field of ``optim.state.<fqn>.<rest>``: a fused ``<table>.momentum1`` and a dense ``sum`` or
    ``exp_avg`` are all ``momentum1``; anything else is its own name."""
    if rest.startswith(f"{table}."):
        return rest[len(table) + 1 :]
    return _DENSE_NAMES.get(rest, rest)


def _tables(keys: Any) -> dict[str, str]:
    """{weight fqn: table} of the tables whose ``model.<fqn>`` is among `keys`."""
    model = f"{MODEL}."
    return {k[len(model) :]: t for k in keys if k.startswith(model) and (t := table_of(k[len(model) :]))}


def _owner(key: str, fqns: Any) -> tuple[str, str] | None:
    """(fqn, rest) of an ``optim.state.<fqn>.<rest>`` key whose fqn is one of `fqns` (longest first), else None."""
    if not key.startswith(_STATE):
        return None
    body = key[len(_STATE) :]
    for fqn in fqns:
        if body.startswith(f"{fqn}."):
            return fqn, body[len(fqn) + 1 :]
    return None


def _shape(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape)) or "a scalar"


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for x in shape:
        n *= x
    return n


def _row_state(shape: tuple[int, ...], rows: int) -> bool:
    """A row state: one value per row (and column shard), as ``[rows * k]`` or ``[rows, 1]``."""
    return _numel(shape) % rows == 0 and all(x == 1 for x in shape[1:])


@dataclass
class _Match:
    """The new model's tables matched to the checkpoint's (`sources`: new weight fqn -> stored weight fqn)."""

    have: dict[str, str]  # stored weight fqn -> table
    want: dict[str, str]  # new weight fqn -> table
    sources: dict[str, str] = field(default_factory=dict)
    renamed: list[tuple[str, str]] = field(default_factory=list)


def _match(stored: Mapping[str, Stored], wanted: Mapping[str, Wanted], renames: Mapping[str, str]) -> _Match:
    """Each new table's stored counterpart: the same fqn (with the old name where `renames` renames it), else the
    only stored table of that name (a module moved). CheckpointError for a rename naming a table neither has."""
    m = _Match(_tables(stored), _tables(wanted))
    have_names, want_names = sorted(set(m.have.values())), set(m.want.values())
    old_of: dict[str, str] = {}
    for old, new in renames.items():
        if old not in have_names:
            raise CheckpointError(
                f"--rename {old}={new}: the checkpoint has no table '{old}' ({', '.join(have_names)})"
            )
        if new not in want_names:
            raise CheckpointError(f"--rename {old}={new}: the model has no table '{new}'")
        if new in old_of:
            raise CheckpointError(f"--rename {old_of[new]}={new} and {old}={new}: two tables renamed to one")
        if old in want_names:
            raise CheckpointError(f"--rename {old}={new}: the model still has a table '{old}'")
        old_of[new] = old
    by_name: dict[str, list[str]] = {}
    for fqn, t in m.have.items():
        by_name.setdefault(t, []).append(fqn)
    for fqn, table in sorted(m.want.items()):
        old = old_of.get(table, table)
        same = fqn[: -len(f"{table}.weight")] + f"{old}.weight"
        source = same if same in m.have else (by_name[old][0] if len(by_name.get(old, ())) == 1 else None)
        if source is None and old != table:
            raise CheckpointError(f"--rename {old}={table}: the checkpoint has '{old}' in several modules")
        if source is not None:
            m.sources[fqn] = source
            if old != table:
                m.renamed.append((old, table))
    return m


@dataclass(frozen=True)
class _Context:
    stored: Mapping[str, Stored]
    match: _Match
    index: Mapping[tuple[str, str], str]  # (stored fqn, field) -> stored key
    wanted_widths: Mapping[str, tuple[int, ...]]  # new weight fqn -> column widths under the new plan


def _state_index(stored: Mapping[str, Stored], have: Mapping[str, str]) -> dict[tuple[str, str], str]:
    """{(stored table fqn, field): stored key} of every optimizer state the checkpoint holds for a table."""
    out: dict[tuple[str, str], str] = {}
    fqns = sorted(have, key=len, reverse=True)
    for key in stored:
        owner = _owner(key, fqns)
        if owner is not None:
            out[(owner[0], field_of(owner[1], have[owner[0]]))] = key
    return out


def _init_name(what: str) -> str:
    """The --init name of a refused entry: its table, or its module's fqn (``'mlp.0.weight'`` -> ``mlp.0``)."""
    name = what.split("'")[1] if "'" in what else what
    return name if what.startswith("table ") else name.rpartition(".")[0] or name


def _same(key: str, source: str, want: Wanted, have: Stored | None, what: str) -> Move:
    """An entry loaded from `source` as it is: the same global shape, else CheckpointError naming `what`."""
    if have is None:
        raise CheckpointError(f"{what} is not in the checkpoint ({source}); it was saved from another model")
    if have.shape != want.shape:
        raise CheckpointError(
            f"{what} is {_shape(have.shape)} in the checkpoint but {_shape(want.shape)} in the model; a changed "
            f"layer is never cut to fit: --init {_init_name(what)} starts it as the model initialises it"
        )
    return Move(key, source, "copy", None)


def _state_move(key: str, want: Wanted, fqn: str, fld: str, ctx: _Context) -> Move:
    """A carried table's optimizer state: found under its own name or the other form's (fused <-> dense), re-cut
    when it is a row state whose column shards differ."""
    table = ctx.match.want[fqn]
    src_fqn = ctx.match.sources[fqn]
    source = ctx.index.get((src_fqn, fld))
    if source is None:
        if fld == "step":
            return Move(key, None, "fill", table)
        raise CheckpointError(
            f"table '{table}': the checkpoint holds no optimizer state '{fld}' for it (saved with another optimizer?)"
        )
    have = ctx.stored[source].shape
    weight = ctx.stored[f"{MODEL}.{src_fqn}"]
    rows, widths = weight.shape[0], ctx.wanted_widths[fqn]
    fused_from = source[len(_STATE) + len(src_fqn) + 1 :].startswith(f"{ctx.match.have[src_fqn]}.")
    fused_to = key[len(_STATE) + len(fqn) + 1 :].startswith(f"{table}.")
    if have == want.shape and (len(have) != 1 or weight.widths == widths):
        return Move(key, source, "copy", table, translated=fused_from != fused_to)
    if all(_row_state(s, rows) for s in (have, want.shape)) and (
        (_numel(have), _numel(want.shape)) == (rows * len(weight.widths), rows * len(widths))
    ):
        return Move(key, source, "rowwise", table, weight.widths, widths, rows, translated=True)
    raise CheckpointError(
        f"table '{table}': optimizer state '{fld}' is {tuple(have)} in the checkpoint but {tuple(want.shape)} "
        f"under the new plan"
    )


def _dense_moves(stored: Mapping[str, Stored], wanted: Mapping[str, Wanted], tables: set[str]) -> list[Move]:
    """The moves of the entries that are not a table's: model entries and their optimizer state by key; a new
    parameter's entries kept as the model initialised them."""
    model = f"{MODEL}."
    dense = sorted((k[len(model) :] for k in wanted if k.startswith(model) and k[len(model) :] not in tables), key=len)
    fqns = dense[::-1]
    moves: list[Move] = []
    for key, want in wanted.items():
        if key.startswith(model):
            fqn = key[len(model) :]
            if fqn in tables:
                continue
            moves.append(_same(key, key, want, stored[key], f"'{fqn}'") if key in stored else Move(key, None, "keep"))
        elif (owner := _owner(key, fqns)) is not None:
            param = f"{model}{owner[0]}"
            if param not in stored:
                moves.append(Move(key, None, "keep"))
                continue
            what = f"'{owner[0]}': optimizer state '{owner[1]}'"
            if key not in stored:
                raise CheckpointError(f"{what} is not in the checkpoint (saved with another optimizer?)")
            moves.append(_same(key, key, want, stored[key], what))
        elif not key.startswith(_STATE) and key in stored:
            moves.append(Move(key, key, "copy"))
    for key in stored:
        owner = _owner(key, fqns)
        if owner is not None and f"{model}{owner[0]}" in wanted and key not in wanted:
            raise CheckpointError(
                f"'{owner[0]}': the checkpoint's optimizer state '{owner[1]}' has no place under the job's optimizer"
            )
    return moves


def _without(stored: Mapping[str, Stored], wanted: Mapping[str, Wanted], fresh: Collection[str]) -> dict[str, Stored]:
    """`stored` less the entries (and their optimizer state) of the tables and dense entries `fresh` names: a
    table by its name, a dense entry by its fqn or a module's (``mlp.0``). CheckpointError for a name that is in
    neither the model nor the checkpoint."""
    if not fresh:
        return dict(stored)
    model = f"{MODEL}."
    names = set(fresh)

    def named(fqn: str) -> str | None:
        table = table_of(fqn)
        if table is not None:
            return table if table in names else None
        return next((n for n in names if fqn == n or fqn.startswith(f"{n}.")), None)

    owners = {k[len(model) :] for k in [*stored, *wanted] if k.startswith(model)}
    hit = {n for fqn in owners if (n := named(fqn)) is not None}
    if missing := sorted(names - hit):
        raise CheckpointError(
            f"--init {missing[0]}: neither the model nor the checkpoint has a table or entry of that name"
        )
    gone = sorted((fqn for fqn in owners if named(fqn) is not None), key=len, reverse=True)
    return {k: v for k, v in stored.items() if (k[len(model) :] if k.startswith(model) else None) not in gone
            and _owner(k, gone) is None}  # fmt: skip


def plan_moves(
    stored: Mapping[str, Stored],
    wanted: Mapping[str, Wanted],
    renames: Mapping[str, str] | None = None,
    fresh: Collection[str] = (),
) -> Moves:
    """How every entry of the new state (`wanted`: flat key -> shape, this rank's view) is filled from the
    checkpoint (`stored`), tables renamed by `renames` ({old: new}), the tables and dense entries `fresh` names
    left as the model initialised them (a layer whose shape changed). CheckpointError naming the table (or the
    parameter) and the field when a carried entry has another shape, or a state the new optimizer has no place
    for, or when the checkpoint shares nothing with the model."""
    stored = _without(stored, wanted, fresh)
    m = _match(stored, wanted, renames or {})
    ctx = _Context(stored, m, _state_index(stored, m.have), {f: wanted[f"{MODEL}.{f}"].widths for f in m.want})
    moves: list[Move] = []
    fields: dict[str, set[str]] = {}
    want_fqns = sorted(m.want, key=len, reverse=True)
    for key, want in wanted.items():
        fqn = key[len(MODEL) + 1 :] if key.startswith(f"{MODEL}.") else None
        owner = _owner(key, want_fqns)
        if fqn in m.want:
            table = m.want[fqn]
            source = m.sources.get(fqn)
            if source is None:
                moves.append(Move(key, None, "keep", table))
                continue
            move = _same(key, f"{MODEL}.{source}", want, stored.get(f"{MODEL}.{source}"), f"table '{table}'")
            moves.append(Move(key, move.source, "copy", table))
        elif owner is not None:
            if owner[0] not in m.sources:
                moves.append(Move(key, None, "keep", m.want[owner[0]]))
                continue
            fld = field_of(owner[1], m.want[owner[0]])
            fields.setdefault(owner[0], set()).add(fld)
            moves.append(_state_move(key, want, owner[0], fld, ctx))
    for (src, fld), key in ctx.index.items():
        targets = [f for f, s in m.sources.items() if s == src and f in fields]
        for fqn in targets:
            if fld != "step" and fld not in fields[fqn]:
                raise CheckpointError(
                    f"table '{m.want[fqn]}': the checkpoint's optimizer state '{fld}' ({key}) has no place under "
                    f"the new optimizer (it keeps {', '.join(sorted(fields[fqn]))})"
                )
    dense = _dense_moves(stored, wanted, set(m.want) | set(m.have))
    model = f"{MODEL}."
    dense_have = {k[len(model) :] for k in stored if k.startswith(model) and k[len(model) :] not in m.have}
    dense_want = {k[len(model) :] for k in wanted if k.startswith(model) and k[len(model) :] not in m.want}
    if (m.have or dense_have) and (m.want or dense_want) and not m.sources and not dense_have & dense_want:
        raise CheckpointError(
            "the checkpoint shares no table and no parameter with the model; it was saved from another model"
        )
    used = set(m.sources.values())
    return Moves(
        moves=tuple(moves + dense),
        carried=tuple(sorted(m.want[f] for f in m.sources)),
        initialised=tuple(sorted(t for f, t in m.want.items() if f not in m.sources)),
        dropped=tuple(sorted(t for f, t in m.have.items() if f not in used)),
        renamed=tuple(sorted(m.renamed)),
        dense_carried=tuple(sorted(dense_have & dense_want)),
        dense_initialised=tuple(sorted(dense_want - dense_have)),
        dense_dropped=tuple(sorted(dense_have - dense_want)),
    )


def recut_rows(values: Any, rows: int, widths_from: tuple[int, ...], widths_to: tuple[int, ...]) -> Any:
    """A row state (one value per row and column shard, shards in column order) moved between column cuts: the
    shards' states averaged by width into the table's (exact for row-wise Adagrad's mean of squared gradients and
    a row-wise second moment alike), then given to every new shard."""
    blocks = values.reshape(len(widths_from), rows)
    if len(widths_from) == 1:
        row = blocks[0]
    else:
        w = blocks.new_tensor(widths_from).unsqueeze(1)
        row = (blocks * w).sum(0) / sum(widths_from)
    return row.repeat(len(widths_to)) if len(widths_to) > 1 else row
