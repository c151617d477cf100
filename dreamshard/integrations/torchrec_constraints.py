"""A team's per-table constraints as they write them for TorchRec: ``{table: ParameterConstraints(...)}`` in Python,
or the same fields as a YAML/JSON mapping (docs/torchrec.md, "Constraints"; the fields: values/constraints.py).

`table_constraints` reads one table's: TorchRec's ``ParameterConstraints`` object as it is (its enums by value or
name, its ``CacheParams`` / ``KeyValueParams`` dataclasses as the fields they set; fields left at TorchRec's
defaults are not constraints), a mapping of the same names (ours too: ``devices``, ``min_shards``,
``max_shards``), or a `TableConstraints`. `load_constraints` reads a whole file: a ``.py`` file defining a dict
``constraints`` (imported: trusted files only), else YAML or JSON. `pooling_of` is what the statistics fields give
a table's features. Keys neither dreamshard nor TorchRec knows, values of the wrong type and contradictions are
one-line InventoryErrors naming the table and the key.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from dreamshard.documents import read_structured
from dreamshard.errors import InventoryError
from dreamshard.integrations.user_code import import_user_module
from dreamshard.values import Table, TableConstraints

#: What a constraints source may be: a file, or the mapping itself ({table: constraints}).
ConstraintsSource = str | Path | Mapping[str, Any]


def _plain(value: Any) -> Any:
    """A TorchRec value as the constraint fields read it: an enum by its string value (``ShardingType.TABLE_WISE``
    -> 'table_wise', ``DataType.FP16`` -> 'FP16') or, for integer enums, its name (``BoundsCheckMode.FATAL`` ->
    'FATAL'); a dataclass as the mapping of its fields set away from their defaults; lists as lists."""
    if isinstance(value, enum.Enum):
        return value.value if isinstance(value.value, str) else value.name
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _set_fields(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _set_fields(obj: Any) -> dict[str, Any]:
    """The fields of dataclass `obj` that differ from a default instance of its class (TorchRec's defaults, such as
    ``pooling_factors=[1.0]``, are its planner's assumptions, not the team's constraints)."""
    try:
        default = type(obj)()
    except TypeError:  # a dataclass with required fields: every field is given
        default = None
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if value is None or (default is not None and value == getattr(default, f.name)):
            continue
        out[f.name] = _plain(value)
    return out


def _problem(e: ValidationError) -> str:
    """The first error of a constraints validation as 'constraint KEY: why' (or 'unknown constraint key')."""
    err = e.errors()[0]
    key = ".".join(str(x) for x in err.get("loc", ()))
    if err.get("type") == "extra_forbidden":
        return f"unknown constraint key '{key}' (neither dreamshard's nor TorchRec's ParameterConstraints field)"
    msg = str(err["msg"]).removeprefix("Value error, ")
    return f"constraint '{key}': {msg}" if key else f"constraints: {msg}"


def table_constraints(table: str, value: Any) -> TableConstraints:
    """One table's constraints from TorchRec's ``ParameterConstraints``, a mapping or a `TableConstraints`."""
    if isinstance(value, TableConstraints):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = _set_fields(value)
    elif isinstance(value, Mapping):
        fields = {str(k): _plain(v) for k, v in value.items()}
    else:
        raise InventoryError(
            f"table '{table}': constraints must be a ParameterConstraints or a mapping of its fields, got "
            f"{type(value).__name__}"
        )
    try:
        return TableConstraints.model_validate(fields)
    except ValidationError as e:
        raise InventoryError(f"table '{table}': {_problem(e)}") from None


def load_constraints(source: ConstraintsSource) -> dict[str, TableConstraints]:
    """{table: constraints} from a mapping, a ``.py`` file defining ``constraints`` (imported), or YAML / JSON."""
    if isinstance(source, Mapping):
        data: Any = source
        where = "constraints"
    else:
        path = Path(source)
        where = f"constraints file {path}"
        if path.suffix == ".py":
            data = getattr(import_user_module(str(path), f"--constraints {str(path)!r}"), "constraints", None)
            if data is None:
                raise InventoryError(f"{where} defines no 'constraints' (a dict {{table: ParameterConstraints}})")
        else:
            data = read_structured(path)
    if not isinstance(data, Mapping):
        raise InventoryError(f"{where}: expected a mapping {{table: constraints}}, got {type(data).__name__}")
    bad = next((k for k in data if not isinstance(k, str) or not k), None)
    if bad is not None:
        raise InventoryError(f"{where}: table names are non-empty strings, got {bad!r}")
    return {name: table_constraints(name, value) for name, value in data.items()}


def check_tables(constraints: Mapping[str, TableConstraints], tables: Mapping[str, Table]) -> None:
    """Every constrained table is one of `tables`, and its `feature_names` (when given) are the table's."""
    for name, c in constraints.items():
        t = tables.get(name)
        if t is None:
            known = ", ".join(sorted(tables)[:8])
            raise InventoryError(f"constraints name table '{name}', which the model does not have (it has {known})")
        problem = c.feature_problem(name, t.feature_names)
        if problem:
            raise InventoryError(problem)


def pooling_of(table: Table, constraints: TableConstraints | None) -> dict[str, float]:
    """{feature: pooling} the statistics constraints give `table` (``pooling_factors``, in the order of the
    constraint's ``feature_names``, else of the table's features); empty when they give none."""
    if constraints is None or constraints.pooling_factors is None:
        return {}
    names = constraints.feature_names or table.feature_names
    return dict(zip(names, (float(p) for p in constraints.pooling_factors), strict=True))
