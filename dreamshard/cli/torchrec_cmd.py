"""`dreamshard torchrec export|import|migrate`: a plan as TorchRec's plan file, a TorchRec plan file as a plan, and a
training checkpoint moved to a new plan."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from dreamshard.cli.console import show
from dreamshard.cli.options import BatchOpt, InventoryOpt, MemoryOpt
from dreamshard.documents import check_outputs, load_inventory, load_plan, read_checked_inventory, save_plan
from dreamshard.errors import CheckpointError, format_gb
from dreamshard.evaluation.render import device_table
from dreamshard.integrations.torchrec_file import save_torchrec_plan
from dreamshard.lazy import lazy_module
from dreamshard.usecases import torchrec as torchrec_uc

torchrec_app = typer.Typer(
    help="Plans in TorchRec: export a plan as the file load_sharding_plan reads; import a TorchRec plan file; "
    "move a training checkpoint to a new plan.",
    no_args_is_help=True,
)


@torchrec_app.command("export")
def export_cmd(
    plan_file: Annotated[Path, typer.Argument(help="dreamshard plan JSON.")],
    inventory: InventoryOpt,
    out: Annotated[Path, typer.Option("--out", "-o", help="TorchRec plan file to write (JSON).")],
    kernel: Annotated[
        str | None,
        typer.Option(
            "--kernel",
            help="Compute kernel of the tables the plan gives the default (fused): fused or dense (cuda also: "
            "fused_uvm, fused_uvm_caching). Default: the plan's kernels.",
        ),
    ] = None,
) -> None:
    """Write the TorchRec plan file of a plan: dreamshard.integrations.torchrec.load_sharding_plan(FILE, model).

    The plan is checked against the inventory first (every table once, devices, memory)."""
    check_outputs({"PLAN": plan_file, "--inventory": inventory}, {"--out": out})
    request = torchrec_uc.ExportRequest(plan=load_plan(plan_file), inventory=load_inventory(inventory), kernel=kernel)
    result = torchrec_uc.export(request)
    save_torchrec_plan(result.document, out)
    typer.echo(f"wrote {out}: {result.tables} tables ({result.column_wise} column-wise) on {result.world_size} ranks")


@torchrec_app.command("import")
def import_cmd(
    torchrec_file: Annotated[
        Path, typer.Argument(help="TorchRec plan file (from --torchrec-out, or a bare {table: {...}} map).")
    ],
    inventory: InventoryOpt,
    memory_gb: MemoryOpt,
    out: Annotated[Path, typer.Option("--out", "-o", help="dreamshard plan JSON to write.")],
    devices: Annotated[
        int | None, typer.Option("--devices", "-d", min=1, help="Ranks (needed for a bare map; else the file's).")
    ] = None,
    batch_size: BatchOpt = 2048,
    sharder: Annotated[
        str | None, typer.Option("--sharder", help="Label of the plan (default: the file's, else torchrec).")
    ] = None,
) -> None:
    """Turn a TorchRec plan file into a dreamshard plan (memory checked) to evaluate or compare it."""
    result = torchrec_uc.import_plan(
        torchrec_uc.ImportRequest(
            source=torchrec_file,
            inventory=read_checked_inventory({"TORCHREC_FILE": torchrec_file}, inventory, {"--out": out}),
            memory_gb=memory_gb,
            devices=devices,
            batch_size=batch_size,
            sharder=sharder,
        )
    )
    save_plan(result.plan, out)
    show(Console(), device_table(result.plan, result.inventory))
    typer.echo(f"wrote {out}")


def _renames(pairs: list[str]) -> dict[str, str]:
    """{old: new} of the --rename OLD=NEW options; one line naming a malformed one or a table renamed twice."""
    out: dict[str, str] = {}
    for pair in pairs:
        old, sep, new = pair.partition("=")
        if not sep or not old.strip() or not new.strip():
            raise CheckpointError(
                f"--rename {pair}: expected OLD=NEW (the table's name in the checkpoint = in the model)"
            )
        if old.strip() in out:
            raise CheckpointError(f"--rename {old.strip()} is given twice")
        out[old.strip()] = new.strip()
    return out


def _names(items: tuple[str, ...], limit: int = 8) -> str:
    if not items:
        return "none"
    shown = ", ".join(items[:limit])
    return shown + (f" (+{len(items) - limit} more)" if len(items) > limit else "")


@torchrec_app.command("migrate")
def migrate_cmd(
    checkpoint: Annotated[Path, typer.Argument(help="The checkpoint saved under the old plan (a DCP directory).")],
    plan: Annotated[Path, typer.Option("--plan", "-p", help="The new plan: a TorchRec plan file (torchrec export).")],
    inventory: InventoryOpt,
    out: Annotated[Path, typer.Option("--out", "-o", help="Directory of the new checkpoint (must not exist).")],
    model: Annotated[
        str | None,
        typer.Option("--model", help="The job's model, pkg.mod:build or file.py:build (default: the inventory's)."),
    ] = None,
    rename: Annotated[
        list[str] | None,
        typer.Option(
            "--rename",
            help="OLD=NEW: a table renamed since the checkpoint (repeatable). Tables are never matched by guess: "
            "one the checkpoint lacks is initialised, one the model lacks dropped.",
        ),
    ] = None,
    init: Annotated[
        list[str] | None,
        typer.Option(
            "--init",
            help="A table, or a dense module (mlp.0), that starts as the model initialises it though the checkpoint "
            "has it: a layer whose shape changed (repeatable). Never cut to fit.",
        ),
    ] = None,
    allow_pickle: Annotated[
        bool,
        typer.Option(
            "--allow-pickle",
            help="Read the checkpoint's pickles as DCP does (any class: trusted checkpoints only). Default: its "
            ".metadata is read with an unpickler that builds DCP's metadata classes only.",
        ),
    ] = False,
    timeout_s: Annotated[
        float, typer.Option("--timeout", min=1.0, max=86400.0, help="Seconds the ranks may run.")
    ] = 600.0,
) -> None:
    """Rewrite a checkpoint ({"model": ..., "optim": ...} saved with torch.distributed.checkpoint) for a new plan
    and model version (tables added, removed or renamed; an MLP and its optimizer state carried).

    Runs the new plan's ranks on this machine's CPUs (gloo); the job then loads the new checkpoint with dcp.load,
    or loads the old one itself with dreamshard.integrations.torchrec_migrate.load_checkpoint."""
    migrate_uc = lazy_module("dreamshard.usecases.torchrec_migrate")
    request = migrate_uc.MigrateRequest(
        source=checkpoint,
        plan=plan,
        inventory=inventory,
        out=out,
        model=model,
        renames=_renames(rename or []),
        init=tuple(init or ()),
        allow_pickle=allow_pickle,
        timeout_s=timeout_s,
    )
    with Console(stderr=True).status(f"migrating {checkpoint} (the new plan's ranks on this machine's CPUs)"):
        r = migrate_uc.migrate(request)
    renamed = tuple(f"{a} -> {b}" for a, b in r.renamed)
    typer.echo(
        f"wrote {r.out}: {r.tables} tables on {r.world_size} ranks (tables {r.optimizer}, dense {r.dense_optimizer})"
    )
    typer.echo(
        f"tables carried: {_names(r.carried)}; initialised (new in the model): {_names(r.initialised)}; "
        f"dropped (not in the model): {_names(r.dropped)}; renamed: {_names(renamed)}"
    )
    typer.echo(
        f"dense entries carried: {_names(r.dense_carried)}; initialised: {_names(r.dense_initialised)}; "
        f"dropped: {_names(r.dense_dropped)}"
    )
    typer.echo(
        f"column cuts changed: {', '.join(r.relaid) or 'none'}; "
        f"optimizer state translated: {', '.join(r.translated) or 'none'}; "
        f"{format_gb(r.bytes_written / 2**30)} in {r.total_s:.1f} s (load {r.load_s:.2f} s)"
    )


def register(app: typer.Typer) -> None:
    app.add_typer(torchrec_app, name="torchrec")
