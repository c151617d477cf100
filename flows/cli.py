"""`dreamshard pipeline ...`, `dreamshard inventory push` and `dreamshard plans reproduce`: the commands that live
with the flows. dreamshard/cli/app.py adds them through the `dreamshard.cli` entry point group (the library never
imports this package). Module import stays cheap: Prefect and the library load inside the commands.

    pipeline run        the orchestrator once (ephemeral Prefect API unless PREFECT_API_URL is set)
    pipeline init       create a workspace repository (git + DVC) from the installed dvc.yaml and params.yaml
    pipeline status     what `dvc status` says in a workspace, and the last decision
    pipeline inventory  DVC stage `inventory`: the validated copy of the input inventory
    pipeline profile    DVC stage `profile`: batches -> shards (here or on workers) -> merged measurements
    pipeline evaluate   DVC stage `evaluate`: the plan vs every baseline, measured interleaved
    pipeline synth      the synthetic pool of params.inventory (a workspace's default input)
    pipeline drift      one drift check of the current plan
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path
from typing import Annotated, Optional

import typer

pipeline_app = typer.Typer(help="The pipeline: run the orchestrator, manage workspaces, and the DVC stage commands.",
                           no_args_is_help=True)

ParamsOpt = Annotated[Path, typer.Option("--params", help="params.yaml with one section per stage.")]
WorkspaceOpt = Annotated[Path, typer.Option("--workspace", "-w", help="The workspace repository (git + DVC).")]
StoreOpt = Annotated[Optional[str], typer.Option("--store", help="Plan store: directory or s3://bucket/prefix (default: publish.store_uri).")]
EndpointOpt = Annotated[Optional[str], typer.Option("--endpoint-url", help="S3 endpoint of the plan store (SeaweedFS/MinIO).")]

#: The ephemeral API server needs more than Prefect's default 20 s on a busy 2-core machine.
EPHEMERAL_STARTUP_S = "120"


def _echo_ui_hint(flow_name: str) -> None:
    api = os.environ.get("PREFECT_API_URL")
    if api:
        typer.echo(f"Prefect UI: {api.removesuffix('/api')}/runs (flow '{flow_name}')")
    else:
        typer.echo("ran against an ephemeral Prefect API; for the UI start infra/start-prefect.sh and "
                   "export PREFECT_API_URL=http://127.0.0.1:4200/api")


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


def params_or_default(params: Optional[Path]) -> Path:
    """--params, else ./params.yaml, else the params.yaml installed with the package (as `pipeline init`)."""
    if params is not None:
        return params
    from dreamshard_flows.tasks import pipeline_path

    local = Path("params.yaml")
    return local if local.is_file() else pipeline_path("params.yaml")


@pipeline_app.command("run")
def run_cmd(
    inventory: Annotated[Optional[Path], typer.Option("--inventory", "-i", help="Inventory file (default: the workspace's input, else the synthetic pool of params.inventory).")] = None,
    workspace: WorkspaceOpt = Path("runs/pipeline"),
    params: Annotated[Optional[Path], typer.Option("--params", help="params.yaml (default: ./params.yaml, else the installed one).")] = None,
    store: StoreOpt = None,
    endpoint_url: EndpointOpt = None,
    dvc_remote: Annotated[Optional[str], typer.Option("--dvc-remote", help="DVC remote: directory or s3://bucket/path (default: pipeline.dvc_remote).")] = None,
    dvc_remote_endpoint: Annotated[Optional[str], typer.Option("--dvc-remote-endpoint", help="S3 endpoint of the DVC remote.")] = None,
    backend: Annotated[Optional[str], typer.Option("--backend", help="Override profile.backend (cpu|cuda|simulator).")] = None,
    dispatch: Annotated[str, typer.Option("--dispatch", help="Profiling batches: auto, local or workers (the gpu pool).")] = "auto",
    force: Annotated[bool, typer.Option("--force", help="Re-run every stage even if DVC says nothing changed.")] = False,
    reprofile: Annotated[bool, typer.Option("--reprofile", help="Measure afresh: re-run profile and what follows.")] = False,
    export_model: Annotated[Optional[Path], typer.Option("--export-model", help="Also copy the trained model here (e.g. ./models, where `dreamshard plan` looks).")] = None,
) -> None:
    """Run the orchestrator once: the changed stages of dvc.yaml in the workspace, dvc push, gate, publish."""
    from dreamshard.errors import ConfigError
    from dreamshard.io import load_inventory
    from dreamshard.pipeline_config import load_pipeline_config
    from dreamshard.store import open_store

    # Pre-flight: bad input fails here in one line, before Prefect starts and before anything is written.
    if dispatch not in ("auto", "local", "workers"):
        raise ConfigError(f"--dispatch must be auto, local or workers, got '{dispatch}'")
    if dispatch == "workers" and not os.environ.get("PREFECT_API_URL"):
        raise ConfigError("--dispatch workers needs a Prefect server the workers poll: start infra/start-prefect.sh "
                          "and export PREFECT_API_URL=http://127.0.0.1:4200/api")
    from dreamshard.workspace import INPUT_INVENTORY

    params = params_or_default(params)
    cfg = load_pipeline_config(params, backend=backend)
    if inventory is None and (workspace / INPUT_INVENTORY).is_file():
        inventory = workspace / INPUT_INVENTORY  # the workspace keeps its input unless told otherwise
    inv = load_inventory(inventory) if inventory is not None else cfg.inventory.synthesize()
    open_store(store or cfg.publish.store_uri, endpoint_url=endpoint_url).check()
    if export_model is not None and export_model.exists() and not export_model.is_dir():
        raise ConfigError(f"--export-model {export_model} is a file; give a directory")
    if inventory is None:  # a new workspace starts from the synthetic pool of params.inventory
        from dreamshard.io import save_inventory

        inventory = workspace / INPUT_INVENTORY
        save_inventory(inv, inventory)

    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", EPHEMERAL_STARTUP_S)
    from dreamshard_flows.orchestrator import retrain_on_inventory_change
    from dreamshard_flows.requests import OrchestratorRequest

    req = OrchestratorRequest(workspace=str(workspace), params_path=str(params), inventory_path=str(inventory),
                              store_uri=store, endpoint_url=endpoint_url, dvc_remote=dvc_remote,
                              dvc_remote_endpoint=dvc_remote_endpoint, backend=backend, dispatch=dispatch,  # type: ignore[arg-type]
                              force=force, reprofile=reprofile)
    summary = retrain_on_inventory_change(req)
    from dreamshard.workspace import COMPARISON, MODEL_DIR, PipelineWorkspace

    ws = PipelineWorkspace(workspace)
    if summary.outcome is not None and ws.path(COMPARISON).is_file():
        from rich.console import Console

        from dreamshard.evaluation import comparison_table, load_comparison

        Console().print(comparison_table(load_comparison(ws.path(COMPARISON))))
    typer.echo(summary.reason)
    if summary.outcome is not None:
        o = summary.outcome
        typer.echo(f"plan {o.plan_id}: {'current' if o.is_current else 'not current'} at {o.store.rstrip('/')}/{o.key}"
                   f" (model md5 {o.model_md5}, workspace revision {(o.git_revision or '')[:12]})")
    if export_model is not None and ws.path(MODEL_DIR).is_dir():
        shutil.rmtree(export_model, ignore_errors=True)
        shutil.copytree(ws.path(MODEL_DIR), export_model)
        typer.echo(f"model copied to {export_model}/")
    typer.echo(f"workspace: {workspace}/ (git + DVC: dvc.lock, data/, models/dreamshard/, reports/, metrics/)")
    _echo_ui_hint("retrain-on-inventory-change")


@pipeline_app.command("init")
def init_cmd(
    directory: Annotated[Path, typer.Argument(help="Workspace directory (created; an existing one is completed).")],
    inventory: Annotated[Optional[Path], typer.Option("--inventory", "-i", help="Input inventory (default: synthesise from params.inventory).")] = None,
    params: Annotated[Optional[Path], typer.Option("--params", help="params.yaml to start from (default: the installed one).")] = None,
    dvc_remote: Annotated[Optional[str], typer.Option("--dvc-remote", help="DVC remote: directory or s3://bucket/path (default: pipeline.dvc_remote).")] = None,
    dvc_remote_endpoint: Annotated[Optional[str], typer.Option("--dvc-remote-endpoint", help="S3 endpoint of the DVC remote.")] = None,
) -> None:
    """Create a workspace repository: git + DVC, dvc.yaml and params.yaml, the input inventory, the DVC remote,
    and the code link. On a clone of a workspace it only adds what is missing (the code link, the remote)."""
    from dreamshard.io import load_inventory
    from dreamshard.pipeline_config import load_pipeline_config
    from dreamshard.workspace import INPUT_INVENTORY, PARAMS, PipelineWorkspace, RemoteSpec

    from dreamshard_flows.tasks import pipeline_file, pipeline_path

    ws = PipelineWorkspace(directory)
    source = params or (ws.path(PARAMS) if ws.path(PARAMS).is_file() else pipeline_path("params.yaml"))
    cfg = load_pipeline_config(source)  # one-line errors before anything is created
    params_text = Path(source).read_text()
    inv = load_inventory(inventory) if inventory is not None else None
    existing = ws.remote() if ws.exists() else None
    remote = (RemoteSpec(url=dvc_remote, endpoint_url=dvc_remote_endpoint) if dvc_remote
              else existing or RemoteSpec(url=cfg.pipeline.dvc_remote, endpoint_url=cfg.pipeline.dvc_remote_endpoint))
    created = ws.init(pipeline_file("dvc.yaml"), params_text, remote)
    if inv is not None or not ws.path(INPUT_INVENTORY).is_file():
        ws.write_inventory(inv if inv is not None else cfg.inventory.synthesize())
    ws.commit("workspace: input inventory")
    typer.echo(f"{'created' if created else 'completed'} workspace {directory}/ (DVC remote {remote.resolved().url}); "
               f"run it with `dreamshard pipeline run --workspace {directory}` or `dvc repro` inside it")


@pipeline_app.command("status")
def status_cmd(workspace: WorkspaceOpt = Path("runs/pipeline")) -> None:
    """What would run (`dvc status`) and the decision recorded for the workspace's last commit."""
    from dreamshard.errors import PipelineError
    from dreamshard.workspace import PipelineWorkspace

    from dreamshard_flows.publish import plan_decision

    ws = PipelineWorkspace(workspace)
    if not ws.exists():
        raise PipelineError(f"{workspace} is not a pipeline workspace: create it with `dreamshard pipeline init {workspace}`")
    status = ws.status()
    for stage in ws.stages():
        typer.echo(f"{stage:10s} {'changed: ' + describe_status(status[stage]) if stage in status else 'up to date'}")
    plan_id, tag = plan_decision(ws)
    typer.echo(f"revision {(ws.head() or '-')[:12]}: plan {plan_id or '-'}: {tag or 'no plan decided yet'}")


@pipeline_app.command("inventory")
def inventory_stage_cmd(
    source: Annotated[Path, typer.Argument(help="The input inventory (YAML or JSON).")],
    out: Annotated[Path, typer.Option("--output", "-o", help="Validated copy to write.")],
) -> None:
    """DVC stage `inventory`: validate the input inventory and write its canonical copy."""
    from dreamshard.io import load_inventory, save_inventory

    inv = load_inventory(source)
    save_inventory(inv, out)
    typer.echo(f"wrote {out}: {inv.num_tables} tables, fingerprint {inv.fingerprint()}")


@pipeline_app.command("synth")
def synth_cmd(
    out: Annotated[Path, typer.Option("--output", "-o", help="Inventory file to write.")],
    params: ParamsOpt = Path("params.yaml"),
) -> None:
    """The synthetic pool from params.inventory (name, num_tables, seed, dims): a workspace's default input."""
    from dreamshard.io import save_inventory
    from dreamshard.pipeline_config import load_pipeline_config

    inv = load_pipeline_config(params).inventory.synthesize()
    save_inventory(inv, out)
    typer.echo(f"wrote {out}: {inv.num_tables} tables, fingerprint {inv.fingerprint()}")


@pipeline_app.command("profile")
def profile_stage_cmd(
    inventory: Annotated[Path, typer.Option("--inventory", "-i", help="The validated inventory.")],
    tasks: Annotated[Path, typer.Option("--tasks", help="TaskSet from `dreamshard tasks`.")],
    out: Annotated[Path, typer.Option("--output", "-o", help="Merged measurements (JSONL).")],
    params: ParamsOpt = Path("params.yaml"),
    store: Annotated[Optional[str], typer.Option("--store", envvar="DREAMSHARD_PROFILE_STORE", help="Where batch specs and shards go: directory or s3://bucket/prefix (default: a temporary directory, removed after the merge).")] = None,
    endpoint_url: Annotated[Optional[str], typer.Option("--endpoint-url", envvar="DREAMSHARD_PROFILE_ENDPOINT", help="S3 endpoint of --store.")] = None,
    campaign: Annotated[Optional[str], typer.Option("--campaign", envvar="DREAMSHARD_PROFILE_CAMPAIGN", help="Shards of one campaign are reused (resume); default: a fresh one.")] = None,
    dispatch: Annotated[str, typer.Option("--dispatch", envvar="DREAMSHARD_PROFILE_DISPATCH", help="local (this process) or workers (runs of the profile-batch deployment).")] = "local",
    parent_task_run: Annotated[Optional[str], typer.Option("--parent-task-run", envvar="DREAMSHARD_PARENT_TASK_RUN_ID", hidden=True)] = None,
) -> None:
    """DVC stage `profile`: plan the measurements in batches, measure each batch into one shard (here or on the
    gpu work pool's workers), merge the shards in planned order."""
    import tempfile

    from dreamshard.errors import ConfigError
    from dreamshard.store import open_store

    from dreamshard_flows.fanout import profile_stage

    if dispatch not in ("local", "workers"):
        raise ConfigError(f"--dispatch must be local or workers, got '{dispatch}'")
    if dispatch == "workers" and not store:
        raise ConfigError("--dispatch workers needs --store (object storage every worker can reach)")
    scratch = None
    if not store:
        tmp_root = Path(".dvc/tmp") if Path(".dvc/tmp").is_dir() else None
        scratch = tempfile.mkdtemp(prefix="dreamshard-profile-", dir=tmp_root)
        store = scratch
    try:
        summary = profile_stage(str(inventory), str(tasks), str(params), str(out),
                                open_store(store, endpoint_url=endpoint_url), store, endpoint_url,
                                campaign or f"c-{uuid.uuid4().hex[:12]}", dispatch, parent_task_run, log=typer.echo)
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    typer.echo(f"wrote {out}: {summary.records} measurements from {summary.batches} batches")


@pipeline_app.command("evaluate")
def evaluate_stage_cmd(
    plan: Annotated[Path, typer.Option("--plan", "-p", help="The plan to judge (data/plan.json).")],
    inventory: Annotated[Path, typer.Option("--inventory", "-i")],
    model: Annotated[Path, typer.Option("--model", help="Model dir, for learned contenders other than the plan's sharder.")],
    out: Annotated[Path, typer.Option("--output", "-o", help="Comparison JSON.")],
    markdown_out: Annotated[Optional[Path], typer.Option("--markdown-out")] = None,
    plot_out: Annotated[Optional[Path], typer.Option("--plot-out")] = None,
    summary_out: Annotated[Optional[Path], typer.Option("--summary-out", help="Small metrics JSON (DVC metrics).")] = None,
    plot_data_out: Annotated[Optional[Path], typer.Option("--plot-data-out", help="Rows {sharder, overall_ms} (DVC plots).")] = None,
    params: ParamsOpt = Path("params.yaml"),
) -> None:
    """DVC stage `evaluate`: measure the plan and every other sharder of params.evaluate interleaved, on the
    plan's topology and the backend of params.profile."""
    from rich.console import Console

    from dreamshard.errors import PlanError
    from dreamshard.evaluation import compare_sharders, comparison_table, write_comparison_outputs
    from dreamshard.io import load_inventory, load_plan
    from dreamshard.pipeline_config import load_pipeline_config
    from dreamshard.sharders import learned_options

    cfg = load_pipeline_config(params)
    inv = load_inventory(inventory)
    candidate = load_plan(plan)
    if candidate.inventory_fingerprint != inv.fingerprint():
        raise PlanError(f"{plan} was made for another version of inventory '{candidate.inventory_name}'; re-run the plan stage")
    prof = cfg.profile
    contenders = [s for s in cfg.evaluate.sharders if s != candidate.sharder]
    oracle = prof.oracle()
    try:
        cmp = compare_sharders(inv, candidate.topology, contenders, oracle, rounds=cfg.evaluate.rounds,
                               sharder_options={**learned_options(model_dir=model, seed=prof.seed, samples=cfg.plan.samples),
                                                "random": {"seed": prof.seed}},
                               seed=prof.seed, extra_plans=(candidate,))
    finally:
        oracle.close()
    write_comparison_outputs(cmp, json_path=out, markdown_path=markdown_out, plot_path=plot_out,
                             summary_path=summary_out, plot_data_path=plot_data_out)
    Console().print(comparison_table(cmp))


@pipeline_app.command("drift")
def drift_cmd(
    inventory_name: Annotated[str, typer.Option("--inventory-name", help="Whose current plan to check.")],
    params: Annotated[Optional[Path], typer.Option("--params", help="params.yaml (default: ./params.yaml, else the installed one).")] = None,
    store: StoreOpt = None,
    endpoint_url: EndpointOpt = None,
    workspace: Annotated[Optional[Path], typer.Option("--workspace", "-w", help="Workspace holding the plan's inventory (when it is not in the store).")] = None,
    backend: Annotated[Optional[str], typer.Option("--backend", help="Override profile.backend.")] = None,
) -> None:
    """Re-measure the current plan and compare with its recorded cost; past drift.threshold emit
    dreamshard.plan.drifted (with PREFECT_API_URL set, the retrain-on-drift deployment starts)."""
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", EPHEMERAL_STARTUP_S)
    from dreamshard_flows.drift import drift_check_flow, resolve
    from dreamshard_flows.requests import DriftRequest

    request = DriftRequest(inventory_name=inventory_name, params_path=str(params_or_default(params)),
                           store_uri=store, endpoint_url=endpoint_url,
                           workspace=str(workspace) if workspace else None, backend=backend)
    resolve(request)  # one-line errors (params, no plan, no inventory, another backend) before Prefect starts
    check = drift_check_flow(request)
    typer.echo(f"plan {check.plan_id}: {check.now_ms:.4g} ms now, {check.drift:+.1%} vs its {check.basis} cost "
               f"(threshold {check.threshold:.0%}): {'DRIFTED' if check.drifted else 'ok'}")
    _echo_ui_hint("drift-check")


def push_cmd(
    inventory: Annotated[Path, typer.Argument(help="Inventory file (YAML or JSON).")],
    store: Annotated[str, typer.Option("--store", help="Plan store: directory or s3://bucket/prefix.")],
    endpoint_url: EndpointOpt = None,
    no_event: Annotated[bool, typer.Option("--no-event", help="Store only; do not emit the Prefect event.")] = False,
) -> None:
    """Store a new inventory version (inventories/<name>/<fingerprint>.yaml + current) and emit
    `dreamshard.inventory.changed` so the orchestrator deployment re-plans."""
    from dreamshard.events import emit_inventory_changed, push_inventory
    from dreamshard.io import load_inventory
    from dreamshard.store import open_store

    inv = load_inventory(inventory)
    ref = push_inventory(open_store(store, endpoint_url=endpoint_url), inv, store_uri=store)
    typer.echo(f"{'stored' if ref.changed else 'unchanged'} {ref.name} {ref.fingerprint[:12]} at {ref.uri}")
    if ref.changed and not no_event and not os.environ.get("PREFECT_API_URL"):
        typer.echo("no Prefect API configured: event not emitted (set PREFECT_API_URL to trigger the deployment)")
    elif ref.changed and not no_event:
        event_id = emit_inventory_changed(ref)
        typer.echo(f"emitted dreamshard.inventory.changed ({event_id})" if event_id else
                   "no Prefect API configured: event not emitted (set PREFECT_API_URL)")


def reproduce_cmd(
    plan_id: Annotated[str, typer.Argument(help="Plan id (or 'current' with --inventory).")],
    into: Annotated[Path, typer.Option("--into", help="New directory for the workspace clone.")],
    store: StoreOpt = None,
    inventory: Annotated[Optional[str], typer.Option("--inventory", help="Inventory name (needed for 'current').")] = None,
    endpoint_url: EndpointOpt = None,
    params: Annotated[Optional[Path], typer.Option("--params", help="params.yaml to read publish.store_uri from (default: ./params.yaml).")] = None,
) -> None:
    """Rebuild the workspace a published plan came from (its dvc.yaml, params and dvc.lock), `dvc pull` exactly
    that data and model from the plan's DVC remote, and check their md5 against the plan's lineage."""
    from dreamshard.cli.plans_cmd import stored_plan
    from dreamshard.errors import PlanError
    from dreamshard.workspace import reproduce

    plan = stored_plan("reproduce", plan_id, store, inventory, endpoint_url, params)
    if plan.lineage is None:
        raise PlanError(f"plan {plan.plan_id} has no lineage: only plans published by the pipeline can be reproduced")
    result = reproduce(plan.lineage, into, plan.plan_id)
    typer.echo(f"reproduced plan {plan.plan_id} in {result.directory}/ from {plan.lineage.dvc_remote}")
    typer.echo(f"model models/dreamshard md5 {result.model_md5} (lineage: {plan.lineage.model_md5}) - match")
    typer.echo(f"measurements md5 {result.measurements_md5}; workspace revision of the run "
               f"{(plan.lineage.git_revision or '-')[:12]}; `dvc repro` inside {into} re-runs the stages")


def register(app: typer.Typer) -> None:
    """Entry point (group `dreamshard.cli`): add `pipeline`, `inventory push` and `plans reproduce`."""
    from dreamshard.cli.inventory_cmd import inventory_app
    from dreamshard.cli.plans_cmd import plans_app

    app.add_typer(pipeline_app, name="pipeline")
    inventory_app.command("push")(push_cmd)
    plans_app.command("reproduce")(reproduce_cmd)
