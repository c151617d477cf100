"""`dreamshard plan`: parse the options into a use-case request (dreamshard.usecases.plan), run it, render the
result."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console, Group
from rich.table import Table as RichTable
from rich.text import Text

from dreamshard.cli.console import show
from dreamshard.cli.explain_cmd import print_reasons, print_stats, stats_json
from dreamshard.cli.flags import with_flags
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
    MemoryModelOverride,
    MemoryOverride,
    MemoryReserveOverride,
    ModelOpt,
    OptimizerOverride,
    ParamsOpt,
    RepeatsOverride,
    SeedOpt,
    ThreadsOverride,
    WarmupOverride,
    WorldOverride,
    host_overrides,
    measuring_overrides,
    memory_overrides,
    world_overrides,
)
from dreamshard.cli.plan_options import (
    CalibrateSecondsOpt,
    ExplainOpt,
    IncumbentOpt,
    MaxMoveFractionOpt,
    OutOpt,
    PlanJsonOpt,
    RefineSecondsOpt,
    RiskOpt,
    SamplesOpt,
    SharderOpt,
    StageBudgetOpt,
    StatsOpt,
    TorchrecKernelOpt,
    TorchrecOutOpt,
    TypesOpt,
    VerifyConfidenceOpt,
    VerifyOpt,
    VerifyRoundsOpt,
    searching_options,
    types_override,
)
from dreamshard.cli.progress import status_or_lines
from dreamshard.config.settings import resolve
from dreamshard.documents import check_outputs, load_inventory, save_plan
from dreamshard.errors import ConfigError, InputFileError
from dreamshard.evaluation.render import device_rows, device_table
from dreamshard.integrations.torchrec_carried import carried_lines, carried_report
from dreamshard.integrations.torchrec_file import save_torchrec_plan
from dreamshard.lazy import lazy_module
from dreamshard.values import Verification
from dreamshard.values.search_result import SearchResult
from dreamshard.values.stage_report import stage_line, stage_vs_search

# the use case imports torch: it loads when a command uses it (dreamshard/lazy.py)
if TYPE_CHECKING:  # pragma: no cover
    from dreamshard.usecases import plan as plan_uc
    from dreamshard.usecases.plan import PlanResult
else:
    plan_uc = lazy_module("dreamshard.usecases.plan")

console = Console()
err_console = Console(stderr=True, highlight=False)


def warn(lines: Any, what: str | None = None) -> None:
    for line in lines:
        err_console.print(f"warning: {what + ': ' if what else ''}{with_flags(line)}", markup=False, soft_wrap=True)


def _search_table(result: SearchResult) -> Any:
    t = RichTable(
        title=f"candidates under the learned cost ({result.wall_s:.2f} s)",
        title_style="bold",
        caption="pessimistic = ensemble mean + risk x spread (what search minimises); the plan records the mean",
    )
    t.add_column("#", justify="right")
    t.add_column("source")
    t.add_column("predicted ms (pessimistic)", justify="right")
    for i, c in enumerate(result.candidates[:10], 1):
        t.add_row(str(i), c.source, f"{c.predicted_ms:.3f}")
    for source in result.failed:
        t.add_row("-", source, "no plan (below)")
    if not result.failed:
        return t
    return Group(t, *(Text(f"{source}: no plan: {why}") for source, why in result.failed.items()))


def verification_table(v: Verification) -> RichTable:
    """The race's contenders: predicted and measured, rounds each was measured (fewer: dropped), the kept one; the
    contenders not measured, with why, in the caption."""
    missing = "; ".join(f"{name}: {why}" for name, why in v.not_measured.items())
    t = RichTable(
        title=f"raced on {v.backend.name} (up to {v.rounds} interleaved rounds; a contender behind the leader "
        f"beyond the noise is measured no more)",
        title_style="bold",
        caption=f"not measured: {missing}" if missing else None,
    )
    for col in ("contender", "predicted ms", "measured ms", "spread", "rounds"):
        t.add_column(col, justify="left" if col == "contender" else "right")
    marked = any(c.kept for c in v.candidates)  # an older record says only the kept source
    for c in v.candidates:
        mark = " (kept)" if (c.kept if marked else c.source == v.chosen) else ""
        t.add_row(
            c.label + mark,
            f"{c.predicted_ms:.3f}",
            f"{'>= ' if c.cut_short else ''}{c.measured_ms:.3f}",
            f"{c.spread:.1%}",
            str(c.rounds or v.rounds),
        )
    return t


def plan(
    inventory: InventoryOpt,
    devices: DevicesOverride = None,
    memory_gb: MemoryOverride = None,
    sharder: SharderOpt = "dreamshard",
    out: OutOpt = Path("plan.json"),
    model: ModelOpt = None,
    samples: SamplesOpt = None,
    risk: RiskOpt = None,
    verify: VerifyOpt = None,
    verify_rounds: VerifyRoundsOpt = None,
    verify_confidence: VerifyConfidenceOpt = None,
    backend: BackendOverride = None,
    warmup: WarmupOverride = None,
    repeats: RepeatsOverride = None,
    threads: ThreadsOverride = None,
    params: ParamsOpt = None,
    seed: SeedOpt = 0,
    batch_size: BatchOverride = None,
    device_type: DeviceTypeOverride = None,
    world: WorldOverride = None,
    interconnect: InterconnectOverride = None,
    explain: ExplainOpt = False,
    stats: StatsOpt = False,
    refine_seconds: RefineSecondsOpt = None,
    stage_budget: StageBudgetOpt = None,
    calibrate_seconds: CalibrateSecondsOpt = None,
    corpus: CorpusOpt = None,
    torchrec_out: TorchrecOutOpt = None,
    torchrec_kernel: TorchrecKernelOpt = "fused",
    hosts: HostsOverride = None,
    devices_per_host: DevicesPerHostOverride = None,
    optimizer: OptimizerOverride = None,
    memory_model: MemoryModelOverride = None,
    memory_reserve: MemoryReserveOverride = None,
    types: TypesOpt = None,
    incumbent: IncumbentOpt = None,
    max_move_fraction: MaxMoveFractionOpt = None,
    as_json: PlanJsonOpt = False,
) -> None:
    """Place every table of an inventory on a device with one sharder and write the plan."""
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
            "plan.refine_seconds": refine_seconds,
            "plan.stage_budget": stage_budget,
            "plan.calibrate_seconds": calibrate_seconds,
            "plan.types": types_override(types),
            "plan.samples": samples,
            "plan.risk": risk,
            "plan.verify": verify,
            "plan.verify_rounds": verify_rounds,
            "plan.verify_confidence": verify_confidence,
            "plan.max_move_fraction": max_move_fraction,
        },
    )
    _check_files(
        {"--inventory": inventory, "--model": model, "--params": settings.source, "--incumbent": incumbent},
        out,
        torchrec_out,
        torchrec_kernel,
    )
    request = plan_uc.PlanRequest(
        settings=settings,
        inventory=load_inventory(inventory),
        sharder=sharder,
        model=model,
        seed=seed,
        torchrec_kernel=torchrec_kernel if torchrec_out is not None else None,
        corpus=corpus,
        incumbent=plan_uc.read_incumbent(incumbent),
        searching_options=searching_options(
            incumbent=incumbent,
            verify=verify,
            refine_seconds=refine_seconds,
            calibrate_seconds=calibrate_seconds,
            types=types,
        ),
        explain=explain,
        stats=stats,
    )
    doing = request.measuring()  # a status line on a terminal, progress lines on stderr in a pipe (a DVC stage)
    with status_or_lines(doing, "plan", enabled=bool(doing) and not (as_json and console.is_terminal)) as progress:
        result = plan_uc.run(request.model_copy(update={"progress": progress}))
    save_plan(result.plan, out)
    if torchrec_out is not None and result.torchrec is not None:
        save_torchrec_plan(result.torchrec, torchrec_out)
    warn(result.warnings)
    if as_json:
        typer.echo(json.dumps(plan_json(result), indent=2))
        return
    _print_plan(result)
    console.print(f"wrote {out}")


def _check_files(inputs: dict[str, Path | None], out: Path, torchrec_out: Path | None, kernel: str) -> None:
    """The command's files checked before anything is read or written: no output is an input or another output,
    the TorchRec file is no directory, and a TorchRec kernel comes with the TorchRec file it is for."""
    check_outputs(inputs, {"--out": out, "--torchrec-out": torchrec_out})
    if torchrec_out is not None and torchrec_out.is_dir():
        raise InputFileError(f"cannot write {torchrec_out}: it is a directory")
    if torchrec_out is None and kernel != "fused":
        raise ConfigError(f"--torchrec-kernel {kernel} needs --torchrec-out: it is the TorchRec file's kernel")


def plan_json(result: PlanResult) -> dict[str, object]:
    """`plan --json`: the plan's devices, and the reports the options asked for."""
    p = result.plan
    return {
        "plan_id": p.plan_id,
        "sharder": p.sharder,
        "inventory": p.inventory_name,
        "basis": p.cost_basis,
        "per_device": device_rows(p, result.inventory),
        "search": _search_json(result.search) if result.search is not None else None,
        "verification": p.verification.model_dump(mode="json") if p.verification is not None else None,
        "refinement": p.refinement.model_dump(mode="json") if p.refinement is not None else None,
        "plan_stage": {"vs_search_only": stage_vs_search(p), "line": stage_line(p)},
        "calibration": p.calibration.model_dump(mode="json") if p.calibration is not None else None,
        "comm_fits": [m.model_dump(mode="json") for m in p.comm_fits],
        "world": p.world.model_dump(mode="json") if p.world is not None else None,
        "assumptions": p.assumptions.model_dump(mode="json") if p.assumptions is not None else None,
        "layouts": dict(p.layouts),
        "against_incumbent": result.diff.model_dump(mode="json") if result.diff is not None else None,
        "reasons": None
        if result.reasons is None
        else [[r.model_dump(mode="json") for r in dev] for dev in result.reasons],
        "stats": stats_json(result.stats) if result.stats is not None else None,
        "carried": carried_report(result.inventory) if result.inventory is not None else {},
        "warnings": result.warnings,
    }


def _search_json(search: SearchResult) -> dict[str, object]:
    return {
        "wall_s": search.wall_s,
        "candidates": [{"source": c.source, "predicted_ms": c.predicted_ms} for c in search.candidates],
        "failed": dict(search.failed),
    }


def _print_plan(result: PlanResult) -> None:
    if result.search is not None and result.reasons is not None:
        show(console, _search_table(result.search))
        print_reasons(result.reasons)
    if result.plan.verification is not None:
        show(console, verification_table(result.plan.verification))
    if (r := result.plan.refinement) is not None:
        console.print(
            f"refinement: {r.tried} proposal(s) measured in {r.seconds:.1f} s ({r.device_timings} device "
            f"timings, {r.tried / r.seconds if r.seconds else 0:.2f} proposals/s), {r.kept} kept; bottleneck "
            f"{r.initial_ms:.3f} -> {r.final_ms:.3f} ms measured ({r.measured_gain:+.1%})",
            markup=False,
        )
    if (line := stage_line(result.plan)) is not None:  # what measurement added to the search-only plan
        console.print(line, markup=False, soft_wrap=True)
    if (c := result.plan.calibration) is not None:
        console.print(
            f"calibration: {c.probes} probe timings in {c.seconds:.1f} s on {c.backend}; held-out compute MAPE "
            f"{c.mape_before:.0%} -> {c.mape_after:.0%}",
            markup=False,
        )
    if (a := result.plan.assumptions) is not None:
        console.print(f"access statistics: {a.summary()}", markup=False, soft_wrap=True)
    for table, why in result.plan.layouts.items():  # why each table not kept whole got its layout
        console.print(f"layout: '{table}' {why}", markup=False, soft_wrap=True)
    for fit in result.plan.comm_fits:  # what the plan's exchanges were costed with, and how far to trust it
        console.print(f"comm fit: {fit.describe()}", markup=False, soft_wrap=True)
    if (w := result.plan.world) is not None:  # the world it was planned for (its note is among the warnings)
        console.print(f"planned for {w.describe()}", markup=False, soft_wrap=True)
    show(console, device_table(result.plan, result.inventory))  # memory broken down (weights / optimizer / io)
    if result.diff is not None:
        console.print(f"against --incumbent: {result.diff.summary}", markup=False)
    if result.stats is not None:
        print_stats(result.stats)  # its report ends with the constraints carried, not planned on
    elif result.inventory is not None:
        for line in carried_lines(carried_report(result.inventory)):
            console.print(line, markup=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("plan")(plan)
