"""`dreamshard plans ...`: list, show, incumbent, fsck, gc, reproduce; publish (publish_cmd), rollback, approve and
decline (plans_change_cmd) change what is current through the one publish use case."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table as RichTable

from dreamshard.cli.console import show
from dreamshard.cli.explain_cmd import TYPE_CODES, print_stats, stats_json
from dreamshard.cli.options import ModelOpt
from dreamshard.cli.plans_change_cmd import register as register_changes
from dreamshard.cli.plans_common import (
    GRACE_MINUTES,
    EndpointOpt,
    GraceOpt,
    ParamsOpt,
    StoreOpt,
    gc_command,
    orphan_line,
    plans_settings,
)
from dreamshard.cli.publish_cmd import publish_cmd
from dreamshard.lazy import lazy_module
from dreamshard.usecases import plans as plans_uc
from dreamshard.usecases.plans import ListResult
from dreamshard.values.records import PlanRecord

# the use case imports torch: it loads when the command runs (dreamshard/lazy.py)
if TYPE_CHECKING:  # pragma: no cover
    from dreamshard.usecases import reproduce as reproduce_uc
else:
    reproduce_uc = lazy_module("dreamshard.usecases.reproduce")

plans_app = typer.Typer(
    help="Gate, publish, list, show, roll back, check and clean up plans in a plan store.", no_args_is_help=True
)


def _listing(
    params: Path | None, store: str | None, endpoint: str | None, inventory: str | None, grace: float
) -> plans_uc.ListRequest:
    """The request `plans list` and `plans fsck` read the store with."""
    return plans_uc.ListRequest(
        settings=plans_settings(params), store=store, endpoint_url=endpoint, inventory=inventory, grace_minutes=grace
    )


@plans_app.command("list")
def list_cmd(
    store: StoreOpt = None,
    inventory: Annotated[str | None, typer.Option("--inventory", help="Only this inventory.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    params: ParamsOpt = None,
    endpoint: EndpointOpt = None,
    grace: GraceOpt = GRACE_MINUTES,
) -> None:
    """List stored plans (approved and rejected), checksum-verified, marking the current one of each inventory.
    A plan that fails verification is listed as CORRUPT with the reason, and a path the store cannot read through
    (a link out of it) is named on stderr as `skipped: KEY: why (fix: ...)`; the others still list. The leftovers
    of an interrupted publish are no plans: each is one warning line on stderr (`orphan: KEY: ...`, or `in flight
    or orphan` within the grace period) naming `plans gc`. Exit 0 when every plan listed verified (orphans or
    not), 1 when something is CORRUPT or skipped (`plans fsck` says how to fix it)."""
    result = plans_uc.list_stored(_listing(params, store, endpoint, inventory, grace))
    if as_json:
        typer.echo(json.dumps([r.model_dump(mode="json") for r in result.records], indent=2))
    else:
        _print_list(result, inventory)
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    for i in result.skipped:  # in both forms: --json's stdout stays the list of plans
        err.print(f"skipped: {i.key}: {i.problem} (fix: {i.fix})", markup=False)
    for o in result.orphans:  # warnings: a monitor on the exit code is not alarmed by a publish that died
        err.print(orphan_line(o, gc_command(store, inventory)), markup=False)
    if result.corrupt or result.skipped:
        raise typer.Exit(1)


#: `plans list`'s columns: the current mark, the plan, what it is for (world size, schema, sharding types), the gate's.
LIST_COLUMNS = (
    "",
    "plan_id",
    "inventory",
    "ranks",
    "schema",
    "types",
    "sharder",
    "stored",
    "overall ms",
    "basis",
    "status",
)


def _types(mix: dict[str, int]) -> str:
    """A plan's mix of sharding types, as TorchRec's stats table abbreviates them: "TW 5, RW 1"."""
    return ", ".join(f"{TYPE_CODES.get(kind, kind)} {n}" for kind, n in sorted(mix.items())) or "-"


def _status(r: PlanRecord) -> str:
    """What the listing says of a plan: CORRUPT, pending (waiting for a reviewer: `plans approve`), else the gate's
    outcome (approved / rejected, or the word that says more: equivalent, fallback, current: first plan, ...)."""
    if r.problem:
        return "CORRUPT"
    if r.status == "pending":
        what = r.pending.change if r.pending is not None else ""
        return f"pending {what}".strip()
    return r.status if r.outcome in ("", "approved", "rejected") else r.outcome


def _print_list(result: ListResult, inventory: str | None) -> None:
    """The stored plans as a table: what each is for (ranks, schema, types) and what the gate made of it."""
    table = RichTable(title="plans" + (f" of {inventory}" if inventory else ""))
    for col in LIST_COLUMNS:
        table.add_column(col, justify="right" if col in ("overall ms", "ranks") else "left")
    for r in result.records:
        table.add_row(
            "*" if r.is_current else "",
            r.plan_id,
            r.inventory,
            str(r.world_size) if r.world_size is not None else "-",
            r.schema_fingerprint[:12] if r.schema_fingerprint else "-",
            _types(r.sharding_types),
            r.sharder,
            r.stored_at.strftime("%Y-%m-%d %H:%M:%S") if r.stored_at else "-",
            f"{r.overall_ms:.3f}" if r.overall_ms is not None else "-",
            r.basis or "-",
            _status(r),
        )
    show(Console(highlight=False), table)  # a pipe gets the table's full width: ids are never cut
    if not result.records:
        typer.echo("no plan could be listed: see `dreamshard plans fsck`" if result.skipped else "no plans stored yet")
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    for r in result.corrupt:
        err.print(f"CORRUPT {r.key}: {r.problem}", markup=False)


@plans_app.command("fsck")
def fsck_cmd(
    store: StoreOpt = None,
    inventory: Annotated[str | None, typer.Option("--inventory", help="Only this inventory's plans.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of lines.")] = False,
    params: ParamsOpt = None,
    endpoint: EndpointOpt = None,
    grace: GraceOpt = GRACE_MINUTES,
) -> None:
    """Check the whole store, changing nothing: pointers, checksums, records, orphans of interrupted publishes
    (their fix: `plans gc`), stored inventory versions. Prints one line per problem with its fix; exit 0 when
    clean, 1 otherwise."""
    result = plans_uc.fsck(_listing(params, store, endpoint, inventory, grace))
    issues = result.issues
    if as_json:
        typer.echo(json.dumps([i.model_dump(mode="json") for i in issues], indent=2))
    else:
        for i in issues:
            typer.echo(f"{i.key}: {i.problem} (fix: {i.fix})")
        typer.echo(f"{len(issues)} problem(s) in {result.location}" if issues else f"{result.location}: clean")
    if issues:
        raise typer.Exit(1)


@plans_app.command("gc")
def gc_cmd(
    store: StoreOpt = None,
    inventory: Annotated[str | None, typer.Option("--inventory", help="Only this inventory's orphans.")] = None,
    grace: GraceOpt = GRACE_MINUTES,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Say what would be removed; remove nothing.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of lines.")] = False,
    params: ParamsOpt = None,
    endpoint: EndpointOpt = None,
) -> None:
    """Remove the orphans of interrupted publishes (docs/architecture/stores.md, "Stores"): of a plan no pointer
    (current or history) names, a plan object without its record, with its checksum, or a record or checksum without
    its plan object. Never a stored plan nor anything of a plan a pointer names. Those younger than --grace-minutes
    may be a publish in flight: kept and named. Exit 0 (nothing to remove is no error)."""
    result = plans_uc.gc(
        plans_uc.GcRequest(
            settings=plans_settings(params),
            store=store,
            endpoint_url=endpoint,
            inventory=inventory,
            grace_minutes=grace,
            dry_run=dry_run,
        )
    )
    if as_json:
        typer.echo(result.model_dump_json(indent=2))
        return
    verb = "would remove" if dry_run else "removed"
    for o in result.removed:
        typer.echo(f"{verb} {', '.join(o.leftovers)} ({o.what})")
    for o in result.kept:
        typer.echo(f"kept {o.key}: in flight or orphan ({o.what}), younger than {result.grace_minutes:g} min")
    typer.echo(
        f"{len(result.removed)} orphan(s) {verb}, {len(result.kept)} kept within the grace period, in {result.location}"
    )


@plans_app.command("show")
def show_cmd(
    plan_id: Annotated[str, typer.Argument(help="Plan id, or 'current'.")] = "current",
    store: StoreOpt = None,
    inventory: Annotated[str | None, typer.Option("--inventory", help="Inventory name (needed for 'current').")] = None,
    torchrec: Annotated[bool, typer.Option("--torchrec", help="Print the TorchRec table-wise form.")] = False,
    lineage: Annotated[
        bool, typer.Option("--lineage", help="Print only the plan's lineage (data, model, params, code).")
    ] = False,
    stats: Annotated[
        bool,
        typer.Option(
            "--stats",
            help="Print the stats report instead (of the inventory version stored under the plan's fingerprint; "
            "predicted by --model's learned cost, measured beside).",
        ),
    ] = False,
    model: ModelOpt = None,
    params: ParamsOpt = None,
    endpoint: EndpointOpt = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="With --stats or --lineage: print JSON instead of tables or lines.")
    ] = False,
) -> None:
    """Print a stored plan as JSON (checksum-verified; a pipeline plan's JSON includes its lineage)."""
    result = plans_uc.show(
        plans_uc.ShowRequest(
            settings=plans_settings(params),
            store=store,
            endpoint_url=endpoint,
            plan_id=plan_id,
            inventory=inventory,
            stats=stats,
            lineage=lineage,
            model=model,
        )
    )
    plan = result.plan
    if result.stats is not None:
        if as_json:
            typer.echo(json.dumps(stats_json(result.stats), indent=2))
        else:
            print_stats(result.stats)
        return
    if lineage and plan.lineage is not None:
        if as_json:
            typer.echo(json.dumps(plan.lineage.model_dump(mode="json"), indent=2))
            return
        for field, value in plan.lineage.summary():
            typer.echo(f"{field:22s} {value}")
        return
    data = plan.to_torchrec() if torchrec else plan.model_dump(mode="json")
    typer.echo(json.dumps(data, indent=2))


@plans_app.command("incumbent")
def incumbent_cmd(
    out: Annotated[Path, typer.Option("--out", "-o", help="Incumbent file to write (JSON).")],
    inventory: Annotated[
        str | None,
        typer.Option("--inventory", help="Write the store's current plan of this inventory (or a note that none is)."),
    ] = None,
    source: Annotated[
        Path | None,
        typer.Option(
            "--from",
            help="Check this incumbent file instead (a plan, or a note that none was current) and write its "
            "canonical form: the DVC `incumbent` stage.",
        ),
    ] = None,
    store: StoreOpt = None,
    endpoint: EndpointOpt = None,
    params: ParamsOpt = None,
) -> None:
    """Write the incumbent a new inventory version is planned from (`plan --incumbent`; in a pipeline workspace
    inputs/incumbent.json, which the orchestrator writes when the inventory changes): the plan the job runs now,
    so the new plan moves only what the change calls for."""
    result = plans_uc.incumbent(
        plans_uc.IncumbentRequest(
            settings=plans_settings(params),
            store=store,
            endpoint_url=endpoint,
            out=out,
            inventory=inventory,
            source=source,
        )
    )
    p = result.plan
    said = (
        f"plan {p.plan_id} ({p.inventory_name} {p.inventory_fingerprint[:12]}, {p.topology.num_devices} devices)"
        if p is not None
        else result.reason
    )
    typer.echo(f"{out}: {said}")


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
    out = reproduce_uc.run(
        reproduce_uc.ReproduceRequest(
            settings=plans_settings(params),
            plan_id=plan_id,
            into=into,
            inventory=inventory,
            store=store,
            endpoint_url=endpoint,
        )
    )
    plan, result = out.plan, out.result
    assert plan.lineage is not None
    typer.echo(f"reproduced plan {plan.plan_id} in {result.directory}/ from {plan.lineage.dvc_remote}")
    typer.echo(f"model models/dreamshard md5 {result.model_md5} (lineage: {plan.lineage.model_md5}) - match")
    typer.echo(
        f"measurements md5 {result.measurements_md5}; workspace revision of the run "
        f"{(plan.lineage.git_revision or '-')[:12]}; `dvc repro` inside {into} re-runs the stages"
    )


def register(app: typer.Typer) -> None:
    """Add `plans` to the main app."""
    plans_app.command("publish")(publish_cmd)
    register_changes(plans_app)
    app.add_typer(plans_app, name="plans")
