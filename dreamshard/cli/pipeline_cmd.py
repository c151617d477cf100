"""`dreamshard pipeline ...` (the orchestrator once; params-driven stage helpers for dvc.yaml) and
`dreamshard inventory push` (store a new inventory version and emit `dreamshard.inventory.changed`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

pipeline_app = typer.Typer(help="Run the whole pipeline (Prefect orchestrator) and DVC stage helpers.",
                           no_args_is_help=True)

ParamsOpt = Annotated[Path, typer.Option("--params", help="params.yaml with one section per stage.")]


@pipeline_app.command("run")
def run_cmd(
    inventory: Annotated[Optional[Path], typer.Option("--inventory", "-i", help="Inventory file (default: synthesise from params.inventory).")] = None,
    store: Annotated[Optional[str], typer.Option("--store", help="Plan store: directory or s3://bucket/prefix (default: publish.store_uri).")] = None,
    params: ParamsOpt = Path("params.yaml"),
    workspace: Annotated[Path, typer.Option("--workspace", help="Where the pipeline keeps its files.")] = Path("runs/pipeline"),
    backend: Annotated[Optional[str], typer.Option("--backend", help="Override profile.backend (cpu|cuda|simulator).")] = None,
    endpoint_url: Annotated[Optional[str], typer.Option("--endpoint-url", help="S3 endpoint (SeaweedFS/MinIO).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Retrain and re-publish even if nothing changed.")] = False,
    model_dir: Annotated[Optional[Path], typer.Option("--model-dir", help="Where the trained model goes (default: <workspace>/models; `dreamshard plan` looks in ./models).")] = None,
) -> None:
    """Run the orchestrator once (ephemeral Prefect API unless PREFECT_API_URL is set)."""
    import os

    from dreamshard.io import load_inventory, save_inventory
    from dreamshard.pipeline_config import load_pipeline_config
    from dreamshard.store import open_store

    # Pre-flight: bad input fails here in one line, before Prefect starts and before anything is written.
    cfg = load_pipeline_config(params, backend=backend)
    inv = load_inventory(inventory) if inventory is not None else cfg.inventory.synthesize()
    open_store(store or cfg.publish.store_uri, endpoint_url=endpoint_url).check()
    if inventory is None:
        inventory = workspace / "source-inventory.yaml"
        save_inventory(inv, inventory)

    # The ephemeral API server needs more than Prefect's default 20 s on a busy 2-core machine.
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    from flows.orchestrator import retrain_on_inventory_change
    from flows.requests import OrchestratorRequest, Workspace

    ws = Workspace(root=str(workspace), models=str(model_dir) if model_dir is not None else None)
    req = OrchestratorRequest(workspace=ws, params_path=str(params),
                              inventory_path=str(inventory), store_uri=store, endpoint_url=endpoint_url,
                              backend=backend, force=force)
    summary = retrain_on_inventory_change(req)
    comparison_file = req.workspace.comparison
    if summary.published and comparison_file.exists():
        from rich.console import Console

        from dreamshard.evaluation import Comparison, comparison_table

        Console().print(comparison_table(Comparison.model_validate_json(comparison_file.read_text())))
    typer.echo(summary.reason)
    if summary.outcome is not None:
        typer.echo(f"plan {summary.outcome.plan_id}: {'current' if summary.outcome.is_current else 'not current'} "
                   f"at {summary.outcome.store.rstrip('/')}/{summary.outcome.key}")
    typer.echo(f"workspace: {workspace}/ (plans/, comparison.json|.md|.png, metrics/, pipeline-state.json); "
               f"model: {ws.model_dir}/")
    api = os.environ.get("PREFECT_API_URL")
    if api:
        typer.echo(f"Prefect UI: {api.removesuffix('/api')}/runs (flow 'retrain-on-inventory-change')")
    else:
        typer.echo("ran against an ephemeral Prefect API; for the UI start infra/start-prefect.sh and "
                   "export PREFECT_API_URL=http://127.0.0.1:4200/api")


@pipeline_app.command("synth")
def synth_cmd(
    out: Annotated[Path, typer.Option("--output", "-o", help="Inventory file to write.")],
    params: ParamsOpt = Path("params.yaml"),
) -> None:
    """DVC stage `inventory`: the synthetic pool from params.inventory (name, num_tables, seed, dims)."""
    from dreamshard.io import save_inventory
    from dreamshard.pipeline_config import load_pipeline_config

    inv = load_pipeline_config(params).inventory.synthesize()
    save_inventory(inv, out)
    typer.echo(f"wrote {out}: {inv.num_tables} tables, fingerprint {inv.fingerprint()}")


@pipeline_app.command("compare")
def compare_cmd(
    inventory: Annotated[Path, typer.Option("--inventory", "-i")],
    model: Annotated[Path, typer.Option("--model", help="DreamShard model dir.")],
    out: Annotated[Path, typer.Option("--output", "-o", help="Comparison JSON.")],
    markdown_out: Annotated[Optional[Path], typer.Option("--markdown-out")] = None,
    plot_out: Annotated[Optional[Path], typer.Option("--plot-out")] = None,
    summary_out: Annotated[Optional[Path], typer.Option("--summary-out", help="Small metrics JSON (DVC metrics).")] = None,
    plot_data_out: Annotated[Optional[Path], typer.Option("--plot-data-out", help="Rows {sharder, overall_ms} (DVC plots).")] = None,
    params: ParamsOpt = Path("params.yaml"),
) -> None:
    """DVC stage `evaluate`: compare dreamshard with the sharders, rounds, topology and backend of params.yaml."""
    from rich.console import Console

    from dreamshard.evaluation import compare_sharders, comparison_table, write_comparison_outputs
    from dreamshard.io import load_inventory
    from dreamshard.pipeline_config import load_pipeline_config
    from dreamshard.sharders import learned_options

    cfg = load_pipeline_config(params)
    inv = load_inventory(inventory)
    topo = cfg.topology.topology(cfg.plan_devices)
    prof = cfg.profile
    oracle = prof.oracle()
    try:
        cmp = compare_sharders(inv, topo, list(cfg.evaluate.sharders), oracle, rounds=cfg.evaluate.rounds,
                               sharder_options={**learned_options(model_dir=model, seed=prof.seed, samples=cfg.plan.samples),
                                                "random": {"seed": prof.seed}},
                               seed=prof.seed)
    finally:
        oracle.close()
    write_comparison_outputs(cmp, json_path=out, markdown_path=markdown_out, plot_path=plot_out,
                             summary_path=summary_out, plot_data_path=plot_data_out)
    Console().print(comparison_table(cmp))


@pipeline_app.command("cost-error")
def cost_error_cmd(
    metrics: Annotated[Path, typer.Option("--metrics", help="Cost-model metrics JSON from `dreamshard train-cost`.")],
    out: Annotated[Path, typer.Option("--output", "-o", help="Rows {component, mape} for `dvc plots`.")],
) -> None:
    """DVC plot data: the cost model's held-out error per cost component, per device and overall."""
    import json

    from dreamshard.io import atomic_write_text, read_structured

    m = read_structured(metrics) or {}
    names = ("fwd_compute", "fwd_comm", "bwd_comm", "bwd_compute")
    rows = [{"component": n, "mape": v} for n, v in zip(names, m.get("mape_device_components") or ())]
    rows += [{"component": "device_total", "mape": m.get("mape_device_total")},
             {"component": "overall", "mape": m.get("mape_overall")}]
    atomic_write_text(out, json.dumps([r for r in rows if r["mape"] is not None], indent=2) + "\n")


def push_cmd(
    inventory: Annotated[Path, typer.Argument(help="Inventory file (YAML or JSON).")],
    store: Annotated[str, typer.Option("--store", help="Plan store: directory or s3://bucket/prefix.")],
    endpoint_url: Annotated[Optional[str], typer.Option("--endpoint-url", help="S3 endpoint (SeaweedFS/MinIO).")] = None,
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
    import os

    if ref.changed and not no_event and not os.environ.get("PREFECT_API_URL"):
        typer.echo("no Prefect API configured: event not emitted (set PREFECT_API_URL to trigger the deployment)")
    elif ref.changed and not no_event:
        event_id = emit_inventory_changed(ref)
        typer.echo(f"emitted dreamshard.inventory.changed ({event_id})" if event_id else
                   "no Prefect API configured: event not emitted (set PREFECT_API_URL)")


def register(app: typer.Typer) -> None:
    """Add `dreamshard pipeline ...` and `dreamshard inventory push`."""
    from dreamshard.cli.inventory_cmd import inventory_app

    app.add_typer(pipeline_app, name="pipeline")
    inventory_app.command("push")(push_cmd)
