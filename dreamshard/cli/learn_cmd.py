"""`dreamshard tasks | train-cost | train-policy | train | pretrain`: the learning use cases
(dreamshard.usecases.taskset / train)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from dreamshard.cli.options import BackendOverride, CorpusOpt, InventoryOpt, MemoryOverride, ParamsOpt
from dreamshard.cli.progress import lines_unless_bars
from dreamshard.config.settings import resolve
from dreamshard.documents import dump_model, read_checked_inventory
from dreamshard.lazy import lazy_module

# the use cases import torch: each loads when a command uses it (dreamshard/lazy.py)
if TYPE_CHECKING:  # pragma: no cover
    from dreamshard.usecases import taskset as tasks_uc
    from dreamshard.usecases import train as train_uc
else:
    tasks_uc = lazy_module("dreamshard.usecases.taskset")
    train_uc = lazy_module("dreamshard.usecases.train")

console = Console(highlight=False)

ModelDirOpt = Annotated[Path, typer.Option("--model-dir", help="Model directory (cost_net.pt, policy.pt, model.json).")]
TasksOpt = Annotated[Path, typer.Option("--tasks", help="TaskSet file from `dreamshard tasks`.")]
ProgressOpt = Annotated[
    bool,
    typer.Option(
        "--progress/--no-progress",
        help="Show progress bars on a terminal; without them (a pipe, a DVC stage) a progress line on stderr at most "
        "every 10 s: iteration, step, loss.",
    ),
]
MetricsOpt = Annotated[Path | None, typer.Option("--metrics-out", help="Write the metrics as JSON here.")]


def _fmt(v: object) -> str:
    return f"{v:.3f}" if isinstance(v, float) else str(v)


def tasks(
    inventory: InventoryOpt,
    output: Annotated[Path, typer.Option("--output", "-o", help="TaskSet JSON to write.")],
    params: ParamsOpt = None,
) -> None:
    """Split a table pool into disjoint train / held-out pools and make planning tasks from them."""
    settings = resolve(params)
    pool = read_checked_inventory({"--params": settings.source}, inventory, {"--output": output})
    ts = tasks_uc.run(tasks_uc.TasksRequest(settings=settings, inventory=pool)).taskset
    dump_model(ts, output)
    console.print(
        f"{len(ts.train)} train tasks ({len(ts.train_tables)} tables), {len(ts.test)} held-out tasks "
        f"({len(ts.test_tables)} tables) -> {output}",
        markup=False,
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
    settings = resolve(params)
    inputs = {"--measurements": measurements, "--params": settings.source}
    pool = read_checked_inventory(inputs, inventory, {"--metrics-out": metrics_out})
    bars = progress and console.is_terminal
    with lines_unless_bars(bars, "train-cost") as report:
        card = train_uc.run_cost(
            train_uc.CostRequest(
                settings=settings,
                inventory=pool,
                measurements=measurements,
                model_dir=model_dir,
                metrics_out=metrics_out,
                progress=bars,
                report=report,
            )
        ).card
    m = card.cost_metrics
    console.print(
        f"cost net {card.version} -> {model_dir}: train {m.get('n_train')}, held-out {m.get('n_test')}, "
        f"MAPE overall {_fmt(m.get('mape_overall'))}, per device {_fmt(m.get('mape_device_total'))}, "
        f"Spearman {_fmt(m.get('spearman_overall'))}",
        markup=False,
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
    settings = resolve(params)
    inputs = {"--tasks": tasks_path, "--params": settings.source}
    pool = read_checked_inventory(inputs, inventory, {"--metrics-out": metrics_out})
    bars = progress and console.is_terminal
    with lines_unless_bars(bars, "train-policy") as report:
        card = train_uc.run_policy(
            train_uc.PolicyRequest(
                settings=settings,
                inventory=pool,
                tasks=tasks_path,
                model_dir=model_dir,
                metrics_out=metrics_out,
                progress=bars,
                report=report,
            )
        ).card
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
    backend: BackendOverride = None,
    memory_gb: MemoryOverride = None,
    measurements: Annotated[
        Path | None, typer.Option("--measurements", help="Start from these profile records (the profile stage's).")
    ] = None,
    state_dir: Annotated[
        Path | None,
        typer.Option("--state-dir", help="Checkpoints and the loop's measurements (default: <model-dir>/train-state)."),
    ] = None,
    metrics_out: MetricsOpt = None,
    resume: Annotated[
        bool,
        typer.Option(
            "--resume/--no-resume",
            help="Continue from the last checkpoint (--no-resume also forgets the loop's measurements).",
        ),
    ] = True,
    progress: ProgressOpt = True,
    corpus: CorpusOpt = None,
) -> None:
    """The DreamShard outer loop: measure where the planners go, refit the cost ensemble, retrain the policy."""
    settings = resolve(params, {"profile.backend": backend, "topology.memory_per_device_gb": memory_gb})
    inputs = {"--tasks": tasks_path, "--measurements": measurements, "--params": settings.source}
    pool = read_checked_inventory(inputs, inventory, {"--metrics-out": metrics_out})
    bars = progress and console.is_terminal
    with lines_unless_bars(bars, "train") as report:
        result = train_uc.run(
            train_uc.TrainRequest(
                settings=settings,
                inventory=pool,
                tasks=tasks_path,
                model_dir=model_dir,
                measurements=measurements,
                state_dir=state_dir,
                metrics_out=metrics_out,
                resume=resume,
                progress=bars,
                corpus=corpus,
                report=report,
            )
        )
    if not result.iterations:
        console.print(f"nothing to do: {model_dir} already holds the final iteration (use --no-resume to restart)")
    for r in result.iterations:
        console.print(
            f"iter {r.iteration}: {r.n_new} placements ({r.n_measured} measured, {r.n_new - r.n_measured} from the "
            f"cache), {r.n_measurements} records, measured mean {_fmt(r.measured_mean_ms)} ms, cost MAPE "
            f"{_fmt(r.cost.mape_device_total_planning)} per device (compute {_fmt(r.cost.mape_device_compute)}), "
            f"est. cost {_fmt(r.policy_mean_cost_ms)} ms",
            markup=False,
        )
    summary = result.summary
    if summary.incremental:
        console.print(
            f"incremental: warm-started from the previous version's model, measured on "
            f"{summary.tasks_measured} changed or refresh task(s)",
            markup=False,
        )
    if summary.device_timings_measured is not None:
        console.print(
            f"corpus: {summary.device_timings_measured} device timings measured, "
            f"{summary.device_timings_reused} reused",
            markup=False,
        )
    console.print(
        f"model {summary.model_version} -> {model_dir}"
        + (f" (warm-started from {summary.init})" if summary.init else ""),
        markup=False,
    )
    if result.simulated:
        console.print("[SIMULATED backend: analytic model, not a measurement]", markup=False)


def pretrain(
    params: ParamsOpt = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="Where the pre-trained model goes.")] = Path(
        "models/pretrained"
    ),
    state_dir: Annotated[Path, typer.Option("--state-dir", help="Measurements and checkpoints (resumable).")] = Path(
        "runs/pretrain"
    ),
    backend: BackendOverride = None,
    resume: Annotated[bool, typer.Option("--resume/--no-resume", help="Continue where a killed run stopped.")] = True,
    progress: ProgressOpt = True,
) -> None:
    """Pre-train a model on tasks from the wide table generator (params `pretrain`); `make pretrain` ships it."""
    settings = resolve(params, {"profile.backend": backend})
    bars = progress and console.is_terminal
    with lines_unless_bars(bars, "pretrain") as report:
        summary = train_uc.run_pretrain(
            train_uc.PretrainRequest(
                settings=settings, out=out, state_dir=state_dir, resume=resume, progress=bars, report=report
            )
        ).summary
    console.print(
        f"pre-trained {summary['version']} -> {out}: {summary['tasks']} tasks, {summary['tables']} tables, "
        f"{summary['profile_records']} profile + {summary['loop_records']} loop records; profiling "
        f"{summary['profile_wall_s']} s, training {summary['train_wall_s']} s",
        markup=False,
    )


def register(app: typer.Typer) -> None:
    """Add this module's commands to the main app."""
    app.command("tasks")(tasks)
    app.command("train-cost")(train_cost)
    app.command("train-policy")(train_policy)
    app.command("train")(train)
    app.command("pretrain")(pretrain)
