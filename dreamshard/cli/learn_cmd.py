"""`dreamshard tasks | train-cost | train-policy | train`: the learning stages (dreamshard.learning.stages)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from dreamshard.cli.options import MAX_DEVICE_GB, InventoryOpt
from dreamshard.config import load_section
from dreamshard.io import check_outputs

console = Console(highlight=False)

ParamsOpt = Annotated[Optional[Path], typer.Option("--params", help="params.yaml with the stage's section(s).")]
ModelDirOpt = Annotated[Path, typer.Option("--model-dir", help="Model directory (cost_net.pt, policy.pt, model.json).")]
TasksOpt = Annotated[Path, typer.Option("--tasks", help="TaskSet file from `dreamshard tasks`.")]
ProgressOpt = Annotated[bool, typer.Option("--progress/--no-progress", help="Show progress bars.")]
MetricsOpt = Annotated[Optional[Path], typer.Option("--metrics-out", help="Write the metrics as JSON here.")]


def _fmt(v: object) -> str:
    return f"{v:.3f}" if isinstance(v, float) else str(v)


def tasks(
    inventory: InventoryOpt,
    output: Annotated[Path, typer.Option("--output", "-o", help="TaskSet JSON to write.")],
    params: ParamsOpt = None,
) -> None:
    """Split a table pool into disjoint train / held-out pools and make planning tasks from them."""
    from dreamshard.learning.stages import make_tasks_file

    check_outputs({"--inventory": inventory, "--params": params}, {"--output": output})
    ts = make_tasks_file(inventory, output, params)
    console.print(
        f"{len(ts.train)} train tasks ({len(ts.train_tables)} tables), {len(ts.test)} held-out tasks "
        f"({len(ts.test_tables)} tables) -> {output}", markup=False,
    )


def train_cost(
    inventory: InventoryOpt,
    measurements: Annotated[Path, typer.Option("--measurements", help="Profile JSONL (singles + placements).")],
    params: ParamsOpt = None,
    model_dir: ModelDirOpt = Path("models"),
    metrics_out: MetricsOpt = None,
    progress: ProgressOpt = True,
) -> None:
    """Fit the cost network on measurements and save it in the model directory."""
    from dreamshard.learning.stages import train_cost_stage

    check_outputs({"--inventory": inventory, "--measurements": measurements, "--params": params},
                  {"--metrics-out": metrics_out})
    card = train_cost_stage(inventory, measurements, model_dir, params, metrics_out, progress and console.is_terminal)
    m = card.cost_metrics
    console.print(
        f"cost net {card.version} -> {model_dir}: train {m.get('n_train')}, held-out {m.get('n_test')}, "
        f"MAPE overall {_fmt(m.get('mape_overall'))}, per device {_fmt(m.get('mape_device_total'))}, "
        f"Spearman {_fmt(m.get('spearman_overall'))}", markup=False,
    )


def train_policy(
    inventory: InventoryOpt,
    tasks_path: TasksOpt,
    params: ParamsOpt = None,
    model_dir: ModelDirOpt = Path("models"),
    metrics_out: MetricsOpt = None,
    progress: ProgressOpt = True,
) -> None:
    """Train the placement policy on the estimated MDP using the cost net in the model directory."""
    from dreamshard.learning.stages import train_policy_stage

    check_outputs({"--inventory": inventory, "--tasks": tasks_path, "--params": params}, {"--metrics-out": metrics_out})
    card = train_policy_stage(inventory, tasks_path, model_dir, params, metrics_out, progress and console.is_terminal)
    p = card.policy_metrics
    console.print(
        f"policy {card.version} -> {model_dir}: {p.get('episodes')} episodes, estimated cost "
        f"{_fmt(p.get('first_mean_cost_ms'))} -> {_fmt(p.get('mean_cost_ms'))} ms, entropy {_fmt(p.get('entropy'))}",
        markup=False,
    )


def train(
    inventory: InventoryOpt,
    tasks_path: TasksOpt,
    params: ParamsOpt = None,
    model_dir: ModelDirOpt = Path("models"),
    backend: Annotated[Optional[str], typer.Option("--backend", help="cpu (default from params), cuda or simulator.")] = None,
    memory_gb: Annotated[Optional[float], typer.Option("--memory-gb", "-m", min=0.0, max=MAX_DEVICE_GB, help="Memory per device in GB.")] = None,
    measurements: Annotated[
        Optional[Path], typer.Option("--measurements", help="Start from these profile records (the profile stage's).")
    ] = None,
    state_dir: Annotated[
        Optional[Path], typer.Option("--state-dir", help="Checkpoints and the loop's measurements (default: <model-dir>/train-state).")
    ] = None,
    metrics_out: MetricsOpt = None,
    resume: Annotated[bool, typer.Option("--resume/--no-resume", help="Continue from the last checkpoint (--no-resume also forgets the loop's measurements).")] = True,
    progress: ProgressOpt = True,
) -> None:
    """The DreamShard outer loop: measure where the planners go, refit the cost ensemble, retrain the policy."""
    from dreamshard.learning.stages import train_loop_stage

    check_outputs({"--inventory": inventory, "--tasks": tasks_path, "--measurements": measurements, "--params": params},
                  {"--metrics-out": metrics_out})
    results, summary = train_loop_stage(
        inventory, tasks_path, model_dir, params, backend, memory_gb, measurements, resume,
        progress and console.is_terminal, state_dir=state_dir, metrics_out=metrics_out,
    )
    if not results:
        console.print(f"nothing to do: {model_dir} already holds the final iteration (use --no-resume to restart)")
    for r in results:
        console.print(
            f"iter {r.iteration}: {r.n_new} placements ({r.n_measured} measured, {r.n_new - r.n_measured} from the "
            f"cache), {r.n_measurements} records, measured mean {_fmt(r.measured_mean_ms)} ms, cost MAPE "
            f"{_fmt(r.cost.mape_device_total_planning)} per device (compute {_fmt(r.cost.mape_device_compute)}), est. cost "
            f"{_fmt(r.policy_mean_cost_ms)} ms", markup=False,
        )
    console.print(f"model {summary.model_version} -> {model_dir}"
                  + (f" (warm-started from {summary.init})" if summary.init else ""), markup=False)
    from dreamshard.learning.model_store import load_card

    if load_card(model_dir).backend == "simulator":
        console.print("[SIMULATED backend: analytic model, not a measurement]", markup=False)


def pretrain(
    params: ParamsOpt = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="Where the pre-trained model goes.")] = Path("models/pretrained"),
    state_dir: Annotated[Path, typer.Option("--state-dir", help="Measurements and checkpoints (resumable).")] = Path("runs/pretrain"),
    backend: Annotated[Optional[str], typer.Option("--backend", help="cpu (default from params), cuda or simulator.")] = None,
    resume: Annotated[bool, typer.Option("--resume/--no-resume", help="Continue where a killed run stopped.")] = True,
    progress: ProgressOpt = True,
) -> None:
    """Pre-train a model on tasks from the wide table generator (params `pretrain`); `make pretrain` ships it."""
    from dreamshard.learning.configs import PretrainConfig
    from dreamshard.learning.pretrain import pretrain as run_pretrain
    from dreamshard.profiling import ProfileConfig

    cfg = load_section(params, "pretrain", PretrainConfig)
    prof = load_section(params, "profile", ProfileConfig)
    prof = ProfileConfig.model_validate({**prof.model_dump(), **({"backend": backend} if backend else {})})
    oracle = prof.oracle()
    try:
        summary = run_pretrain(cfg, out, state_dir, oracle, progress=progress and console.is_terminal, resume=resume)
    finally:
        oracle.close()
    console.print(
        f"pre-trained {summary['version']} -> {out}: {summary['tasks']} tasks, {summary['tables']} tables, "
        f"{summary['profile_records']} profile + {summary['loop_records']} loop records; profiling "
        f"{summary['profile_wall_s']} s, training {summary['train_wall_s']} s", markup=False,
    )


def register(app: typer.Typer) -> None:
    """Add this module's commands to the main app."""
    app.command("tasks")(tasks)
    app.command("train-cost")(train_cost)
    app.command("train-policy")(train_policy)
    app.command("train")(train)
    app.command("pretrain")(pretrain)
