"""`dreamshard pipeline ...`: the commands that need Prefect. dreamshard/cli/app.py adds them through the
`dreamshard.cli` entry point group when the console script starts (the library never imports this package; the
DVC stages are library commands and run without Prefect). Importing this module imports Prefect, so the library
CLI loads it only for `dreamshard pipeline ...` and the top-level help. Each command parses its options, calls one
use case (dreamshard.usecases.pipeline; `run` hands it the orchestrator flow) and renders the result.

    pipeline run        the orchestrator once (ephemeral Prefect API unless PREFECT_API_URL is set; or in process)
    pipeline init       create a workspace repository (git + DVC) from the installed dvc.yaml and params.yaml
    pipeline status     what `dvc status` says in a workspace, and the last decision
    pipeline drift      a drift check of every current plan (or one): paired with its reference, and its path
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated

import prefect  # noqa: F401  the commands here run flows; without Prefect the library CLI skips this plugin
import typer
from rich.console import Console

from dreamshard.cli.console import show
from dreamshard.cli.review import terminal_reviewer
from dreamshard.config.settings import params_file, pipeline_base, resolve
from dreamshard.config.world import INTERCONNECT_HELP, WORLD_HELP, world_name
from dreamshard.evaluation.render import comparison_table, drift_line
from dreamshard.usecases import pipeline as pipeline_uc
from dreamshard.usecases.pipeline_run import run_pipeline
from dreamshard.usecases.pipeline_steps import RunSummary
from dreamshard.usecases.runner import InProcessRunner

pipeline_app = typer.Typer(
    help="The pipeline: run the orchestrator, manage workspaces, and the DVC stage commands.", no_args_is_help=True
)

WorkspaceOpt = Annotated[Path, typer.Option("--workspace", "-w", help="The workspace repository (git + DVC).")]
StoreOpt = Annotated[
    str | None,
    typer.Option("--store", help="Plan store: directory or s3://bucket/prefix (default: publish.store_uri)."),
]
EndpointOpt = Annotated[
    str | None, typer.Option("--endpoint-url", help="S3 endpoint of the plan store (SeaweedFS/MinIO).")
]

PARAMS_HELP = (
    "params.yaml, layered over the installed one: a file of the keys you change is enough (default: ./params.yaml, "
    "else the installed one)."
)

#: The ephemeral API server needs more than Prefect's default 20 s on a busy 2-core machine.
EPHEMERAL_STARTUP_S = "120"


def _echo_ui_hint(flow_name: str) -> None:
    api = os.environ.get("PREFECT_API_URL")
    if api:
        typer.echo(f"Prefect UI: {api.removesuffix('/api')}/runs (flow '{flow_name}')")
    else:
        typer.echo(
            "ran against an ephemeral Prefect API; for the UI start infra/start-prefect.sh and "
            "export PREFECT_API_URL=http://127.0.0.1:4200/api"
        )


@pipeline_app.command("run")
def run_cmd(
    inventory: Annotated[
        Path | None,
        typer.Option(
            "--inventory",
            "-i",
            help="Inventory file (default: the workspace's input, else the synthetic pool of params.inventory).",
        ),
    ] = None,
    workspace: WorkspaceOpt = Path("runs/pipeline"),
    params: Annotated[Path | None, typer.Option("--params", help=PARAMS_HELP)] = None,
    store: StoreOpt = None,
    endpoint_url: EndpointOpt = None,
    dvc_remote: Annotated[
        str | None,
        typer.Option("--dvc-remote", help="DVC remote: directory or s3://bucket/path (default: pipeline.dvc_remote)."),
    ] = None,
    dvc_remote_endpoint: Annotated[
        str | None, typer.Option("--dvc-remote-endpoint", help="S3 endpoint of the DVC remote.")
    ] = None,
    backend: Annotated[
        str | None, typer.Option("--backend", help="Override profile.backend (cpu|cuda|simulator).")
    ] = None,
    allow_simulated: Annotated[
        bool,
        typer.Option(
            "--allow-simulated",
            help="Let a plan measured on the simulator become current (params publish.allow_simulated); without "
            "it a simulator backend is refused before any stage runs.",
        ),
    ] = False,
    world: Annotated[str | None, typer.Option("--world", help=WORLD_HELP)] = None,
    interconnect: Annotated[str | None, typer.Option("--interconnect", help=INTERCONNECT_HELP)] = None,
    dispatch: Annotated[
        str, typer.Option("--dispatch", help="Profiling batches: auto, local or workers (the gpu pool).")
    ] = "auto",
    force: Annotated[
        bool, typer.Option("--force", help="Re-run every stage even if DVC says nothing changed.")
    ] = False,
    reprofile: Annotated[
        bool, typer.Option("--reprofile", help="Measure afresh: re-run profile and what follows.")
    ] = False,
    export_model: Annotated[
        Path | None,
        typer.Option(
            "--export-model", help="Also copy the trained model here (e.g. ./models, where `dreamshard plan` looks)."
        ),
    ] = None,
    runner: Annotated[
        str,
        typer.Option(
            "--runner",
            help="What runs the steps: prefect (task runs, watched in the UI) or in-process (no Prefect server; "
            "a reviewer answers at this terminal).",
        ),
    ] = "prefect",
) -> None:
    """Run the orchestrator once: the changed stages of dvc.yaml in the workspace, dvc push, gate, publish."""
    params = params_file(params, lookup="installed")
    world = world_name(world, interconnect)  # the alias as the world it names
    overrides = pipeline_uc.run_overrides(backend, allow_simulated, world)
    request = pipeline_uc.RunRequest(
        settings=resolve(params, overrides, base=pipeline_base()),
        workspace=workspace,
        params=params,
        inventory=inventory,
        store=store,
        endpoint_url=endpoint_url,
        dvc_remote=dvc_remote,
        dvc_remote_endpoint=dvc_remote_endpoint,
        backend=backend,
        allow_simulated=allow_simulated,
        world=world,
        dispatch=dispatch,
        force=force,
        reprofile=reprofile,
        export_model=export_model,
        api_url=os.environ.get("PREFECT_API_URL"),
        runner=runner,
    )
    result = pipeline_uc.run(request, _in_process if request.runner == "in-process" else _orchestrate)
    summary = result.summary
    if result.comparison is not None:
        show(Console(), comparison_table(result.comparison))
    typer.echo(summary.reason)
    if summary.outcome is not None:
        o = summary.outcome
        where = f" at {o.ref.store.rstrip('/')}/{o.ref.key}" if o.ref is not None else ""
        lin = o.plan.lineage if o.plan is not None else None
        typer.echo(
            f"plan {o.plan_id}: {'current' if o.judged_is_current else 'not current'}{where} (model md5 "
            f"{lin.model_md5 if lin else '-'}, workspace revision {(summary.git_revision or '')[:12]})"
        )
        if o.status in ("pending", "already-pending"):
            typer.echo(o.reason)
    if result.exported_model is not None:
        typer.echo(f"model copied to {result.exported_model}/")
    typer.echo(f"workspace: {workspace}/ (git + DVC: dvc.lock, data/, models/dreamshard/, reports/, metrics/)")
    if request.runner == "prefect":
        _echo_ui_hint("retrain-on-inventory-change")


def _in_process(prepared: pipeline_uc.PreparedRun) -> RunSummary:
    """The orchestrator's steps in this process (`--runner in-process`): no Prefect server, each log line echoed."""
    runner = InProcessRunner(log=typer.echo, reviewer=terminal_reviewer())
    return run_pipeline(pipeline_uc.pipeline_run(prepared), runner)


def _orchestrate(prepared: pipeline_uc.PreparedRun) -> RunSummary:
    """The retrain-on-inventory-change flow on a prepared run (Prefect starts here)."""
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", EPHEMERAL_STARTUP_S)
    from dreamshard_flows.orchestrator import retrain_on_inventory_change
    from dreamshard_flows.requests import OrchestratorRequest

    return retrain_on_inventory_change(
        OrchestratorRequest(
            workspace=str(prepared.workspace),
            params_path=str(prepared.params) if prepared.params is not None else None,
            inventory_path=str(prepared.inventory),
            inventory_name=prepared.inventory_name,  # the run's name from its start: `<inventory>-pipeline-<minute>`
            store_uri=prepared.store,
            endpoint_url=prepared.endpoint_url,
            dvc_remote=prepared.dvc_remote,
            dvc_remote_endpoint=prepared.dvc_remote_endpoint,
            backend=prepared.backend,
            allow_simulated=prepared.allow_simulated,
            world=prepared.world,
            dispatch=prepared.dispatch,
            force=prepared.force,
            reprofile=prepared.reprofile,
        )
    )


@pipeline_app.command("init")
def init_cmd(
    directory: Annotated[Path, typer.Argument(help="Workspace directory (created; an existing one is completed).")],
    inventory: Annotated[
        Path | None,
        typer.Option("--inventory", "-i", help="Input inventory (default: synthesise from params.inventory)."),
    ] = None,
    params: Annotated[
        Path | None,
        typer.Option(
            "--params",
            help="params.yaml to start from, layered over the installed one (default: the workspace's, else the "
            "installed one).",
        ),
    ] = None,
    dvc_remote: Annotated[
        str | None,
        typer.Option("--dvc-remote", help="DVC remote: directory or s3://bucket/path (default: pipeline.dvc_remote)."),
    ] = None,
    dvc_remote_endpoint: Annotated[
        str | None, typer.Option("--dvc-remote-endpoint", help="S3 endpoint of the DVC remote.")
    ] = None,
) -> None:
    """Create a workspace repository: git + DVC, dvc.yaml and params.yaml, the input inventory, the DVC remote,
    and the code link. On a clone of a workspace it only adds what is missing (the code link, the remote)."""
    result = pipeline_uc.init(
        pipeline_uc.InitRequest(
            directory=directory,
            inventory=inventory,
            params=params,
            dvc_remote=dvc_remote,
            dvc_remote_endpoint=dvc_remote_endpoint,
        )
    )
    typer.echo(
        f"{'created' if result.created else 'completed'} workspace {directory}/ (DVC remote {result.remote}); "
        f"run it with `dreamshard pipeline run --workspace {directory}` or `dvc repro` inside it"
    )


@pipeline_app.command("status")
def status_cmd(
    workspace: WorkspaceOpt = Path("runs/pipeline"),
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of lines.")] = False,
) -> None:
    """What would run (`dvc status`) and the decision recorded for the workspace's last commit."""
    result = pipeline_uc.status(workspace)
    if as_json:
        typer.echo(json.dumps(result.model_dump(mode="json", exclude={"warnings"}), indent=2))
        return
    for s in result.stages:
        typer.echo(f"{s.stage:10s} {'changed: ' + ', '.join(s.changes) if s.changes else 'up to date'}")
    typer.echo(f"{result.incumbent_file}: {result.incumbent}")
    typer.echo(
        f"revision {(result.revision or '-')[:12]}: plan {result.plan_id or '-'}: "
        f"{result.decision or 'no plan decided yet'}"
    )


@pipeline_app.command("drift")
def drift_cmd(
    inventory_name: Annotated[
        str | None,
        typer.Option("--inventory-name", help="Whose current plan to check (default: every inventory with one)."),
    ] = None,
    params: Annotated[Path | None, typer.Option("--params", help=PARAMS_HELP)] = None,
    store: StoreOpt = None,
    endpoint_url: EndpointOpt = None,
    workspace: Annotated[
        Path | None,
        typer.Option(
            "--workspace",
            "-w",
            help="Workspace holding the plan's inventory (when it is not in the store); its model is the production "
            "model a drifted plan's path is chosen for.",
        ),
    ] = None,
    model: Annotated[
        Path | None, typer.Option("--model", help="The production model (default: the workspace's, else packaged).")
    ] = None,
    backend: Annotated[str | None, typer.Option("--backend", help="Override profile.backend.")] = None,
) -> None:
    """Measure the current plan of each inventory (or the one named) interleaved with its reference plan (the
    gate's best baseline, re-planned) and compare plan / reference with the ratio at publishing: a busy host slows
    both alike. A plan whose ratio moved past drift.threshold, over its whole interval, emits
    dreamshard.plan.drifted with its path: `replan` (hardware and model ranges unchanged: the replan-on-drift
    deployment, or `dreamshard replan --force`) or `retrain` (the retrain-on-drift deployment). An inventory without
    a current plan is skipped, with the reason."""
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", EPHEMERAL_STARTUP_S)
    from dreamshard_flows.drift import drift_check_flow, prepare  # optional dependency: prefect
    from dreamshard_flows.requests import DriftRequest

    request = DriftRequest(
        inventory_name=inventory_name,
        params_path=str(params_file(params, lookup="installed")),
        store_uri=store,
        endpoint_url=endpoint_url,
        workspace=str(workspace) if workspace else None,
        model=str(model) if model else None,
        backend=backend,
    )
    if inventory_name is not None:
        prepare(request)  # one-line errors (params, no plan, no inventory, another backend) before Prefect starts
    done = drift_check_flow(request)
    for reason in done.skipped:
        typer.echo(f"skipped: {reason}")
    for check in done.checks:
        typer.echo(drift_line(check))
        if check.path == "replan":  # what the replan-on-drift deployment runs, for a host without a Prefect server
            where = f" --store {store}" if store else ""
            typer.echo(
                f"  the fast path by hand: dreamshard replan --inventory-name {check.inventory_name}{where} --force"
            )
    _echo_ui_hint("drift-check")


def register(app: typer.Typer) -> None:
    """Entry point (group `dreamshard.cli`): add `pipeline`."""
    app.add_typer(pipeline_app, name="pipeline")
