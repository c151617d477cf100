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

from dreamshard.cli.console import show
from dreamshard.cli.explain_cmd import print_stats, stats_json
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
    WorldOverride,
    host_overrides,
    measuring_overrides,
    memory_overrides,
    world_overrides,
)
from dreamshard.cli.progress import lines_unless_bars
from dreamshard.config.settings import resolve
from dreamshard.documents import save_plan
from dreamshard.evaluation.render import comparison_table, device_rows, device_table
from dreamshard.lazy import lazy_module
from dreamshard.usecases import sharders as sharders_uc

# the use cases import torch: each loads when a command uses it (dreamshard/lazy.py)
if TYPE_CHECKING:  # pragma: no cover
    from dreamshard.usecases import compare_files
    from dreamshard.usecases import evaluate as evaluate_uc
    from dreamshard.usecases.evaluate import CompareResult, MeasureResult
else:
    evaluate_uc = lazy_module("dreamshard.usecases.evaluate")
    compare_files = lazy_module("dreamshard.usecases.compare_files")

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
    settings = resolve(params, {**measuring_overrides(backend, warmup, repeats, threads), "evaluate.rounds": rounds})
    inv, plan = compare_files.read_measured(inventory, plan_file, out)
    request = evaluate_uc.MeasureRequest(settings=settings, inventory=inv, plan=plan, stats=stats, model=model)
    doing = f"measuring {plan_file} on {settings.profile.backend}"
    with console.status(doing, spinner="dots") if not as_json else nullcontext():
        result = evaluate_uc.measure(request)
    if out is not None:
        save_plan(result.plan, out)
    if as_json:
        typer.echo(json.dumps(measure_json(result), indent=2))
        return
    b = result.backend
    show(console, device_table(result.plan, result.inventory))
    console.print(
        f"backend {b.name} ({b.operator}, {b.num_threads} thread(s), warm-up {b.warmup}, repeats {b.repeats})"
        + (" — SIMULATED, not a measurement" if b.is_simulated else "")
    )
    if result.stats is not None:
        print_stats(result.stats)


def measure_json(result: MeasureResult) -> dict[str, object]:
    """`evaluate --json`: the measured plan's devices (and its stats report with --stats)."""
    measured = result.plan
    assert measured.measured is not None
    return {
        "plan_id": measured.plan_id,
        "sharder": measured.sharder,
        "backend": result.backend.model_dump(mode="json"),
        "overall_ms": measured.measured.overall_ms,
        "per_device": device_rows(measured, result.inventory),
        **({"stats": stats_json(result.stats)} if result.stats is not None else {}),
    }


def compare(
    inventory: InventoryOpt,
    devices: DevicesOverride = None,
    memory_gb: MemoryOverride = None,
    sharders: Annotated[
        str | None,
        typer.Option(
            "--sharders",
            help="Comma-separated sharder names, or 'heuristics' / 'all' (default: evaluate.sharders of --params "
            "less the --plan's sharder, else 'heuristics').",
        ),
    ] = None,
    rounds: RoundsOverride = None,
    backend: BackendOverride = None,
    warmup: WarmupOverride = None,
    repeats: RepeatsOverride = None,
    threads: ThreadsOverride = None,
    batch_size: BatchOverride = None,
    device_type: DeviceTypeOverride = None,
    world: WorldOverride = None,
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
            help="Also measure this plan (repeatable; its topology when --devices is not given); `plans publish "
            "--comparison` needs its plan in the comparison.",
        ),
    ] = None,
    current: Annotated[
        Path | None,
        typer.Option(
            "--current",
            help="An incumbent file (`plans incumbent -o FILE`): the plan current now, measured as the contender "
            "'current' when it can serve this inventory's job; `plans publish --comparison` needs it then.",
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
            help="With one --plan: measure every round even when the publish gate's early look has decided on it "
            "(evaluate.stop_early: false).",
        ),
    ] = False,
) -> None:
    """Plan with several sharders and measure all plans interleaved in one run; ratios to the best, LB and the limit.
    The pipeline's `evaluate` stage is `compare --plan data/plan.json --params params.yaml`."""
    settings = resolve(
        params,
        {
            **host_overrides(devices, hosts, devices_per_host),
            **world_overrides(world, interconnect),
            **memory_overrides(optimizer, memory_model, memory_reserve),
            **measuring_overrides(backend, warmup, repeats, threads),
            "topology.memory_per_device_gb": memory_gb,
            "topology.batch_size": batch_size,
            "topology.device_type": device_type,
            "plan.samples": samples,
            "evaluate.rounds": rounds,
            "profile.seed": seed,
            "evaluate.stop_early": False if all_rounds else None,
        },
    )
    outputs = compare_files.CompareOutputs(
        comparison=out,
        markdown=markdown_out,
        plot=plot_out,
        plans_dir=plans_dir,
        summary=summary_out,
        plot_data=plot_data_out,
    )
    files = compare_files.CompareFiles(
        inventory=inventory,
        plans=tuple(plan_files or ()),
        current=current,
        model=model,
        params=settings.source,
        outputs=outputs,
    )
    inputs = compare_files.read(files)
    request = evaluate_uc.CompareRequest(
        settings=settings,
        inventory=inputs.inventory,
        sharder_spec=sharders,
        heuristics_by_default=True,
        plans=inputs.plans,
        current=inputs.current,
        num_devices=devices,
        model=model,
        corpus=corpus,
    )
    result = _compare_with_bar(files, request, as_json)
    if as_json:
        typer.echo(json.dumps(comparison_json(result), indent=2))
    else:
        show(console, comparison_table(result.comparison))


def _compare_with_bar(
    files: compare_files.CompareFiles, request: evaluate_uc.CompareRequest, as_json: bool
) -> CompareResult:
    """The comparison, with a progress bar on a terminal's stderr (none with --json); elsewhere (a pipe, the evaluate
    stage whose output reaches the flow log) a progress line on stderr at most every 10 s: the rounds measured."""
    if not sys.stderr.isatty():
        with lines_unless_bars(False, "compare") as lines:
            return compare_files.compare(files, request, progress=lines)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        disable=as_json,
        transient=True,
    ) as bar:
        task = bar.add_task("comparing", total=None)
        return compare_files.compare(files, request, progress=lambda msg: bar.update(task, description=msg, advance=1))


def comparison_json(result: CompareResult) -> dict[str, object]:
    """`compare --json`: the comparison's summary and every contender's figures."""
    cmp = result.comparison
    summary = cmp.summary()
    summary["results"] = [
        {
            "sharder": r.sharder,
            "plan_id": r.plan.plan_id,
            "overall_ms": r.overall_ms,
            "spread": r.spread,
            "ratio_to_best": r.ratio_to_best,
            "ratio_to_lower_bound": r.ratio_to_lower_bound,
            "ratio_to_limit": r.ratio_to_limit,
            "samples_ms": r.samples_ms,
            "per_device": device_rows(r.plan),
        }
        for r in cmp.results
    ]
    return summary


def sharders_list() -> None:
    """List the available sharders."""
    for n in sharders_uc.names():
        typer.echo(n)


def register(app: typer.Typer) -> None:
    app.command("evaluate")(evaluate)
    app.command("compare")(compare)
    app.command("sharders")(sharders_list)
