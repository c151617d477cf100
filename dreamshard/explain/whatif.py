"""What-if (`dreamshard whatif`, docs/architecture/learning.md, "Plan stats and what-if"): a plan changed by removing
tables, adding tables, moving and swapping units, each change predicted with the learned cost the stats report uses.

Changes apply in that order: removals, additions, moves, swaps. An added table goes to the device its spec names,
or else to the device with room where the predicted maximum after adding it is lowest (dreamshard.search.insertion):
the insertion a planner would make for one new table without re-planning the others. The changed plan is a legal
plan of the changed inventory (same name, a new fingerprint), so the before and after predictions are exactly the
plans' own predictions.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from dreamshard.documents import describe_validation_error, load_inventory
from dreamshard.errors import PlanError
from dreamshard.learning.planning_cost import PlanningCost
from dreamshard.placement.expand import expand_plan, fold_units, with_units
from dreamshard.placement.make_plan import make_plan
from dreamshard.search.insertion import insert
from dreamshard.values import Costs, Inventory, Plan, Table, parse_unit
from dreamshard.values.names import check_name
from dreamshard.values.tables import Feature

#: The keys of an `--add-table` spec: `name=...,rows=...,dim=...,pooling=...[,dtype=...][,like=TABLE][,device=D]`.
SPEC_KEYS = ("name", "rows", "dim", "pooling", "dtype", "like", "device")
_FIELD = {"rows": "num_embeddings", "dim": "embedding_dim", "pooling": "pooling_factor", "dtype": "dtype"}


class AddedTable(BaseModel):
    """One table to add: its spec, and the device it must go to (None: where the prediction is lowest)."""

    model_config = ConfigDict(frozen=True)
    table: Table
    device: int | None = None


class WhatIf(BaseModel):
    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)
    changes: tuple[str, ...]
    before: Costs  # predicted
    after: Costs
    plan: Plan  # the changed plan (predicted costs)
    inventory: Inventory  # the changed plan's inventory (the given one unless tables were added or removed)


def parse_changes(moves: Sequence[str], swaps: Sequence[str]) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """`--move UNIT:DEVICE` and `--swap A,B` as given on the command line (a one-line PlanError when malformed)."""
    out: dict[str, int] = {}
    for m in moves:
        unit, sep, dev = m.rpartition(":")
        if not sep or not unit or not (dev.isascii() and dev.isdigit()):
            raise PlanError(f"--move '{m}': expected UNIT:DEVICE (a table or column shard, then a device number)")
        out[unit] = int(dev)
    pairs = []
    for s in swaps:
        a, sep, b = s.partition(",")
        if not sep or not a or not b or a == b:
            raise PlanError(f"--swap '{s}': expected A,B (two different tables or column shards)")
        pairs.append((a, b))
    return out, pairs


def _spec_fields(spec: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    for part in spec.split(","):
        key, sep, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value:
            raise PlanError(
                f"--add-table '{spec}': expected KEY=VALUE pairs separated by ',' "
                f"({', '.join(SPEC_KEYS)}), or an inventory file of the tables to add"
            )
        if key not in SPEC_KEYS:
            raise PlanError(f"--add-table '{spec}': unknown key '{key}'; use {', '.join(SPEC_KEYS)}")
        if key in fields:
            raise PlanError(f"--add-table '{spec}': '{key}' is given twice")
        fields[key] = value
    return fields


def _like(inventory: Inventory, spec: str, source: str, name: str) -> dict[str, object]:
    """The fields of table `source` for a new table `name`: its statistics and dtype; its features (a shared table)
    renamed `name.feature`, since a feature is served by one table."""
    found = next((t for t in inventory.tables if t.name == source), None)
    if found is None:
        raise PlanError(f"--add-table '{spec}': like='{source}' is not a table of inventory '{inventory.name}'")
    base = found.model_dump(exclude={"name", "features"})
    if found.features:
        base["features"] = [Feature(name=f"{name}.{f.name}", pooling_factor=f.pooling_factor) for f in found.features]
    return base


def is_file_spec(spec: str) -> bool:
    """Whether an `--add-table` value names an inventory file (no KEY=VALUE pair in it)."""
    return "=" not in spec


def parse_added(inventory: Inventory, specs: Sequence[str]) -> list[AddedTable]:
    """`--add-table` values: a KEY=VALUE spec (`SPEC_KEYS`; `like=TABLE` copies that table's statistics, the given
    keys override them) or an existing inventory file whose tables are all added (placed where predicted lowest).
    A one-line error naming the spec and the field otherwise."""
    out: list[AddedTable] = []
    for spec in specs:
        if is_file_spec(spec):
            path = Path(spec)
            if not path.is_file():
                raise PlanError(
                    f"--add-table '{spec}': neither a KEY=VALUE spec ({', '.join(SPEC_KEYS)}) nor an inventory file"
                )
            out.extend(AddedTable(table=t) for t in load_inventory(path).tables)
            continue
        fields = _spec_fields(spec)
        name = fields.get("name")
        if name is None:
            raise PlanError(f"--add-table '{spec}': 'name' is required")
        data: dict[str, object] = _like(inventory, spec, fields["like"], name) if "like" in fields else {}
        data["name"] = check_name(name, "--add-table name")
        data.update({_FIELD[k]: _value(spec, k, v) for k, v in fields.items() if k in _FIELD})
        missing = [k for k in ("rows", "dim", "pooling") if _FIELD[k] not in data]
        if missing:
            raise PlanError(
                f"--add-table '{spec}': {', '.join(repr(k) for k in missing)} required (or like=TABLE to copy them)"
            )
        if "pooling" in fields:
            data.pop("features", None)  # a new pooling for the table replaces the copied features' split of it
        try:
            table = Table.model_validate(data)
        except ValidationError as e:
            raise PlanError(f"--add-table '{spec}': {_spec_error(e)}") from None
        device = fields.get("device")
        if device is not None and not (device.isascii() and device.isdigit()):
            raise PlanError(f"--add-table '{spec}': device '{device}' is not a device number")
        out.append(AddedTable(table=table, device=None if device is None else int(device)))
    return out


def _value(spec: str, key: str, text: str) -> object:
    """A spec value as the table field takes it: rows and dim whole numbers (1e6 allowed), pooling a number."""
    if key == "dtype":
        return text
    try:
        number = float(text)
    except ValueError:
        number = math.nan
    if not math.isfinite(number) or (key != "pooling" and number != int(number)):
        want = "a number" if key == "pooling" else "a whole number"
        raise PlanError(f"--add-table '{spec}': {key} '{text}' is not {want}")
    return number if key == "pooling" else int(number)


def _spec_error(err: ValidationError) -> str:
    """The first field error in the spec's own words (rows, dim, pooling, dtype)."""
    back = {v: k for k, v in _FIELD.items()}
    first = err.errors()[0]
    loc = ".".join(str(x) for x in first.get("loc", ()))
    key = back.get(loc.split(".")[0], loc)
    return f"{key}: {first['msg']}" if key else describe_validation_error(err)


def _movable(flag: str, unit: str, names: set[str]) -> None:
    """A row shard or a replica has no device of its own to change: row blocks sit on every device (or every device
    of one host) in order and a data-parallel table on every device, so moving one would only fold back into the
    same plan while its prediction said otherwise. PlanError naming it."""
    ref = parse_unit(unit)
    if unit not in names and not ref.movable:
        what = "a row shard" if ref.kind == "row" else "a data-parallel replica"
        raise PlanError(
            f"{flag}: '{unit}' is {what} of table '{ref.table}', which cannot move on its "
            f"own; move or swap whole tables or column shards"
        )


def _with_tables(inventory: Inventory, tables: Sequence[Table]) -> Inventory:
    try:
        return Inventory(name=inventory.name, tables=tuple(tables))
    except ValidationError as e:
        raise PlanError(
            f"the changed inventory '{inventory.name}' is not valid: {describe_validation_error(e)}"
        ) from None


def _plan(inventory: Inventory, plan: Plan, cost: PlanningCost, units: Mapping[str, int]) -> Plan:
    """The legal plan of `inventory` placing `units`, with its prediction (a one-line PlanError otherwise)."""
    folded = fold_units(inventory, units)
    changed = make_plan(
        inventory,
        plan.topology,
        sharder=plan.sharder,
        placement=folded.placement,
        column_shards=folded.column_shards,
        row_shards=folded.row_shards,
        data_parallel=folded.data_parallel,
        model_version=plan.model_version,
        kernels={t: k for t, k in plan.kernels.items() if t in inventory.table_names},
        cache_load_factors={t: f for t, f in plan.cache_load_factors.items() if t in inventory.table_names},
    )
    expanded, placed = expand_plan(inventory, changed)
    return changed.model_copy(update={"predicted": cost.predict(list(expanded.tables), placed)})


def _remove(inventory: Inventory, placed: dict[str, int], removed: Sequence[str], changes: list[str]) -> Inventory:
    for name in dict.fromkeys(removed):
        if name not in inventory.table_names:
            raise PlanError(f"--remove-table: '{name}' is not a table of inventory '{inventory.name}'")
        if len(inventory.tables) == 1:
            raise PlanError(f"--remove-table would leave inventory '{inventory.name}' without tables")
        gone = sorted({d for u, d in placed.items() if parse_unit(u).table == name or u == name})
        for u in [u for u in placed if parse_unit(u).table == name or u == name]:
            del placed[u]
        changes.append(f"remove {name} (from device{'s' if len(gone) > 1 else ''} {', '.join(map(str, gone))})")
        inventory = _with_tables(inventory, [t for t in inventory.tables if t.name != name])
    return inventory


def _add(
    inventory: Inventory,
    plan: Plan,
    cost: PlanningCost,
    placed: dict[str, int],
    added: Sequence[AddedTable],
    changes: list[str],
) -> Inventory:
    n = plan.topology.num_devices
    for a in added:
        name = a.table.name
        if name in inventory.table_names:
            raise PlanError(f"--add-table: table '{name}' is already in inventory '{inventory.name}'")
        if a.device is not None and not 0 <= a.device < n:
            raise PlanError(f"--add-table {name}: device {a.device} is out of range (the plan has {n} devices)")
        units = with_units(inventory, placed)
        placed[name] = insert(
            list(units.tables), placed, a.table, plan.topology, cost, a.device, what=f"--add-table {name}"
        )
        inventory = _with_tables(inventory, [*inventory.tables, a.table])
        how = "as asked" if a.device is not None else "lowest predicted maximum"
        changes.append(
            f"add {name} ({a.table.num_embeddings} x {a.table.embedding_dim}, pooling "
            f"{a.table.pooling_factor:g}) ->{placed[name]} ({how})"
        )
    return inventory


def what_if(
    inventory: Inventory,
    plan: Plan,
    cost: PlanningCost,
    moves: Mapping[str, int],
    swaps: Sequence[tuple[str, str]],
    added: Sequence[AddedTable] = (),
    removed: Sequence[str] = (),
) -> WhatIf:
    """`plan` with `removed` tables dropped, `added` tables placed, then `moves` ({unit: device}) and `swaps`
    applied, all predicted by `cost`; the changed plan is a legal plan of the changed inventory (memory and devices
    checked: a one-line PlanError / InfeasiblePlacementError otherwise)."""
    units, placed = expand_plan(inventory, plan)
    before = cost.predict(list(units.tables), placed)
    n = plan.topology.num_devices
    new = dict(placed)
    changes: list[str] = []
    changed = _remove(inventory, new, removed, changes)
    changed = _add(changed, plan, cost, new, added, changes)
    names = set(changed.table_names)
    for unit, dev in moves.items():
        if unit not in new:
            raise PlanError(
                f"--move: '{unit}' is not a unit of plan {plan.plan_id} (its tables, or column shards as "
                f"table@start:end)"
            )
        _movable("--move", unit, names)
        if not 0 <= dev < n:
            raise PlanError(f"--move {unit}:{dev}: device {dev} is out of range (the plan has {n} devices)")
        changes.append(f"move {unit} {new[unit]}->{dev}")
        new[unit] = dev
    for a, b in swaps:
        for u in (a, b):
            if u not in new:
                raise PlanError(f"--swap: '{u}' is not a unit of plan {plan.plan_id}")
            _movable("--swap", u, names)
        changes.append(f"swap {a}@{new[a]} <-> {b}@{new[b]}")
        new[a], new[b] = new[b], new[a]
    after = _plan(changed, plan, cost, new)
    assert after.predicted is not None
    return WhatIf(changes=tuple(changes), before=before, after=after.predicted, plan=after, inventory=changed)


__all__ = ["SPEC_KEYS", "AddedTable", "WhatIf", "is_file_spec", "parse_added", "parse_changes", "what_if"]
