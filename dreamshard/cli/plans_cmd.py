"""`dreamshard plans ...` (gate, publish, list, show, incumbent, rollback, fsck) and `dreamshard remote ...` (DVC remotes)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table as RichTable

from dreamshard.cli.explain_cmd import print_stats
from dreamshard.cli.options import ModelOpt
from dreamshard.cli.plan_cmd import expand_sharders
from dreamshard.config.settings import Settings, resolve
from dreamshard.documents import check_outputs
from dreamshard.errors import ConfigError
from dreamshard.lazy import lazy_module
from dreamshard.pipeline.dvc import configure_local_remote, configure_s3_remote
from dreamshard.pipeline.incumbent import NoIncumbent, no_incumbent, read_incumbent, save_incumbent
from dreamshard.store import fsck, list_plans, rollback
from dreamshard.store.base import PlanStore
from dreamshard.store.inventories import get_inventory_version
from dreamshard.usecases.stored import current_or_none, open_plan_store, stored_plan
from dreamshard.values import Plan

# the use cases import torch: each loads when a command uses it (dreamshard/lazy.py)
if TYPE_CHECKING:  # pragma: no cover
    from dreamshard.usecases import explain as explain_uc
    from dreamshard.usecases import publish as publish_uc
    from dreamshard.usecases import reproduce as reproduce_uc
else:
    explain_uc = lazy_module("dreamshard.usecases.explain")
    publish_uc = lazy_module("dreamshard.usecases.publish")
    reproduce_uc = lazy_module("dreamshard.usecases.reproduce")

plans_app = typer.Typer(help="Gate, publish, list, show, roll back and check plans in a plan store.", no_args_is_help=True)
remote_app = typer.Typer(help="Configure the DVC remote (local directory or S3-compatible).", no_args_is_help=True)

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


def _settings(params: Path | None, overrides: dict[str, object] | None = None) -> Settings:
    """The plans commands read ./params.yaml when --params is not given (publish.store_uri, the gate's margin)."""
    return resolve(params, overrides, lookup="local")


def _open(store: str | None, endpoint: str | None, params: Path | None = None, existing: bool = True) -> PlanStore:
    return open_plan_store(_settings(params), store, endpoint, existing=existing)


@plans_app.command("publish")
def publish_cmd(
    plan_file: Annotated[Path, typer.Argument(help="Plan JSON/YAML to gate and publish.")],
    store: StoreOpt = None,
    comparison: Annotated[
        Path | None,
        typer.Option(
            "--comparison", "--baselines",
            help="Comparison holding this plan and the baselines, measured interleaved "
            "(`dreamshard compare --plan PLAN --out FILE`, or the pipeline's data/comparison.json).",
        ),
    ] = None,
    measure: Annotated[
        bool, typer.Option("--measure", help="The gate measures the plan and the baselines itself (trusts no file).")
    ] = False,
    min_improvement: Annotated[
        float | None,
        typer.Option("--min-improvement", min=0.0, max=0.999999,
                     help="Fraction the plan must beat the best baseline by (default: params)."),
    ] = None,
    params: ParamsOpt = None,
    endpoint: EndpointOpt = None,
    inventory: Annotated[
        Path | None,
        typer.Option("--inventory", "-i",
                     help="The plan's inventory (default: the version pushed to the store with this fingerprint)."),
    ] = None,
    backend: Annotated[
        str | None, typer.Option("--backend", help="--measure: cpu, cuda or simulator (default: params profile.backend); "
                                 "--comparison: the backend it must have been measured on.")
    ] = None,
    sharders: Annotated[
        str | None, typer.Option("--sharders", help="Baselines to add to params publish.baselines (a comma list, "
                                 "'heuristics' or 'all'); the required ones are never removed.")
    ] = None,
    rounds: Annotated[int | None, typer.Option("--rounds", min=1, max=100, help="--measure: interleaved rounds "
                      "(default: params evaluate.rounds; at least publish.min_rounds).")] = None,
    allow_simulated: Annotated[
        bool, typer.Option("--allow-simulated", help="Let a plan whose costs come from the simulator become current "
                           "(params publish.allow_simulated).")
    ] = False,
    model: Annotated[
        Path | None, typer.Option("--model", help="The model that made the plan: its out-of-range check is added to "
                                  "the plan's (never cleared).")
    ] = None,
    seed: Annotated[int | None, typer.Option("--seed", min=0, max=2**32 - 1,
                    help="Seed of the `random` baseline (params profile.seed).")] = None,
) -> None:
    """Verify a plan against its inventory and a comparison, run the gate; publish if approved (exit 0), else keep
    it as rejected or inconclusive (exit 1: the current plan stays; when no current plan can serve this version, a
    rejected plan's best measured baseline becomes current: the fallback). A plan or comparison that does not check
    out is an error (exit 2), nothing stored. A plan id already decided for this inventory version keeps its
    decision."""
    settings = _settings(params, {"publish.min_improvement": min_improvement, "evaluate.rounds": rounds,
                                  "profile.backend": backend if measure else None, "profile.seed": seed,
                                  "publish.allow_simulated": True if allow_simulated else None})
    result = publish_uc.run(publish_uc.PublishRequest(
        settings=settings, plan=plan_file, comparison=comparison, measure=measure,
        baselines=tuple(expand_sharders(sharders)) if sharders else (), inventory=inventory, model=model,
        backend=None if measure else backend, store=store, endpoint_url=endpoint))
    ref, decision = result.ref, result.decision
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    if ref.already_decided:
        line = (f"already decided: {decision.outcome} {ref.plan_id} for this inventory version ({decision.reason}); "
                f"kept at {ref.key}, nothing re-measured" + ("" if ref.is_current else "; it is not current now"))
        if decision.approved:
            typer.echo(line)
            return
        err.print(line, markup=False)
        raise typer.Exit(1)
    if ref.status == "approved":
        typer.echo(f"published {ref.plan_id} -> {ref.key} (sha256 {ref.sha256[:16]}) in {ref.store}; now current")
        typer.echo(decision.reason)
        return
    if decision.outcome == "inconclusive":
        err.print(f"inconclusive {ref.plan_id}: {decision.reason}; the current plan stays (kept at {ref.key})",
                  markup=False)
        raise typer.Exit(1)
    err.print(f"rejected {ref.plan_id}: {decision.reason} (kept at {ref.key})", markup=False)
    if result.fallback_ref is not None:
        f = result.fallback_ref
        typer.echo(f"fallback: published {f.plan_id} -> {f.key} (sha256 {f.sha256[:16]}) in {f.store}; now current")
        typer.echo(f.reason)
    raise typer.Exit(1)


@plans_app.command("list")
def list_cmd(
    store: StoreOpt = None,
    inventory: Annotated[str | None, typer.Option("--inventory", help="Only this inventory.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    params: ParamsOpt = None,
    endpoint: EndpointOpt = None,
) -> None:
    """List stored plans (approved and rejected), checksum-verified, marking the current one of each inventory.
    A plan that fails verification is listed as CORRUPT with the reason (exit 1); the others still list."""
    records = list_plans(_open(store, endpoint, params), inventory)
    broken = [r for r in records if r.problem]
    if as_json:
        typer.echo(json.dumps([r.model_dump(mode="json") for r in records], indent=2))
        if broken:
            raise typer.Exit(1)
        return
    table = RichTable(title="plans" + (f" of {inventory}" if inventory else ""))
    for col in ("", "plan_id", "inventory", "sharder", "stored", "overall ms", "basis", "status"):
        table.add_column(col, justify="right" if col == "overall ms" else "left", no_wrap=col != "inventory")
    for r in records:
        table.add_row(
            "*" if r.is_current else "",
            r.plan_id,
            r.inventory,
            r.sharder,
            r.stored_at.strftime("%Y-%m-%d %H:%M:%S") if r.stored_at else "-",
            f"{r.overall_ms:.3f}" if r.overall_ms is not None else "-",
            r.basis or "-",
            "CORRUPT" if r.problem else (r.outcome if r.outcome in ("inconclusive", "fallback") else r.status),
        )
    console = Console(highlight=False)
    if not console.is_terminal:
        console = Console(highlight=False, width=200)  # pipes and logs: never wrap ids
    console.print(table)
    if not records:
        typer.echo("no plans stored yet")
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    for r in broken:
        err.print(f"CORRUPT {r.key}: {r.problem}", markup=False)
    if broken:
        raise typer.Exit(1)


@plans_app.command("fsck")
def fsck_cmd(
    store: StoreOpt = None,
    inventory: Annotated[str | None, typer.Option("--inventory", help="Only this inventory's plans.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of lines.")] = False,
    params: ParamsOpt = None,
    endpoint: EndpointOpt = None,
) -> None:
    """Check the whole store, changing nothing: pointers, checksums, records, orphans of interrupted publishes,
    stored inventory versions. Prints one line per problem with its fix; exit 0 when clean, 1 otherwise."""
    s = _open(store, endpoint, params)
    issues = fsck(s, inventory)
    if as_json:
        typer.echo(json.dumps([i.model_dump(mode="json") for i in issues], indent=2))
    else:
        for i in issues:
            typer.echo(f"{i.key}: {i.problem} (fix: {i.fix})")
        typer.echo(f"{len(issues)} problem(s) in {s.location}" if issues else f"{s.location}: clean")
    if issues:
        raise typer.Exit(1)


def _stored_plan(command: str, plan_id: str, store: str | None, inventory: str | None, endpoint: str | None,
                 params: Path | None) -> Plan:
    return stored_plan(_open(store, endpoint, params), plan_id, inventory, command)


@plans_app.command("show")
def show_cmd(
    plan_id: Annotated[str, typer.Argument(help="Plan id, or 'current'.")] = "current",
    store: StoreOpt = None,
    inventory: Annotated[str | None, typer.Option("--inventory", help="Inventory name (needed for 'current').")] = None,
    torchrec: Annotated[bool, typer.Option("--torchrec", help="Print the TorchRec table-wise form.")] = False,
    lineage: Annotated[bool, typer.Option("--lineage", help="Print only the plan's lineage (data, model, params, code).")] = False,
    stats: Annotated[bool, typer.Option("--stats", help="Print the stats report instead (the inventory version stored under the plan's fingerprint; predicted by --model's learned cost, measured beside).")] = False,
    model: ModelOpt = None,
    params: ParamsOpt = None,
    endpoint: EndpointOpt = None,
) -> None:
    """Print a stored plan as JSON (checksum-verified; a pipeline plan's JSON includes its lineage)."""
    plan = _stored_plan("show", plan_id, store, inventory, endpoint, params)
    if stats:
        inv = get_inventory_version(_open(store, endpoint, params), plan.inventory_name, plan.inventory_fingerprint)
        if inv is None:
            raise ConfigError(f"the store holds no inventory version {plan.inventory_fingerprint[:12]} of "
                              f"'{plan.inventory_name}' (push it: dreamshard inventory push)")
        print_stats(explain_uc.stats_of(inv, plan, model))
        return
    if lineage:
        if plan.lineage is None:
            raise ConfigError(f"plan {plan.plan_id} has no lineage (it was not published by the pipeline)")
        for field, value in plan.lineage.summary():
            typer.echo(f"{field:22s} {value}")
        return
    data = plan.to_torchrec() if torchrec else plan.model_dump(mode="json")
    typer.echo(json.dumps(data, indent=2))


@plans_app.command("incumbent")
def incumbent_cmd(
    out: Annotated[Path, typer.Option("--out", "-o", help="Incumbent file to write (JSON).")],
    inventory: Annotated[str | None, typer.Option("--inventory", help="Write the store's current plan of this inventory (or a note that none is).")] = None,
    source: Annotated[Path | None, typer.Option("--from", help="Check this incumbent file instead (a plan, or a note that none was current) and write its canonical form: the DVC `incumbent` stage.")] = None,
    store: StoreOpt = None,
    endpoint: EndpointOpt = None,
    params: ParamsOpt = None,
) -> None:
    """Write the incumbent a new inventory version is planned from (`plan --incumbent`; in a pipeline workspace
    inputs/incumbent.json, which the orchestrator writes when the inventory changes): the plan the job runs now,
    so the new plan moves only what the change calls for."""
    if (inventory is None) == (source is None):
        raise ConfigError("give one of --inventory NAME (the store's current plan) and --from FILE")
    check_outputs({"--from": source}, {"--out": out})
    if source is not None:
        doc: Plan | NoIncumbent = read_incumbent(source)
    else:
        assert inventory is not None
        plan = current_or_none(_open(store, endpoint, params), inventory)
        doc = plan if plan is not None else no_incumbent(inventory)
    save_incumbent(doc, out)
    typer.echo(f"{out}: " + (f"plan {doc.plan_id} ({doc.inventory_name} {doc.inventory_fingerprint[:12]}, "
                             f"{doc.topology.num_devices} devices)" if isinstance(doc, Plan) else doc.reason))


@plans_app.command("rollback")
def rollback_cmd(
    inventory: InventoryNameOpt,
    store: StoreOpt = None,
    to: Annotated[str | None, typer.Option("--to", help="Approved plan id to make current (default: previous).")] = None,
    params: ParamsOpt = None,
    endpoint: EndpointOpt = None,
) -> None:
    """Move `current` back to the previous version (or to --to PLAN_ID, which also repairs a corrupt pointer).
    No version is deleted."""
    pointer = rollback(_open(store, endpoint, params), inventory, to)
    typer.echo(f"current of '{inventory}' is now {pointer.plan_id} ({pointer.key})")


@plans_app.command("reproduce")
def reproduce_cmd(
    plan_id: Annotated[str, typer.Argument(help="Plan id (or 'current' with --inventory).")],
    into: Annotated[Path, typer.Option("--into", help="New directory for the workspace clone.")],
    store: StoreOpt = None,
    inventory: Annotated[str | None, typer.Option("--inventory", help="Inventory name (needed for 'current').")] = None,
    endpoint: EndpointOpt = None,
    params: ParamsOpt = None,
) -> None:
    """Rebuild the workspace a published plan came from (its dvc.yaml, params and dvc.lock), `dvc pull` exactly
    that data and model from the plan's DVC remote, and check their md5 against the plan's lineage."""
    out = reproduce_uc.run(reproduce_uc.ReproduceRequest(settings=_settings(params), plan_id=plan_id, into=into,
                                                         inventory=inventory, store=store, endpoint_url=endpoint))
    plan, result = out.plan, out.result
    assert plan.lineage is not None
    typer.echo(f"reproduced plan {plan.plan_id} in {result.directory}/ from {plan.lineage.dvc_remote}")
    typer.echo(f"model models/dreamshard md5 {result.model_md5} (lineage: {plan.lineage.model_md5}) - match")
    typer.echo(f"measurements md5 {result.measurements_md5}; workspace revision of the run "
               f"{(plan.lineage.git_revision or '-')[:12]}; `dvc repro` inside {into} re-runs the stages")


@remote_app.command("s3")
def remote_s3_cmd(
    name: Annotated[str, typer.Option("--name", help="DVC remote name.")],
    url: Annotated[str, typer.Option("--url", help="s3://bucket/path")],
    endpoint: Annotated[str | None, typer.Option("--endpoint", help="S3 endpoint URL (SeaweedFS, MinIO, ...).")] = None,
    repo: Annotated[Path, typer.Option("--repo", help="DVC repository directory.")] = Path("."),
    default: Annotated[bool, typer.Option("--default/--no-default", help="Make it the default remote.")] = True,
) -> None:
    """Point DVC at an S3-compatible remote. Credentials stay in AWS_* env / boto3 chain, never in .dvc/config."""
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
    for cmd in configure_local_remote(name, path, repo, default):
        typer.echo("dvc " + " ".join(cmd))


def register(app: typer.Typer) -> None:
    """Add `plans` and `remote` to the main app."""
    app.add_typer(plans_app, name="plans")
    app.add_typer(remote_app, name="remote")
