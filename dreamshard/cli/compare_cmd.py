"""`dreamshard evaluate`, `dreamshard compare`, `dreamshard sharders`: parse the options into a use-case request
(dreamshard.usecases.evaluate), run it, render the result."""

from __future__ import annotations

import json
import sys
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from dreamshard.cli.explain_cmd import print_stats
from dreamshard.cli.options import (
    BackendOverride,
    BatchOverride,
    CorpusOpt,
    DevicesOverride,
    DevicesPerHostOverride,
    DeviceTypeOverride,
    HostsOverride,
    InterconnectOverride,
    InventoryOpt,
    JsonOpt,
    MemoryModelOverride,
    MemoryOverride,
    MemoryReserveOverride,
    ModelOpt,
    OptimizerOverride,
    ParamsOpt,
    RepeatsOverride,
    RoundsOverride,
    SeedOverride,
    ThreadsOverride,
    WarmupOverride,
    host_overrides,
    memory_overrides,
)
from dreamshard.config.settings import resolve
from dreamshard.documents import load_inventory
from dreamshard.evaluation import comparison_table, device_rows, device_table, validate_sharders
from dreamshard.lazy import lazy_module
from dreamshard.sharders import HEURISTICS, contender_names, sharder_names

# the use cases import torch: each loads when a command uses it (dreamshard/lazy.py)
if TYPE_CHECKING:  # pragma: no cover
    from dreamshard.usecases import evaluate as evaluate_uc
    from dreamshard.usecases import explain as explain_uc
    from dreamshard.usecases import plan as plan_uc
else:
    evaluate_uc = lazy_module("dreamshard.usecases.evaluate")
    explain_uc = lazy_module("dreamshard.usecases.explain")
    plan_uc = lazy_module("dreamshard.usecases.plan")

console = Console()
err_console = Console(stderr=True, highlight=False)


def evaluate(
    inventory: InventoryOpt,
    plan_file: Annotated[Path, typer.Option("--plan", "-p", help="Plan JSON to measure.")],
    backend: BackendOverride = None,
    warmup: WarmupOverride = None,
    repeats: RepeatsOverride = None,
    threads: ThreadsOverride = None,
    rounds: Annotated[
        int, typer.Option("--rounds", min=1, max=100, help="Repeat the whole measurement and take medians.")
    ] = 1,
    params: ParamsOpt = None,
    as_json: JsonOpt = False,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write the plan with measured costs here.")] = None,
    stats: Annotated[
        bool,
        typer.Option(
            "--stats", help="Print the stats report (measured shares beside the learned model's predicted ones)."
        ),
    ] = False,
    model: ModelOpt = None,
) -> None:
    """Measure a plan: per-device fwd compute / fwd comm / bwd comm / bwd compute / memory and overall ms."""
    settings = resolve(
        params,
        {
            "profile.backend": backend,
            "profile.warmup": warmup,
            "profile.repeats": repeats,
            "profile.num_threads": threads,
            "evaluate.rounds": rounds,
        },
    )
    request = evaluate_uc.MeasureRequest(settings=settings, inventory=inventory, plan=plan_file, out=out)
    with (
        console.status(f"measuring {plan_file} on {settings.profile.backend}", spinner="dots")
        if not as_json
        else nullcontext()
    ):
        result = evaluate_uc.measure(request)
    measured, b = result.plan, result.backend
    inv = load_inventory(inventory)
    if as_json:
        assert measured.measured is not None
        typer.echo(
            json.dumps(
                {
                    "plan_id": measured.plan_id,
                    "sharder": measured.sharder,
                    "backend": b.model_dump(mode="json"),
                    "overall_ms": measured.measured.overall_ms,
                    "per_device": device_rows(measured, inv),
                },
                indent=2,
            )
        )
        return
    console.print(device_table(measured, inv))
    console.print(
        f"backend {b.name} ({b.operator}, {b.num_threads} thread(s), warm-up {b.warmup}, repeats {b.repeats})"
        + (" — SIMULATED, not a measurement" if b.is_simulated else "")
    )
    if stats:
        print_stats(explain_uc.stats_of(inv, measured, model))


def compare(
    inventory: InventoryOpt,
    devices: DevicesOverride = None,
    memory_gb: MemoryOverride = None,
    sharders: Annotated[
        str | None,
        typer.Option(
            "--sharders",
            help="Comma-separated sharder names, or 'heuristics' / 'all' (default: evaluate.sharders of --params less the --plan's sharder, else 'heuristics').",
        ),
    ] = None,
    rounds: RoundsOverride = None,
    backend: BackendOverride = None,
    warmup: WarmupOverride = None,
    repeats: RepeatsOverride = None,
    threads: ThreadsOverride = None,
    batch_size: BatchOverride = None,
    device_type: DeviceTypeOverride = None,
    interconnect: InterconnectOverride = None,
    model: ModelOpt = None,
    samples: Annotated[
        int | None,
        typer.Option(
            "--samples", min=0, max=4096, help="Learned contenders: sampled policy rollouts (plan.samples; default 4)."
        ),
    ] = None,
    seed: SeedOverride = None,
    params: ParamsOpt = None,
    as_json: JsonOpt = False,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write the full comparison JSON here.")] = None,
    markdown_out: Annotated[Path | None, typer.Option("--markdown-out", help="Write a markdown table here.")] = None,
    plot_out: Annotated[Path | None, typer.Option("--plot-out", help="Write a PNG of per-device costs here.")] = None,
    summary_out: Annotated[Path | None, typer.Option("--summary-out", help="Small metrics JSON (DVC metrics).")] = None,
    plot_data_out: Annotated[
        Path | None, typer.Option("--plot-data-out", help="Rows {sharder, overall_ms} (DVC plots).")
    ] = None,
    plans_dir: Annotated[Path | None, typer.Option("--plans-dir", help="Save every contender's plan here.")] = None,
    plan_files: Annotated[
        list[Path] | None,
        typer.Option(
            "--plan",
            "-p",
            help="Also measure this plan (repeatable; its topology when --devices is not given); `plans publish --comparison` needs its plan in the comparison.",
        ),
    ] = None,
    corpus: CorpusOpt = None,
    hosts: HostsOverride = None,
    devices_per_host: DevicesPerHostOverride = None,
    optimizer: OptimizerOverride = None,
    memory_model: MemoryModelOverride = None,
    memory_reserve: MemoryReserveOverride = None,
    all_rounds: Annotated[
        bool,
        typer.Option(
            "--all-rounds",
            help="With one --plan: measure every round even when the publish gate's early look has decided on it (evaluate.stop_early: false).",
        ),
    ] = False,
) -> None:
    """Plan with several sharders and measure all plans interleaved in one run; ratios to the best and to LB.
    The pipeline's `evaluate` stage is `compare --plan data/plan.json --params params.yaml`."""
    names = expand_sharders(sharders) if sharders is not None else (None if params is not None else list(HEURISTICS))
    settings = resolve(
        params,
        {
            **host_overrides(devices, hosts, devices_per_host),
            **memory_overrides(optimizer, memory_model, memory_reserve),
            "topology.memory_per_device_gb": memory_gb,
            "topology.batch_size": batch_size,
            "topology.device_type": device_type,
            "topology.interconnect": interconnect,
            "plan.samples": samples,
            "evaluate.rounds": rounds,
            "profile.backend": backend,
            "profile.warmup": warmup,
            "profile.repeats": repeats,
            "profile.num_threads": threads,
            "profile.seed": seed,
            "evaluate.stop_early": False if all_rounds else None,
        },
    )
    outputs = evaluate_uc.CompareOutputs(
        comparison=out,
        markdown=markdown_out,
        plot=plot_out,
        plans_dir=plans_dir,
        summary=summary_out,
        plot_data=plot_data_out,
    )
    request = evaluate_uc.CompareRequest(
        settings=settings,
        inventory=inventory,
        sharders=tuple(names) if names is not None else None,
        plans=tuple(plan_files or ()),
        num_devices=devices,
        model=model,
        outputs=outputs,
        corpus=corpus,
    )
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        disable=as_json or not sys.stderr.isatty(),
        transient=True,
    ) as bar:
        task = bar.add_task("comparing", total=None)
        result = evaluate_uc.run(request, progress=lambda msg: bar.update(task, description=msg, advance=1))
    cmp = result.comparison
    if as_json:
        summary = cmp.summary()
        summary["results"] = [
            {
                "sharder": r.sharder,
                "plan_id": r.plan.plan_id,
                "overall_ms": r.overall_ms,
                "spread": r.spread,
                "ratio_to_best": r.ratio_to_best,
                "ratio_to_lower_bound": r.ratio_to_lower_bound,
                "samples_ms": r.samples_ms,
                "per_device": device_rows(r.plan),
            }
            for r in cmp.results
        ]
        typer.echo(json.dumps(summary, indent=2))
    else:
        console.print(comparison_table(cmp))


def expand_sharders(spec: str) -> list[str]:
    """'heuristics' -> the six heuristics; 'all' -> every sharder; else a comma list."""
    parts: list[str] = []
    for item in spec.split(","):
        item = item.strip()
        if item == "heuristics":
            parts += list(HEURISTICS)
        elif item == "all":
            parts += list(contender_names())
        elif item:
            parts.append(item)
    return validate_sharders(parts)


def sharders_list() -> None:
    """List the available sharders."""
    for n in sharder_names():
        typer.echo(n)


def register(app: typer.Typer) -> None:
    app.command("evaluate")(evaluate)
    app.command("compare")(compare)
    app.command("sharders")(sharders_list)
