"""`dreamshard inventory ...`: create, convert, validate and fingerprint embedding-table inventories."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dreamshard.cli.options import MAX_SEED
from dreamshard.errors import ConfigError
from dreamshard.types import MAX_BATCH, MAX_DIM, Inventory

#: Largest inventory `synth` / `from-trace` make (validating 100k tables takes seconds; 1M is the ceiling).
MAX_TABLES = 1_000_000

inventory_app = typer.Typer(
    help="Create, convert, validate and fingerprint embedding-table inventories.",
    no_args_is_help=True,
)

OutputOpt = Annotated[Path, typer.Option("--output", "-o", help="Inventory file to write (.yaml/.yml or .json).")]


def parse_dims(text: str) -> tuple[int, ...]:
    """'16,32,64' -> (16, 32, 64); ConfigError naming the bad item otherwise."""
    from dreamshard.inventory.synth import check_dims

    items = [s.strip() for s in text.split(",") if s.strip()]
    dims: list[int] = []
    for s in items:
        try:
            dims.append(int(s))
        except ValueError:
            raise ConfigError(f"--dims: '{s}' is not an integer (expected e.g. 16,32,64,128)") from None
    return check_dims(dims)


def _summary(inv: Inventory) -> str:
    total_gb = sum(t.size_gb for t in inv.tables)
    return f"{inv.num_tables} tables, {total_gb:.3f} GB, fingerprint {inv.fingerprint()}"


def _write(inv: Inventory, output: Path) -> None:
    from dreamshard.io import save_inventory

    save_inventory(inv, output)
    typer.echo(f"wrote {output}: {_summary(inv)}")


@inventory_app.command("synth")
def synth_cmd(
    num_tables: Annotated[int, typer.Option("--num-tables", "-n", min=1, max=MAX_TABLES, help="Number of tables.")],
    output: OutputOpt,
    seed: Annotated[int, typer.Option("--seed", "-s", min=0, max=MAX_SEED, help="Random seed (same seed, same inventory).")] = 0,
    dims: Annotated[str, typer.Option("--dims", help="Comma-separated embedding dims (multiples of 4).")] = (
        "16,32,64,128"
    ),
    name: Annotated[str | None, typer.Option("--name", help="Inventory name.")] = None,
) -> None:
    """Generate a synthetic DLRM-like inventory (rows, pooling, Zipf reuse histograms)."""
    from dreamshard.inventory.synth import synth_inventory
    from dreamshard.inventory.validation import check_inventory_names, check_name

    if name is not None:
        check_name(name, "--name")
    inv = check_inventory_names(synth_inventory(num_tables, seed, dims=parse_dims(dims), name=name))
    _write(inv, output)


@inventory_app.command("from-trace")
def from_trace_cmd(
    trace: Annotated[Path, typer.Argument(help="DLRM trace: torch file with (indices, offsets, lengths).")],
    output: OutputOpt,
    name: Annotated[str | None, typer.Option("--name", help="Inventory name (default: file stem).")] = None,
    max_tables: Annotated[int | None, typer.Option("--max-tables", min=1, max=MAX_TABLES, help="Keep the first K tables.")] = None,
    batch_size: Annotated[
        int | None, typer.Option("--batch-size", min=1, max=MAX_BATCH, help="Samples per batch for reuse histograms (default: all).")
    ] = None,
    dim: Annotated[int, typer.Option("--dim", min=1, max=MAX_DIM, help="Embedding dim given to every table.")] = 64,
) -> None:
    """Build an inventory from an open DLRM embedding trace (facebookresearch/dlrm_datasets)."""
    from dreamshard.inventory.trace import inventory_from_trace
    from dreamshard.io import check_outputs

    check_outputs({"TRACE": trace}, {"--output": output})
    inv = inventory_from_trace(trace, name=name, batch_size=batch_size, max_tables=max_tables, dim=dim)
    _write(inv, output)


@inventory_app.command("validate")
def validate_cmd(
    inventory: Annotated[Path, typer.Argument(help="Inventory file (JSON or YAML).")],
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Also write the validated, normalised inventory here.")
    ] = None,
) -> None:
    """Check an inventory file (fields, types, bounds, safe names); print its name, table count, total size and
    fingerprint."""
    from dreamshard.io import check_outputs, load_inventory, save_inventory

    check_outputs({"INVENTORY": inventory}, {"--output": output})
    inv = load_inventory(inventory)
    total_gb = sum(t.size_gb for t in inv.tables)
    typer.echo(f"name: {inv.name}")
    typer.echo(f"tables: {inv.num_tables}")
    typer.echo(f"total_gb: {total_gb:.4f}")
    typer.echo(f"fingerprint: {inv.fingerprint()}")
    if output is not None:
        save_inventory(inv, output)


@inventory_app.command("fingerprint")
def fingerprint_cmd(inventory: Annotated[Path, typer.Argument(help="Inventory file (JSON or YAML).")]) -> None:
    """Print the inventory's sha256 fingerprint (independent of key and table order)."""
    from dreamshard.io import load_inventory

    typer.echo(load_inventory(inventory).fingerprint())


def register(app: typer.Typer) -> None:
    """Add the `inventory` command group to the main app."""
    from dreamshard.cli.preset_cmd import register as register_presets

    register_presets(inventory_app)
    app.add_typer(inventory_app, name="inventory")
