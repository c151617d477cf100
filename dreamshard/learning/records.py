"""Training data is checked like input (docs/architecture/rules.md, "Where each rule lives").

A measurement record the cost model learns from must be in range (every device its placement names exists, one
cost per device), finite and bounded (every cost figure, its comm model's included, >= 0 and at most
`MAX_RECORD_MS`: a forged 1e308 would overflow the float32 targets into NaN weights) and consistent (the overall
is the bottleneck device's total within `OVERALL_LOW`..`OVERALL_HIGH`, one content per measurement id, one
inventory for all records). `check_record` is the per-record part, what the cost trainer checks on every record;
`check_training_records` adds the cross-record rules and is what every training entry calls. Failures are
one-line TrainingDataErrors naming the source, the record, the field and the limit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from dreamshard.errors import PlanError, TrainingDataError
from dreamshard.placement.expand import unit_table
from dreamshard.values import Inventory, Measurement, Table, parse_unit
from dreamshard.values.costs import COST_COMPONENTS, MAX_RECORD_MS, OVERALL_HIGH, OVERALL_LOW

#: An id longer than this is cut in messages (a message stays one readable line).
_ID_SHOWN = 80


def _label(m: Measurement, index: int | None, source: str) -> str:
    mid = m.measurement_id if len(m.measurement_id) <= _ID_SHOWN else m.measurement_id[:_ID_SHOWN] + "..."
    where = f"record {index} " if index is not None else ""
    return f"{source + ': ' if source else ''}{where}(measurement '{mid}')"


def _bounded(label: str, field: str, value: float, unit: str = "ms") -> None:
    if not math.isfinite(value) or not 0.0 <= value <= MAX_RECORD_MS:
        raise TrainingDataError(
            f"{label}: {field} = {value:g} {unit}; training costs must be finite, >= 0 and at most "
            f"{MAX_RECORD_MS:g} (MAX_RECORD_MS)"
        )


def check_record(m: Measurement, index: int | None = None, source: str = "") -> None:
    """TrainingDataError unless `m` is a record the cost model may learn from (devices in range, costs finite,
    bounded and consistent); `index` (1-based) and `source` (a file) name it in the message."""
    label = _label(m, index, source)
    n = m.topology.num_devices
    if len(m.costs.per_device) != n:
        raise TrainingDataError(
            f"{label}: costs.per_device has {len(m.costs.per_device)} devices, its topology has num_devices {n}"
        )
    for table, device in m.placement.items():
        if device >= n:
            shown = table if len(table) <= _ID_SHOWN else table[:_ID_SHOWN] + "..."
            raise TrainingDataError(
                f"{label}: placement['{shown}'] = device {device}, but its topology has "
                f"num_devices {n} (devices 0..{n - 1})"
            )
    for d, cost in enumerate(m.costs.per_device):
        for name, value in zip(COST_COMPONENTS, cost.as_list(), strict=True):
            _bounded(label, f"costs.per_device[{d}].{name}", value)
        _bounded(label, f"costs.per_device[{d}] total", cost.total)
    _bounded(label, "costs.overall_ms", m.costs.overall_ms)
    if not m.costs.overall_agrees():  # the gate's rule for a comparison's figures (dreamshard.values.costs)
        raise TrainingDataError(
            f"{label}: costs.overall_ms = {m.costs.overall_ms:g} ms contradicts its per-device costs (bottleneck "
            f"device total {m.costs.top_total:g} ms; the overall must lie within {1 - OVERALL_LOW:g}.."
            f"{OVERALL_HIGH:g} x it)"
        )
    for i, s in enumerate(m.spread):
        if not math.isfinite(s) or s < 0:
            raise TrainingDataError(f"{label}: spread[{i}] = {s:g}; a spread must be finite and >= 0")
    c = m.comm_model
    if c is not None:
        _bounded(label, "comm_model.alpha_ms", c.alpha_ms)
        _bounded(label, "comm_model.beta_ms_per_mb", c.beta_ms_per_mb, "ms/MB")
        for j, (mb, ms) in enumerate(c.points):
            if not (math.isfinite(mb) and math.isfinite(ms)):
                raise TrainingDataError(f"{label}: comm_model.points[{j}] = ({mb:g}, {ms:g}); points must be finite")


def _content(m: Measurement) -> tuple[object, ...]:
    """What one measurement id stands for (its time of writing aside)."""
    return (
        m.kind,
        m.task,
        m.inventory_fingerprint,
        m.topology,
        tuple(sorted(m.placement.items())),
        m.costs,
        m.backend,
        m.spread,
        m.comm_model,
    )


def _differs(a: Measurement, b: Measurement) -> str:
    for field in ("costs", "placement", "topology", "inventory_fingerprint", "backend", "kind", "task"):
        if getattr(a, field) != getattr(b, field):
            return field
    return "content"


def _check_units(m: Measurement, tables: Mapping[str, Table], label: str) -> None:
    """Every unit a record places is a unit of one of `tables` (`shards.unit_table`), a table is placed whole or
    as units (never both), and a replica sits on the device its name says."""
    whole = {t for t in m.placement if t in tables}
    for t, d in m.placement.items():
        try:
            unit_table(tables, t)
        except PlanError as e:
            raise TrainingDataError(f"{label}: placement: {e}") from None
        ref = parse_unit(t)
        if t not in tables and ref.table in whole:
            raise TrainingDataError(
                f"{label}: placement places table '{ref.table[:_ID_SHOWN]}' whole and as unit "
                f"'{t[:_ID_SHOWN]}'; a table is placed once"
            )
        if ref.kind == "replica" and ref.device != d:
            raise TrainingDataError(
                f"{label}: placement['{t[:_ID_SHOWN]}'] = device {d}; a replica sits on the "
                f"device its name says ({ref.device})"
            )


def check_training_records(
    records: Sequence[Measurement], inventory: Inventory | None = None, source: str = ""
) -> list[Measurement]:
    """The records a training entry was handed, checked (`check_record` each, one content per measurement id,
    one inventory: `inventory`'s if given, else the first record's); returns them with exact repeats of a record
    dropped. TrainingDataError (one line) on the first violation; `source` names the file in messages."""
    want = inventory.fingerprint() if inventory is not None else (records[0].inventory_fingerprint if records else "")
    tables = inventory.by_name() if inventory is not None else None
    inv_name = inventory.name if inventory is not None else ""
    seen: dict[str, tuple[int, Measurement]] = {}
    out: list[Measurement] = []
    for i, m in enumerate(records, start=1):
        label = _label(m, i, source)
        if m.inventory_fingerprint != want:
            of = (
                f"inventory '{inv_name}' ({want[:12]}) given"
                if inventory is not None
                else f"inventory ({want[:12]}) of record 1"
            )
            raise TrainingDataError(
                f"{label}: inventory_fingerprint is {m.inventory_fingerprint[:12]} (inventory "
                f"'{m.inventory_name[:_ID_SHOWN]}'), not the {of}; "
                "train on one inventory's records, with that inventory"
            )
        if tables is not None:  # a unit (a shard or replica of one of the tables) must be one of a table's units
            missing = next((t for t in m.placement if t not in tables and parse_unit(t).table not in tables), None)
            if missing is not None:
                raise TrainingDataError(
                    f"{label}: placement names table '{missing[:_ID_SHOWN]}', which is not in inventory '{inv_name}'"
                )
            _check_units(m, tables, label)
        check_record(m, i, source)
        first = seen.get(m.measurement_id)
        if first is None:
            seen[m.measurement_id] = (i, m)
            out.append(m)
        elif _content(first[1]) != _content(m):
            raise TrainingDataError(
                f"{label}: measurement id already used by record {first[0]} with other {_differs(first[1], m)}; "
                "one measurement id has one cost (drop one of the two, or re-profile)"
            )
    return out
