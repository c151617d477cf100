"""`dreamshard pipeline ...`: the commands that need Prefect. dreamshard/cli/app.py adds them through the
`dreamshard.cli` entry point group when the console script starts (the library never imports this package; the
DVC stages are library commands and run without Prefect). Module import stays cheap: Prefect loads inside the
commands (optional dependency of the library CLI: prefect).

    pipeline run        the orchestrator once (ephemeral Prefect API unless PREFECT_API_URL is set)
    pipeline init       create a workspace repository (git + DVC) from the installed dvc.yaml and params.yaml
    pipeline status     what `dvc status` says in a workspace, and the last decision
    pipeline drift      one drift check of the current plan
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Annotated

import prefect  # noqa: F401  the commands here run flows; without Prefect the library CLI skips this plugin
import typer
from rich.console import Console

from dreamshard.config.settings import installed_pipeline_file, params_file, resolve
from dreamshard.documents import load_inventory, save_inventory
from dreamshard.errors import ConfigError, DreamshardError, PipelineError, first_line
from dreamshard.evaluation import comparison_table, load_comparison
from dreamshard.pipeline.incumbent import NoIncumbent, read_incumbent
from dreamshard.pipeline.workspace import (
    COMPARISON,
    INPUT_INCUMBENT,
    INPUT_INVENTORY,
    MODEL_DIR,
    PARAMS,
    PipelineWorkspace,
    RemoteSpec,
    check_directory_path,
)
from dreamshard.store import open_store

pipeline_app = typer.Typer(
    help="The pipeline: run the orchestrator, manage workspaces, and the DVC stage commands.", no_args_is_help=True
)

ParamsOpt = Annotated[Path, typer.Option("--params", help="params.yaml with one section per stage.")]
WorkspaceOpt = Annotated[Path, typer.Option("--workspace", "-w", help="The workspace repository (git + DVC).")]
StoreOpt = Annotated[
    str | None,
    typer.Option("--store", help="Plan store: directory or s3://bucket/prefix (default: publish.store_uri)."),
]
EndpointOpt = Annotated[
    str | None, typer.Option("--endpoint-url", help="S3 endpoint of the plan store (SeaweedFS/MinIO).")
]

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


def describe_status(entries: object) -> str:
    """One stage's `dvc status` entries as `path (modified), ...` (what changed, not Python's repr)."""
    parts: list[str] = []
    for entry in entries if isinstance(entries, list) else [entries]:
        if isinstance(entry, dict):
            for kind, what in entry.items():
                if isinstance(what, dict):
                    parts += [f"{path} ({how})" for path, how in what.items()]
                else:
                    parts.append(f"{kind}: {what}")
        else:
            parts.append(str(entry))
    return ", ".join(parts) or "changed"


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
    params: Annotated[
        Path | None, typer.Option("--params", help="params.yaml (default: ./params.yaml, else the installed one).")
    ] = None,
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
) -> None:
    """Run the orchestrator once: the changed stages of dvc.yaml in the workspace, dvc push, gate, publish."""
    # Pre-flight: bad input fails here in one line, before Prefect starts and before anything is written.
    if dispatch not in ("auto", "local", "workers"):
        raise ConfigError(f"--dispatch must be auto, local or workers, got '{dispatch}'")
    if dispatch == "workers" and not os.environ.get("PREFECT_API_URL"):
        raise ConfigError(
            "--dispatch workers needs a Prefect server the workers poll: start infra/start-prefect.sh "
            "and export PREFECT_API_URL=http://127.0.0.1:4200/api"
        )
    params = params_file(params, lookup="installed")
    cfg = resolve(params, {"profile.backend": backend})
    cfg.check_pipeline()
    if inventory is None and (workspace / INPUT_INVENTORY).is_file():
        inventory = workspace / INPUT_INVENTORY  # the workspace keeps its input unless told otherwise
    inv = load_inventory(inventory) if inventory is not None else cfg.inventory.synthesize()
    open_store(store or cfg.publish.store_uri, endpoint_url=endpoint_url).check()
    if export_model is not None and export_model.exists() and not export_model.is_dir():
        raise ConfigError(f"--export-model {export_model} is a file; give a directory")
    if inventory is None:  # a new workspace starts from the synthetic pool of params.inventory
        inventory = workspace / INPUT_INVENTORY
        save_inventory(inv, inventory)

    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", EPHEMERAL_STARTUP_S)
    from dreamshard_flows.orchestrator import retrain_on_inventory_change
    from dreamshard_flows.requests import OrchestratorRequest

    req = OrchestratorRequest(
        workspace=str(workspace),
        params_path=str(params),
        inventory_path=str(inventory),
        store_uri=store,
        endpoint_url=endpoint_url,
        dvc_remote=dvc_remote,
        dvc_remote_endpoint=dvc_remote_endpoint,
        backend=backend,
        dispatch=dispatch,  # type: ignore[arg-type]
        force=force,
        reprofile=reprofile,
    )
    summary = retrain_on_inventory_change(req)
    ws = PipelineWorkspace(workspace)
    if summary.outcome is not None and ws.path(COMPARISON).is_file():
        Console().print(comparison_table(load_comparison(ws.path(COMPARISON))))
    typer.echo(summary.reason)
    if summary.outcome is not None:
        o = summary.outcome
        typer.echo(
            f"plan {o.plan_id}: {'current' if o.is_current else 'not current'} at {o.store.rstrip('/')}/{o.key}"
            f" (model md5 {o.model_md5}, workspace revision {(o.git_revision or '')[:12]})"
        )
    if export_model is not None and ws.path(MODEL_DIR).is_dir():
        shutil.rmtree(export_model, ignore_errors=True)
        shutil.copytree(ws.path(MODEL_DIR), export_model)
        typer.echo(f"model copied to {export_model}/")
    typer.echo(f"workspace: {workspace}/ (git + DVC: dvc.lock, data/, models/dreamshard/, reports/, metrics/)")
    _echo_ui_hint("retrain-on-inventory-change")


@pipeline_app.command("init")
def init_cmd(
    directory: Annotated[Path, typer.Argument(help="Workspace directory (created; an existing one is completed).")],
    inventory: Annotated[
        Path | None,
        typer.Option("--inventory", "-i", help="Input inventory (default: synthesise from params.inventory)."),
    ] = None,
    params: Annotated[
        Path | None, typer.Option("--params", help="params.yaml to start from (default: the installed one).")
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
    check_directory_path(directory, "workspace")  # a file at (or above) it: one line, nothing created
    ws = PipelineWorkspace(directory)
    source = params or (ws.path(PARAMS) if ws.path(PARAMS).is_file() else installed_pipeline_file("params.yaml"))
    cfg = resolve(source)  # one-line errors before anything is created
    params_text = Path(source).read_text()
    inv = load_inventory(inventory) if inventory is not None else None
    existing = ws.remote() if ws.exists() else None
    remote = (
        RemoteSpec(url=dvc_remote, endpoint_url=dvc_remote_endpoint)
        if dvc_remote
        else existing or RemoteSpec(url=cfg.pipeline.dvc_remote, endpoint_url=cfg.pipeline.dvc_remote_endpoint)
    )
    created = ws.init(installed_pipeline_file("dvc.yaml").read_text(), params_text, remote)
    if inv is not None or not ws.path(INPUT_INVENTORY).is_file():
        ws.write_inventory(inv if inv is not None else cfg.inventory.synthesize())
    name = load_inventory(ws.path(INPUT_INVENTORY)).name
    ws.write_incumbent(None, name, replace=False)  # `plans incumbent --inventory NAME -o inputs/incumbent.json`
    ws.commit("workspace: input inventory")
    typer.echo(
        f"{'created' if created else 'completed'} workspace {directory}/ (DVC remote {remote.resolved().url}); "
        f"run it with `dreamshard pipeline run --workspace {directory}` or `dvc repro` inside it"
    )


def describe_incumbent(path: Path) -> str:
    """What the plan stage starts from (inputs/incumbent.json), in one line; a file that does not check says why."""
    if not path.is_file():
        return f"none yet ({path.name} is written with the next inventory)"
    try:
        doc = read_incumbent(path)
    except DreamshardError as e:
        return f"unreadable: {first_line(e)}"
    if isinstance(doc, NoIncumbent):
        return f"none: {doc.reason}"
    return (
        f"plan {doc.plan_id} ({doc.inventory_name} {doc.inventory_fingerprint[:12]}, "
        f"{doc.topology.num_devices} devices): the plan stage searches from it"
    )


@pipeline_app.command("status")
def status_cmd(workspace: WorkspaceOpt = Path("runs/pipeline")) -> None:
    """What would run (`dvc status`) and the decision recorded for the workspace's last commit."""
    from dreamshard_flows.publish import plan_decision  # optional dependency: prefect

    ws = PipelineWorkspace(workspace)
    if not ws.exists():
        raise PipelineError(
            f"{workspace} is not a pipeline workspace: create it with `dreamshard pipeline init {workspace}`"
        )
    status = ws.status()
    for stage in ws.stages():
        typer.echo(f"{stage:10s} {'changed: ' + describe_status(status[stage]) if stage in status else 'up to date'}")
    typer.echo(f"{INPUT_INCUMBENT}: {describe_incumbent(ws.path(INPUT_INCUMBENT))}")
    plan_id, tag = plan_decision(ws)
    typer.echo(f"revision {(ws.head() or '-')[:12]}: plan {plan_id or '-'}: {tag or 'no plan decided yet'}")


@pipeline_app.command("drift")
def drift_cmd(
    inventory_name: Annotated[str, typer.Option("--inventory-name", help="Whose current plan to check.")],
    params: Annotated[
        Path | None, typer.Option("--params", help="params.yaml (default: ./params.yaml, else the installed one).")
    ] = None,
    store: StoreOpt = None,
    endpoint_url: EndpointOpt = None,
    workspace: Annotated[
        Path | None,
        typer.Option("--workspace", "-w", help="Workspace holding the plan's inventory (when it is not in the store)."),
    ] = None,
    backend: Annotated[str | None, typer.Option("--backend", help="Override profile.backend.")] = None,
) -> None:
    """Re-measure the current plan and compare with its recorded cost; past drift.threshold emit
    dreamshard.plan.drifted (with PREFECT_API_URL set, the retrain-on-drift deployment starts)."""
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", EPHEMERAL_STARTUP_S)
    from dreamshard_flows.drift import drift_check_flow, prepare  # optional dependency: prefect
    from dreamshard_flows.requests import DriftRequest

    request = DriftRequest(
        inventory_name=inventory_name,
        params_path=str(params_file(params, lookup="installed")),
        store_uri=store,
        endpoint_url=endpoint_url,
        workspace=str(workspace) if workspace else None,
        backend=backend,
    )
    prepare(request)  # one-line errors (params, no plan, no inventory, another backend) before Prefect starts
    check = drift_check_flow(request)
    typer.echo(
        f"plan {check.plan_id}: {check.now_ms:.4g} ms now, {check.drift:+.1%} vs its {check.basis} cost "
        f"(threshold {check.threshold:.0%}): {'DRIFTED' if check.drifted else 'ok'}"
    )
    _echo_ui_hint("drift-check")


def register(app: typer.Typer) -> None:
    """Entry point (group `dreamshard.cli`): add `pipeline`."""
    app.add_typer(pipeline_app, name="pipeline")
