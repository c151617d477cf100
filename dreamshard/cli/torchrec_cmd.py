"""`dreamshard torchrec export|import`: a plan as TorchRec's plan file, and a TorchRec plan file as a plan."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from dreamshard.cli.options import BatchOpt, InventoryOpt, MemoryOpt, make_topology
from dreamshard.documents import check_outputs, load_inventory, load_plan, save_plan
from dreamshard.evaluation import device_table
from dreamshard.integrations.torchrec_file import (
    check_kernel,
    plan_from_document,
    read_torchrec_plan,
    save_torchrec_plan,
    torchrec_document,
)

torchrec_app = typer.Typer(
    help="Plans in TorchRec: export a plan as the file load_sharding_plan reads; import a TorchRec plan file.",
    no_args_is_help=True,
)


@torchrec_app.command("export")
def export_cmd(
    plan_file: Annotated[Path, typer.Argument(help="dreamshard plan JSON.")],
    inventory: InventoryOpt,
    out: Annotated[Path, typer.Option("--out", "-o", help="TorchRec plan file to write (JSON).")],
    kernel: Annotated[
        str, typer.Option("--kernel", help="Compute kernel: fused or dense (cuda also: fused_uvm, fused_uvm_caching).")
    ] = "fused",
) -> None:
    """Write the TorchRec plan file of a plan: dreamshard.integrations.torchrec.load_sharding_plan(FILE, model).

    The plan is checked against the inventory first (every table once, devices, memory: memory.check_plan)."""

    check_outputs({"PLAN": plan_file, "--inventory": inventory}, {"--out": out})
    plan = load_plan(plan_file)
    doc = torchrec_document(plan, load_inventory(inventory), check_kernel(kernel, plan.topology.device_type))
    save_torchrec_plan(doc, out)
    split = sum(1 for t in doc.tables.values() if t.sharding_type == "column_wise")
    typer.echo(f"wrote {out}: {len(doc.tables)} tables ({split} column-wise) on {doc.world_size} ranks")


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

    check_outputs({"TORCHREC_FILE": torchrec_file, "--inventory": inventory}, {"--out": out})
    doc = read_torchrec_plan(torchrec_file, devices)
    topo = make_topology(doc.world_size, memory_gb, batch_size, doc.device_type)
    inv = load_inventory(inventory)
    plan = plan_from_document(doc, inv, topo, sharder)
    save_plan(plan, out)
    Console().print(device_table(plan, inv))
    typer.echo(f"wrote {out}")


def register(app: typer.Typer) -> None:
    app.add_typer(torchrec_app, name="torchrec")
