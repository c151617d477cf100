"""`dreamshard replan`: the production loop's fast path (dreamshard.usecases.replan): a new inventory version
planned with the current model, gated and published, no profiling or training; or "retrain due"."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from dreamshard.cli.console import show
from dreamshard.cli.options import (
    BackendOverride,
    DevicesOverride,
    DevicesPerHostOverride,
    HostsOverride,
    MemoryOverride,
    ModelOpt,
    ParamsOpt,
    RoundsOverride,
    SeedOpt,
    WorldOverride,
    host_overrides,
    world_overrides,
)
from dreamshard.cli.plan_cmd import verification_table, warn
from dreamshard.cli.plan_options import MaxMoveFractionOpt
from dreamshard.cli.progress import lines_on_stderr
from dreamshard.cli.publication_view import PENDING, show_moves
from dreamshard.cli.review import terminal_reviewer
from dreamshard.config.job import describe_topology
from dreamshard.config.settings import resolve
from dreamshard.documents import load_inventory
from dreamshard.evaluation.render import device_table
from dreamshard.lazy import lazy_module
from dreamshard.values import Plan
from dreamshard.values.stage_report import stage_line, stage_vs_search

# the use cases import torch: each loads when a command uses it (dreamshard/lazy.py)
if TYPE_CHECKING:  # pragma: no cover
    from dreamshard.usecases import replan as replan_uc
else:
    replan_uc = lazy_module("dreamshard.usecases.replan")

console = Console(highlight=False, soft_wrap=True)


def replan(
    inventory: Annotated[
        Path | None,
        typer.Option(
            "--inventory",
            "-i",
            help="The new inventory version (default: the store's current version of --inventory-name).",
        ),
    ] = None,
    inventory_name: Annotated[
        str | None, typer.Option("--inventory-name", help="Inventory in the store (when -i is not given).")
    ] = None,
    store: Annotated[
        str | None,
        typer.Option("--store", help="Plan store: directory or s3://bucket/prefix (default: publish.store_uri)."),
    ] = None,
    endpoint: Annotated[
        str | None, typer.Option("--endpoint", "--endpoint-url", help="S3 endpoint of the plan store.")
    ] = None,
    model: ModelOpt = None,
    params: ParamsOpt = None,
    devices: DevicesOverride = None,
    hosts: HostsOverride = None,
    devices_per_host: DevicesPerHostOverride = None,
    memory_gb: MemoryOverride = None,
    world: WorldOverride = None,
    backend: BackendOverride = None,
    verify: Annotated[
        int | None,
        typer.Option("--verify", min=0, max=64, help="Measure the K best candidates before the gate (plan.verify)."),
    ] = None,
    refine_seconds: Annotated[
        float | None,
        typer.Option(
            "--refine-seconds",
            min=0.0,
            max=86_400.0,
            help="Measured refinement of the kept plan before the gate (plan.replan_refine_seconds; default 0 = off).",
        ),
    ] = None,
    max_move_fraction: MaxMoveFractionOpt = None,
    rounds: RoundsOverride = None,
    seed: SeedOpt = 0,
    force: Annotated[bool, typer.Option("--force", help="Re-plan a version the gate already decided on.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the outcome as JSON.")] = False,
) -> None:
    """Re-plan a changed inventory with the current production model: plan (search + verify on the backend), gate
    against the baselines measured interleaved, publish. Exit 0: published, already current, or already decided
    (--force re-plans); 1: not published (the gate kept the current plan, or, when the current plan cannot serve
    the new version, made the best measured baseline current: `fallback`) or a retrain is due (the version is
    outside the model's training ranges); 3: the change waits for a reviewer (publish.require_human with nobody at
    this terminal: `dreamshard plans approve PLAN_ID`). The version is planned for the job its inventory records
    (`inventory from-torchrec --world-size ...`) in the world it records, unless --devices/--hosts/--devices-per-host/
    --memory-gb/--world say otherwise."""
    settings = resolve(
        params,
        {
            **host_overrides(devices, hosts, devices_per_host),
            **world_overrides(world),
            "topology.memory_per_device_gb": memory_gb,
            "profile.backend": backend,
            "plan.verify": verify,
            "evaluate.rounds": rounds,
            "plan.replan_refine_seconds": refine_seconds,
            "plan.max_move_fraction": max_move_fraction,
        },
        lookup="local",
    )
    request = replan_uc.ReplanRequest(
        settings=settings,
        inventory=load_inventory(inventory) if inventory is not None else None,
        inventory_name=inventory_name,
        store=store,
        endpoint_url=endpoint,
        model=model,
        seed=seed,
        force=force,
    )
    with lines_on_stderr("replan") as progress:
        result = replan_uc.run(request.model_copy(update={"progress": progress}), terminal_reviewer())
    if as_json:
        typer.echo(
            json.dumps(
                result.model_dump(mode="json", exclude={"plan"})
                | {"plan_id": result.plan.plan_id if result.plan else None}
                | {"plan_stage_vs_search": stage_vs_search(_verified(result)) if result.plan else None},
                indent=2,
            )
        )
    else:
        warn(result.warnings)
        if result.verification is not None:
            show(console, verification_table(result.verification))
            if result.plan is not None and (line := stage_line(_verified(result))) is not None:
                console.print(line, markup=False, soft_wrap=True)  # what measurement added to the search-only plan
        if result.plan is not None and result.outcome != "current":
            show(console, device_table(result.plan))
        if result.topology is not None:
            console.print(f"planned for {describe_topology(result.topology)}", markup=False)
        console.print(
            f"{result.outcome}: {result.inventory_name} {result.fingerprint[:12]}: {result.reason}", markup=False
        )
        done = result.publication
        if done is not None and done.status == "fallback" and done.fallback_ref is not None:
            f = done.fallback_ref
            console.print(f"now current: {f.plan_id} ({f.reason}) -> {f.key}", markup=False)
        if done is not None:
            show_moves(done, console)
        elif result.diff is not None:
            console.print(f"against the plan that was current: {result.diff.summary}", markup=False)
    if result.outcome == "pending":
        raise typer.Exit(PENDING)
    if result.outcome in ("not-published", "fallback", "declined", "retrain-due"):
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("replan")(replan)


def _verified(result: replan_uc.ReplanResult) -> Plan:
    """The replanned plan with the verification the use case reports beside it (the gate strips it from the plan)."""
    assert result.plan is not None
    return result.plan.model_copy(update={"verification": result.verification})
