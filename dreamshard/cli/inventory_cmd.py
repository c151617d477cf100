"""`dreamshard inventory ...`: create, convert, validate and fingerprint embedding-table inventories."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from dreamshard.cli.options import MAX_SEED, ParamsOpt
from dreamshard.config.settings import resolve
from dreamshard.config.stages import MAX_SYNTH_TABLES
from dreamshard.errors import ConfigError
from dreamshard.lazy import lazy_module
from dreamshard.values import MAX_BATCH, MAX_DEVICE_GB, MAX_DIM, Inventory
from dreamshard.values.names import check_name

# the use cases import torch: each loads when a command uses it (dreamshard/lazy.py)
if TYPE_CHECKING:  # pragma: no cover
    from dreamshard.usecases import inventory as inventory_uc
else:
    inventory_uc = lazy_module("dreamshard.usecases.inventory")

#: Largest inventory `from-trace` keeps (validating 100k tables takes seconds; 1M is the ceiling). `synth` draws at
#: most config.stages.MAX_SYNTH_TABLES (each table's histogram is simulated).
MAX_TABLES = 1_000_000

inventory_app = typer.Typer(
    help="Create, convert, validate and fingerprint embedding-table inventories.",
    no_args_is_help=True,
)

OutputOpt = Annotated[Path, typer.Option("--output", "-o", help="Inventory file to write (.yaml/.yml or .json).")]


def parse_dims(text: str) -> tuple[int, ...]:
    """'16,32,64' -> (16, 32, 64); ConfigError naming the item that is not an integer (the settings check the
    dims themselves: inventory.dims)."""
    items = [s.strip() for s in text.split(",") if s.strip()]
    dims: list[int] = []
    for s in items:
        try:
            dims.append(int(s))
        except ValueError:
            raise ConfigError(f"--dims: '{s}' is not an integer (expected e.g. 16,32,64,128)") from None
    return tuple(dims)


def _summary(inv: Inventory) -> str:
    total_gb = sum(t.size_gb for t in inv.tables)
    return f"{inv.num_tables} tables, {total_gb:.3f} GB, fingerprint {inv.fingerprint()}"


def said_written(inv: Inventory, output: Path) -> None:
    """Say what was written (synth, from-trace, preset)."""
    typer.echo(f"wrote {output}: {_summary(inv)}")


@inventory_app.command("synth")
def synth_cmd(
    output: OutputOpt,
    num_tables: Annotated[
        int | None,
        typer.Option(
            "--num-tables",
            "-n",
            min=1,
            max=MAX_SYNTH_TABLES,
            help=f"Number of tables, at most {MAX_SYNTH_TABLES:,} (inventory.num_tables; default 120).",
        ),
    ] = None,
    seed: Annotated[
        int | None,
        typer.Option(
            "--seed",
            "-s",
            min=0,
            max=MAX_SEED,
            help="Random seed, same seed same inventory (inventory.seed; default 0).",
        ),
    ] = None,
    dims: Annotated[
        str | None,
        typer.Option(
            "--dims", help="Comma-separated embedding dims, multiples of 4 (inventory.dims; default 16,32,64,128)."
        ),
    ] = None,
    name: Annotated[str | None, typer.Option("--name", help="Inventory name (inventory.name; default pool).")] = None,
    params: ParamsOpt = None,
) -> None:
    """Generate a synthetic DLRM-like inventory (rows, pooling, Zipf reuse histograms); with --params, the
    pipeline's pool (its `inventory` section)."""
    if num_tables is None and params is None:
        raise ConfigError("--num-tables is required (or --params: the pipeline's pool, its `inventory` section)")
    if name is not None:
        check_name(name, "--name")
    settings = resolve(
        params,
        {
            "inventory.num_tables": num_tables,
            "inventory.seed": seed,
            "inventory.dims": parse_dims(dims) if dims is not None else None,
            "inventory.name": name,
        },
    )
    said_written(inventory_uc.run(inventory_uc.InventoryRequest(settings=settings, out=output)).inventory, output)


@inventory_app.command("from-trace")
def from_trace_cmd(
    trace: Annotated[Path, typer.Argument(help="DLRM trace: torch file with (indices, offsets, lengths).")],
    output: OutputOpt,
    name: Annotated[str | None, typer.Option("--name", help="Inventory name (default: file stem).")] = None,
    max_tables: Annotated[
        int | None, typer.Option("--max-tables", min=1, max=MAX_TABLES, help="Keep the first K tables.")
    ] = None,
    batch_size: Annotated[
        int | None,
        typer.Option(
            "--batch-size", min=1, max=MAX_BATCH, help="Samples per batch for reuse histograms (default: all)."
        ),
    ] = None,
    dim: Annotated[int, typer.Option("--dim", min=1, max=MAX_DIM, help="Embedding dim given to every table.")] = 64,
) -> None:
    """Build an inventory from an open DLRM embedding trace (facebookresearch/dlrm_datasets)."""
    request = inventory_uc.FromTraceRequest(
        trace=trace, out=output, name=name, max_tables=max_tables, batch_size=batch_size, dim=dim
    )
    said_written(inventory_uc.from_trace(request).inventory, output)


@inventory_app.command("from-torchrec")
def from_torchrec_cmd(
    model: Annotated[
        str,
        typer.Option(
            "--model", help="pkg.mod:build or path/to/file.py:build, a callable returning the TorchRec model."
        ),
    ],
    output: OutputOpt,
    batches: Annotated[
        Path | None,
        typer.Option(
            "--batches",
            help="torch.save'd list of batches: dicts {keys, values, lengths[, weights]} or KeyedJaggedTensors "
            "(--allow-pickle). Without it, every table's pooling comes from --constraints (pooling_factors).",
        ),
    ] = None,
    batch_size: Annotated[
        int | None, typer.Option("--batch-size", min=1, max=MAX_BATCH, help="Samples per batch in the file.")
    ] = None,
    planned_batch_size: Annotated[
        int,
        typer.Option(
            "--planned-batch-size",
            min=1,
            max=MAX_BATCH,
            help="Batch the reuse histograms are rescaled to (the job's global batch when --world-size is given).",
        ),
    ] = 2048,
    name: Annotated[str | None, typer.Option("--name", help="Inventory name (default: torchrec).")] = None,
    allow_pickle: Annotated[
        bool,
        typer.Option(
            "--allow-pickle",
            help="Read pickled KeyedJaggedTensors (torch.load weights_only=False; trusted files only).",
        ),
    ] = False,
    constraints: Annotated[
        Path | None,
        typer.Option(
            "--constraints",
            help="Per-table constraints: a .py file defining constraints = {table: ParameterConstraints(...)} "
            "(imported: trusted files only), or a YAML/JSON mapping of the same fields.",
        ),
    ] = None,
    world_size: Annotated[
        int | None,
        typer.Option("--world-size", min=1, help="The training job's ranks (recorded as its job)."),
    ] = None,
    devices_per_host: Annotated[
        int | None,
        typer.Option("--devices-per-host", min=1, help="The job's ranks per host (needs --world-size)."),
    ] = None,
    memory_gb: Annotated[
        float | None,
        typer.Option("--memory-gb", min=0.0, max=MAX_DEVICE_GB, help="The job's memory per device in GB."),
    ] = None,
    optimizer: Annotated[
        str | None, typer.Option("--optimizer", help="The job's fused optimizer: sgd, rowwise_adagrad or adam.")
    ] = None,
    device_type: Annotated[str | None, typer.Option("--device-type", help="The job's devices: cpu or cuda.")] = None,
    torchrec_topology: Annotated[
        str | None,
        typer.Option(
            "--torchrec-topology",
            help="pkg.mod:name or path/to/file.py:name: TorchRec's Topology of the job (or a callable returning it): "
            "its world size, ranks per host, device and bandwidths, recorded as the job and its world.",
        ),
    ] = None,
    world: Annotated[
        str | None,
        typer.Option(
            "--world", help="The job's world, recorded with it: fast, nvlink-ib, host or measured (needs the job)."
        ),
    ] = None,
) -> None:
    """Build an inventory from a TorchRec model (its EmbeddingBagCollections and EmbeddingCollections: tables,
    dims, dtypes, features), its KeyedJaggedTensor batches (lookups per feature, reuse histograms at the planned
    batch), the team's constraints and the training job's topology."""
    if name is not None:
        check_name(name, "--name")
    result = inventory_uc.from_torchrec(
        inventory_uc.FromTorchrecRequest(
            model=model,
            batches=batches,
            batch_size=batch_size,
            planned_batch_size=planned_batch_size,
            name=name,
            out=output,
            allow_pickle=allow_pickle,
            constraints=constraints,
            world_size=world_size,
            devices_per_host=devices_per_host,
            memory_gb=memory_gb,
            optimizer=optimizer,
            device_type=device_type,
            torchrec_topology=torchrec_topology,
            world=world,
        )
    )
    for line in result.warnings:
        typer.echo(f"warning: {line}", err=True)
    inv = result.inventory
    sequence = sum(1 for t in inv.tables if not t.pooled)
    kinds = f" ({sequence} sequence)" if sequence else ""
    job = f", job {inv.job.world_size} ranks" if inv.job is not None else ""
    job += f" in world {inv.job.world.name}" if inv.job is not None and inv.job.world is not None else ""
    typer.echo(f"wrote {output}: {_summary(inv)}{kinds}, schema {inv.schema_fingerprint()[:12]}{job}")


@inventory_app.command("validate")
def validate_cmd(
    inventory: Annotated[Path, typer.Argument(help="Inventory file (JSON or YAML).")],
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Also write the validated, normalised inventory here.")
    ] = None,
) -> None:
    """Check an inventory file (fields, types, bounds, safe names); print its name, table count, total size and
    fingerprint. The pipeline's `inventory` stage is `inventory validate INPUT -o data/inventory.yaml`."""
    result = inventory_uc.run(inventory_uc.InventoryRequest(source=inventory, out=output))
    inv = result.inventory
    typer.echo(f"name: {inv.name}")
    typer.echo(f"tables: {inv.num_tables}")
    typer.echo(f"total_gb: {result.total_gb:.4f}")
    typer.echo(f"fingerprint: {inv.fingerprint()}")


@inventory_app.command("fingerprint")
def fingerprint_cmd(inventory: Annotated[Path, typer.Argument(help="Inventory file (JSON or YAML).")]) -> None:
    """Print the inventory's sha256 fingerprint (independent of key and table order)."""
    typer.echo(inventory_uc.run(inventory_uc.InventoryRequest(source=inventory)).inventory.fingerprint())


@inventory_app.command("push")
def push_cmd(
    inventory: Annotated[Path, typer.Argument(help="Inventory file (YAML or JSON).")],
    store: Annotated[
        str | None,
        typer.Option(
            "--store", help="Plan store: directory or s3://bucket/prefix (default: params.yaml publish.store_uri)."
        ),
    ] = None,
    endpoint_url: Annotated[
        str | None, typer.Option("--endpoint-url", help="S3 endpoint of the plan store (SeaweedFS/MinIO).")
    ] = None,
    no_event: Annotated[
        bool, typer.Option("--no-event", help="Store only; do not emit the inventory-changed event.")
    ] = False,
    params: Annotated[
        Path | None,
        typer.Option("--params", help="params.yaml to read publish.store_uri from (default: ./params.yaml)."),
    ] = None,
) -> None:
    """Store a new inventory version (inventories/<name>/<fingerprint>.yaml + current) and emit
    `dreamshard.inventory.changed` (through the installed notifiers: with PREFECT_API_URL set, the Prefect flows'
    starts the replan-on-inventory-change deployment, the fast path that re-plans with the production model; a
    retrain is started by the replan when one is due)."""
    request = inventory_uc.PushRequest(
        settings=resolve(params, None, lookup="local"),
        source=inventory,
        store=store,
        endpoint_url=endpoint_url,
        notify=not no_event,
    )
    result = inventory_uc.push(request)
    ref = result.ref
    typer.echo(f"{'stored' if ref.changed else 'unchanged'} {ref.name} {ref.fingerprint[:12]} at {ref.uri}")
    for line in result.notes:
        typer.echo(line)


def register(app: typer.Typer) -> None:
    """Add the `inventory` command group to the main app."""
    app.add_typer(inventory_app, name="inventory")
