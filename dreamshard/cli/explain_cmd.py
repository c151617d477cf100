"""`dreamshard whatif` and the stats report shown by `plan --stats`, `evaluate --stats` and `plans show --stats`."""

from __future__ import annotations

import json
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table as RichTable

from dreamshard.cli.console import show
from dreamshard.cli.options import BackendOverride, InventoryOpt, ModelOpt, ParamsOpt
from dreamshard.config.settings import resolve
from dreamshard.integrations.torchrec_carried import carried_lines
from dreamshard.lazy import lazy_module
from dreamshard.values import Costs

# the use cases import torch: each loads when a command uses it (dreamshard/lazy.py)
if TYPE_CHECKING:  # pragma: no cover
    from dreamshard.usecases import explain as explain_uc
    from dreamshard.usecases import whatif_files
    from dreamshard.values.reports import PlanStats, UnitReason
else:
    explain_uc = lazy_module("dreamshard.usecases.explain")
    whatif_files = lazy_module("dreamshard.usecases.whatif_files")

console = Console(highlight=False)

#: Sharding types as TorchRec's stats table abbreviates them.
TYPE_CODES = {
    "table_wise": "TW",
    "column_wise": "CW",
    "row_wise": "RW",
    "table_row_wise": "TWRW",
    "data_parallel": "DP",
}


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def stats_tables(stats: PlanStats, top: int = 15) -> list[RichTable]:
    """The stats report as two rich tables: the costliest units, then the devices."""
    both = stats.basis == "measured"
    units = RichTable(
        title=f"plan {stats.plan_id}: the {min(top, len(stats.tables))} costliest of "
        f"{len(stats.tables)} units ({stats.basis}; a unit's share of its device)",
        caption=f"imbalance max/mean {stats.imbalance:.3f} · the maximum is set by device "
        f"{next(d.device for d in stats.devices if d.bottleneck)}: "
        f"{', '.join(stats.critical[:5])}{' ...' if len(stats.critical) > 5 else ''} · type: "
        + ", ".join(f"{TYPE_CODES.get(k, k)} {k}" for k in sorted({t.type for t in stats.tables})),
    )
    for col in (
        "rank",
        "unit",
        "type",
        "dev",
        "GB",
        "dim",
        "pooling",
        "outputs",
        "predicted ms",
        *(("measured ms",) if both else ()),
    ):
        units.add_column(col, justify="left" if col in ("unit", "type") else "right")
    for t in stats.tables[:top]:
        units.add_row(
            str(t.rank),
            t.unit,
            TYPE_CODES.get(t.type, t.type),
            str(t.device),
            f"{t.size_gb:.3f}",
            str(t.dim),
            f"{t.pooling:g}",
            str(t.outputs),
            _ms(t.predicted_ms),
            *((_ms(t.measured_ms),) if both else ()),
        )
    devices = RichTable(title="devices")
    for col in (
        "dev",
        "units",
        "memory GB",
        "input MB",
        "output MB",
        "predicted ms",
        *(("measured ms",) if both else ()),
    ):
        devices.add_column(col, justify="right")
    for d in stats.devices:
        devices.add_row(
            str(d.device) + (" *" if d.bottleneck else ""),
            str(d.units),
            f"{d.memory_gb:.3f}",
            f"{d.input_mb:.2f}",
            f"{d.output_mb:.2f}",
            _ms(d.predicted_ms),
            *((_ms(d.measured_ms),) if both else ()),
        )
    return [units, devices]


def print_reasons(reasons: list[list[UnitReason]], top: int = 5) -> None:
    """Per device, why its units are there: fixed by their type, held by memory, then the largest predicted
    cost of moving them (the `top` of each device; the rest summed up)."""
    t = RichTable(title="why each unit is on its device (learned cost, members' mean)")
    for col in ("dev", "unit", "reason"):
        t.add_column(col, justify="right" if col == "dev" else "left")
    for d, rs in enumerate(reasons):
        for r in rs[:top]:
            t.add_row(str(d), r.unit, r.text)
        if len(rs) > top:
            t.add_row(str(d), f"... {len(rs) - top} more", "smaller predicted cost of moving them")
    show(console, t)


def stats_json(stats: PlanStats) -> dict[str, object]:
    """The stats report as JSON (`--json` with `--stats`): every unit's and every device's figures."""
    return stats.model_dump(mode="json")


def print_stats(stats: PlanStats, top: int = 15) -> None:
    show(console, *stats_tables(stats, top))
    for line in carried_lines(stats.carried):
        console.print(line, markup=False, soft_wrap=True)


def _changes_table(before: Costs, after: Costs, label: str) -> RichTable:
    t = RichTable(title=f"{label}: per-device total ms, before -> after")
    for col in ("dev", "before", "after", "change"):
        t.add_column(col, justify="right")
    for d, (a, b) in enumerate(zip(before.per_device, after.per_device, strict=True)):
        t.add_row(str(d), f"{a.total:.3f}", f"{b.total:.3f}", f"{b.total - a.total:+.3f}")
    change = f" ({after.overall_ms / before.overall_ms - 1:+.1%})" if before.overall_ms > 0 else ""
    t.caption = f"overall {before.overall_ms:.3f} -> {after.overall_ms:.3f} ms{change}" if change else ""
    return t


def _totals(before: Costs, after: Costs) -> dict[str, object]:
    return {
        "overall_ms": [before.overall_ms, after.overall_ms],
        "per_device_ms": [[a.total, b.total] for a, b in zip(before.per_device, after.per_device, strict=True)],
    }


def whatif_json(result: explain_uc.WhatIfResult) -> dict[str, object]:
    """`whatif --json`: what changed, [before, after] totals (predicted; measured with --measure), and with
    --explain each unit's reason, device by device."""
    w = result.whatif
    measured = None
    if result.measured_before is not None and result.measured_after is not None:
        measured = _totals(result.measured_before, result.measured_after)
    return {
        "changes": list(w.changes),
        "plan_id": w.plan.plan_id,
        "inventory_fingerprint": w.inventory.fingerprint(),
        "placement": w.plan.units(),
        "predicted": _totals(w.before, w.after),
        "measured": measured,
        "reasons": None
        if result.reasons is None
        else [[r.model_dump(mode="json") for r in dev] for dev in result.reasons],
    }


def whatif(
    plan: Annotated[Path, typer.Argument(help="Plan JSON.")],
    inventory: InventoryOpt,
    move: Annotated[
        list[str] | None,
        typer.Option("--move", help="UNIT:DEVICE (a table, or a column shard table@start:end); repeatable."),
    ] = None,
    swap: Annotated[
        list[str] | None, typer.Option("--swap", help="A,B: exchange the devices of two units; repeatable.")
    ] = None,
    add_table: Annotated[
        list[str] | None,
        typer.Option(
            "--add-table",
            help="A table to add (repeatable): name=N,rows=R,dim=D,pooling=P[,dtype=T][,like=TABLE][,device=K] "
            "(like= copies a table's statistics; default device: the lowest predicted maximum), or an inventory file.",
        ),
    ] = None,
    remove_table: Annotated[
        list[str] | None, typer.Option("--remove-table", help="A table to drop (all its units); repeatable.")
    ] = None,
    model: ModelOpt = None,
    measure: Annotated[
        bool,
        typer.Option(
            "--measure",
            help="Also measure the plan and the changed plan, interleaved (evaluate.rounds rounds on --backend).",
        ),
    ] = False,
    explain: Annotated[
        bool,
        typer.Option(
            "--explain",
            help="For each device of the changed plan, why its units are there (sharding type, memory, or the "
            "predicted cost of moving them).",
        ),
    ] = False,
    backend: BackendOverride = None,
    params: ParamsOpt = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write the changed plan here.")] = None,
    inventory_out: Annotated[
        Path | None,
        typer.Option(
            "--inventory-out",
            help="Write the changed inventory here (needed with --out when tables are added or removed).",
        ),
    ] = None,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print the changes, the per-device totals before and after (predicted, measured) and the reasons "
            "as JSON.",
        ),
    ] = False,
) -> None:
    """What a change would do to a plan (remove or add tables, move or swap units): the per-device change,
    predicted by the learned cost (and measured with --measure)."""
    settings = resolve(params, {"profile.backend": backend})
    files = whatif_files.WhatIfFiles(
        inventory=inventory,
        plan=plan,
        model=model,
        add_tables=tuple(add_table or ()),
        changes_tables=bool(add_table or remove_table),
        out=out,
        inventory_out=inventory_out,
    )
    inv, before = whatif_files.read(files)
    request = explain_uc.WhatIfRequest(
        settings=settings,
        inventory=inv,
        plan=before,
        moves=list(move or []),
        swaps=list(swap or []),
        add_tables=list(add_table or []),
        remove_tables=list(remove_table or []),
        model=model,
        measure=measure,
        explain=explain,
    )
    with (
        Console(stderr=True).status(f"measuring on {settings.profile.backend}", spinner="dots")
        if measure and not as_json
        else nullcontext() as status
    ):
        result = explain_uc.run_whatif(request, progress=None if status is None else status.update)
    whatif_files.write(result, files)
    w = result.whatif
    if as_json:
        typer.echo(json.dumps(whatif_json(result)))
        return
    console.print("; ".join(w.changes) or "no change", markup=False)
    show(console, _changes_table(w.before, w.after, "predicted"))
    if result.measured_before is not None and result.measured_after is not None:
        measured_on = f"measured on {settings.profile.backend}"
        show(console, _changes_table(result.measured_before, result.measured_after, measured_on))
    if result.reasons is not None:
        print_reasons(result.reasons)
    for path in (inventory_out, out):
        if path is not None:
            console.print(f"wrote {path}")


def register(app: typer.Typer) -> None:
    app.command("whatif")(whatif)
