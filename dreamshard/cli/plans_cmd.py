"""`dreamshard plans ...` (gate, publish, list, show, rollback) and `dreamshard remote ...` (DVC remotes)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table as RichTable

from dreamshard.errors import ConfigError

plans_app = typer.Typer(help="Gate, publish, list, show and roll back plans in a plan store.", no_args_is_help=True)
remote_app = typer.Typer(help="Configure the DVC remote (local directory or S3-compatible).", no_args_is_help=True)

DEFAULT_PARAMS = Path("params.yaml")

StoreOpt = Annotated[
    str | None,
    typer.Option("--store", help="Plan store: a directory or s3://bucket/prefix (default: params.yaml publish.store_uri)."),
]
EndpointOpt = Annotated[
    str | None,
    typer.Option("--endpoint", "--endpoint-url", help="S3 endpoint URL (default: $DREAMSHARD_S3_ENDPOINT / $AWS_ENDPOINT_URL)."),
]
ParamsOpt = Annotated[
    Path | None, typer.Option("--params", help="params.yaml to read the publish section from (default: ./params.yaml).")
]
InventoryNameOpt = Annotated[str, typer.Option("--inventory", help="Inventory name the plans belong to.")]


def _publish_config(params: Path | None):  # type: ignore[no-untyped-def]
    from dreamshard.config import load_section
    from dreamshard.gate import PublishConfig

    if params is None and DEFAULT_PARAMS.is_file():
        params = DEFAULT_PARAMS
    return load_section(params, "publish", PublishConfig)


def _open(store: str | None, endpoint: str | None, params: Path | None = None):  # type: ignore[no-untyped-def]
    from dreamshard.store import open_store

    uri = store or _publish_config(params).store_uri
    return open_store(uri, endpoint_url=endpoint)


def load_baselines(path: Path) -> dict[str, float]:
    from dreamshard.gate import parse_baselines
    from dreamshard.io import read_structured

    return parse_baselines(read_structured(path), str(path))


@plans_app.command("publish")
def publish_cmd(
    plan_file: Annotated[Path, typer.Argument(help="Plan JSON/YAML to gate and publish.")],
    store: StoreOpt = None,
    baselines: Annotated[
        Path | None,
        typer.Option("--baselines", help="Baseline costs: {sharder: overall_ms} or `compare --json` output."),
    ] = None,
    min_improvement: Annotated[
        float | None,
        typer.Option("--min-improvement", help="Fraction the plan must beat the best baseline by (default: params)."),
    ] = None,
    params: ParamsOpt = None,
    endpoint: EndpointOpt = None,
    inventory: Annotated[
        Path | None,
        typer.Option("--inventory", "-i", help="Re-check the plan against its inventory (tables, memory, fingerprint)."),
    ] = None,
) -> None:
    """Run the gate; publish the plan if approved (exit 0), else keep it as rejected (exit 1)."""
    from dreamshard.gate import evaluate_gate
    from dreamshard.io import load_inventory, load_plan
    from dreamshard.store import publish_or_reject

    cfg = _publish_config(params)
    plan = load_plan(plan_file)
    if inventory is not None:
        from dreamshard.errors import PlanError
        from dreamshard.memory import check_placement

        inv = load_inventory(inventory)
        if inv.fingerprint() != plan.inventory_fingerprint:
            raise PlanError(f"plan {plan.plan_id} was made for another version of inventory '{plan.inventory_name}'")
        check_placement(inv, plan.placement, plan.topology)  # memory recomputed, not taken from the plan
    if baselines is None:
        raise ConfigError("publishing needs baseline costs to gate against: pass --baselines comparison.json")
    base = load_baselines(baselines)
    margin = cfg.min_improvement if min_improvement is None else min_improvement
    decision = evaluate_gate(plan, base, margin)
    ref = publish_or_reject(_open(store, endpoint, params), plan, decision)
    if ref.status == "approved":
        typer.echo(f"published {ref.plan_id} -> {ref.key} (sha256 {ref.sha256[:16]}) in {ref.store}; now current")
        typer.echo(decision.reason)
        return
    Console(stderr=True, highlight=False, soft_wrap=True).print(
        f"rejected {ref.plan_id}: {decision.reason} (kept at {ref.key})", markup=False
    )
    raise typer.Exit(1)


@plans_app.command("list")
def list_cmd(
    store: StoreOpt = None,
    inventory: Annotated[str | None, typer.Option("--inventory", help="Only this inventory.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    params: ParamsOpt = None,
    endpoint: EndpointOpt = None,
) -> None:
    """List stored plans (approved and rejected), marking the current one of each inventory."""
    from dreamshard.store import list_plans

    records = list_plans(_open(store, endpoint, params), inventory)
    if as_json:
        typer.echo(json.dumps([r.model_dump(mode="json") for r in records], indent=2))
        return
    table = RichTable(title="plans" + (f" of {inventory}" if inventory else ""))
    for col in ("", "plan_id", "inventory", "sharder", "created", "overall ms", "basis", "status"):
        table.add_column(col, justify="right" if col == "overall ms" else "left", no_wrap=col != "inventory")
    for r in records:
        table.add_row(
            "*" if r.is_current else "",
            r.plan_id,
            r.inventory,
            r.sharder,
            r.created_at.strftime("%Y-%m-%d %H:%M:%S"),
            f"{r.overall_ms:.3f}" if r.overall_ms is not None else "-",
            r.basis or "-",
            r.status,
        )
    console = Console(highlight=False)
    if not console.is_terminal:
        console = Console(highlight=False, width=200)  # pipes and logs: never wrap ids
    console.print(table)
    if not records:
        typer.echo("no plans stored yet")


@plans_app.command("show")
def show_cmd(
    plan_id: Annotated[str, typer.Argument(help="Plan id, or 'current'.")] = "current",
    store: StoreOpt = None,
    inventory: Annotated[str | None, typer.Option("--inventory", help="Inventory name (needed for 'current').")] = None,
    torchrec: Annotated[bool, typer.Option("--torchrec", help="Print the TorchRec table-wise form.")] = False,
    params: ParamsOpt = None,
    endpoint: EndpointOpt = None,
) -> None:
    """Print a stored plan as JSON (checksum-verified)."""
    from dreamshard.store import get_current, show

    s = _open(store, endpoint, params)
    if plan_id == "current":
        if not inventory:
            raise ConfigError("`plans show current` needs --inventory NAME")
        plan = get_current(s, inventory)
    else:
        plan = show(s, plan_id, inventory)
    data = plan.to_torchrec() if torchrec else plan.model_dump(mode="json")
    typer.echo(json.dumps(data, indent=2))


@plans_app.command("rollback")
def rollback_cmd(
    inventory: InventoryNameOpt,
    store: StoreOpt = None,
    to: Annotated[str | None, typer.Option("--to", help="Approved plan id to make current (default: previous).")] = None,
    params: ParamsOpt = None,
    endpoint: EndpointOpt = None,
) -> None:
    """Move `current` back to the previous version (or to --to PLAN_ID). No version is deleted."""
    from dreamshard.store import rollback

    pointer = rollback(_open(store, endpoint, params), inventory, to)
    typer.echo(f"current of '{inventory}' is now {pointer.plan_id} ({pointer.key})")


@remote_app.command("s3")
def remote_s3_cmd(
    name: Annotated[str, typer.Option("--name", help="DVC remote name.")],
    url: Annotated[str, typer.Option("--url", help="s3://bucket/path")],
    endpoint: Annotated[str | None, typer.Option("--endpoint", help="S3 endpoint URL (SeaweedFS, MinIO, ...).")] = None,
    repo: Annotated[Path, typer.Option("--repo", help="DVC repository directory.")] = Path("."),
    default: Annotated[bool, typer.Option("--default/--no-default", help="Make it the default remote.")] = True,
) -> None:
    """Point DVC at an S3-compatible remote. Credentials stay in AWS_* env / boto3 chain, never in .dvc/config."""
    from dreamshard.dvc_remote import configure_s3_remote

    for cmd in configure_s3_remote(name, url, endpoint, repo, default):
        typer.echo("dvc " + " ".join(cmd))


@remote_app.command("local")
def remote_local_cmd(
    name: Annotated[str, typer.Option("--name", help="DVC remote name.")] = "local",
    path: Annotated[Path, typer.Option("--path", help="Directory holding the DVC cache copy.")] = Path(
        "../dreamshard-dvc-store"
    ),
    repo: Annotated[Path, typer.Option("--repo", help="DVC repository directory.")] = Path("."),
    default: Annotated[bool, typer.Option("--default/--no-default", help="Make it the default remote.")] = True,
) -> None:
    """Point DVC at a local directory remote (the default setup)."""
    from dreamshard.dvc_remote import configure_local_remote

    for cmd in configure_local_remote(name, path, repo, default):
        typer.echo("dvc " + " ".join(cmd))


def register(app: typer.Typer) -> None:
    """Add `plans` and `remote` to the main app."""
    app.add_typer(plans_app, name="plans")
    app.add_typer(remote_app, name="remote")
