"""`dreamshard plan`: parse the options into a use-case request (dreamshard.usecases.plan), run it, render the
result."""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console, Group
from rich.table import Table as RichTable
from rich.text import Text

from dreamshard.cli.explain_cmd import print_reasons, print_stats
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
    host_overrides,
    memory_overrides,
)
from dreamshard.config.settings import resolve
from dreamshard.documents import check_outputs, load_inventory
from dreamshard.evaluation import device_table, validate_sharders
from dreamshard.lazy import lazy_module
from dreamshard.pipeline.incumbent import load_incumbent
from dreamshard.placement.diff import plan_diff
from dreamshard.values import Verification

# the use cases import torch: each loads when a command uses it (dreamshard/lazy.py)
if TYPE_CHECKING:  # pragma: no cover
    from dreamshard.search.candidates import SearchResult
    from dreamshard.usecases import evaluate as evaluate_uc
    from dreamshard.usecases import explain as explain_uc
    from dreamshard.usecases import plan as plan_uc
else:
    evaluate_uc = lazy_module("dreamshard.usecases.evaluate")
    explain_uc = lazy_module("dreamshard.usecases.explain")
    plan_uc = lazy_module("dreamshard.usecases.plan")

console = Console()
err_console = Console(stderr=True, highlight=False)


def warn(lines: Any, what: str | None = None) -> None:
    for line in lines:
        err_console.print(f"warning: {what + ': ' if what else ''}{line}", markup=False, soft_wrap=True)


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
    t = RichTable(
        title=f"verified on {v.backend.name} (up to {v.rounds} interleaved rounds; a challenger that "
        f"loses a round to the best predicted is measured no more)",
        title_style="bold",
    )
    for col in ("source", "predicted ms", "measured ms", "spread", "rounds"):
        t.add_column(col, justify="left" if col == "source" else "right")
    for c in v.candidates:
        mark = " (kept)" if c.source == v.chosen else ""
        t.add_row(
            c.source + mark,
            f"{c.predicted_ms:.3f}",
            f"{c.measured_ms:.3f}",
            f"{c.spread:.1%}",
            str(c.rounds or v.rounds),
        )
    return t


def plan(
    inventory: InventoryOpt,
    devices: DevicesOverride = None,
    memory_gb: MemoryOverride = None,
    sharder: Annotated[
        str, typer.Option("--sharder", "-s", help="Sharder name (see `dreamshard sharders`).")
    ] = "dreamshard",
    out: Annotated[Path, typer.Option("--out", "-o", help="Plan JSON to write.")] = Path("plan.json"),
    model: ModelOpt = None,
    samples: Annotated[
        int | None,
        typer.Option(
            "--samples",
            min=0,
            max=4096,
            help="Learned sharders: sampled policy rollouts besides the argmax (plan.samples; default 4).",
        ),
    ] = None,
    risk: Annotated[
        float | None,
        typer.Option(
            "--risk",
            min=0.0,
            max=10.0,
            help="Learned sharders: plan on ensemble mean + RISK x spread (plan.risk; default 1).",
        ),
    ] = None,
    verify: Annotated[
        int | None,
        typer.Option(
            "--verify",
            min=0,
            max=64,
            help="dreamshard: measure the K best candidates on --backend, keep the best predicted unless another is faster in every round (plan.verify; default 0).",
        ),
    ] = None,
    verify_rounds: Annotated[
        int | None,
        typer.Option(
            "--verify-rounds",
            min=1,
            max=100,
            help="Interleaved rounds per verified candidate (plan.verify_rounds; default 3).",
        ),
    ] = None,
    verify_anchors: Annotated[
        int | None,
        typer.Option(
            "--verify-anchors",
            min=0,
            max=16,
            help="With --verify: also measure this many of the baselines' own plans (best predicted first) when none of the K is one (plan.verify_anchors; default 2).",
        ),
    ] = None,
    verify_confidence: Annotated[
        float | None,
        typer.Option(
            "--verify-confidence",
            min=0.5,
            max=0.9999,
            help="With --verify and --incumbent: another candidate replaces the current plan's only after enough straight paired wins that chance alone would explain them less often than 1 - this (plan.verify_confidence; default 0.95: 6-7 rounds).",
        ),
    ] = None,
    backend: BackendOverride = None,
    warmup: WarmupOverride = None,
    repeats: RepeatsOverride = None,
    threads: ThreadsOverride = None,
    params: ParamsOpt = None,
    seed: SeedOpt = 0,
    batch_size: BatchOverride = None,
    device_type: DeviceTypeOverride = None,
    interconnect: InterconnectOverride = None,
    explain: Annotated[
        bool,
        typer.Option(
            "--explain",
            help="dreamshard: print the scored candidates of the search, and for each device why its units are there (fixed by their sharding type, held by memory, or the predicted cost of moving them).",
        ),
    ] = False,
    stats: Annotated[
        bool,
        typer.Option(
            "--stats",
            help="Print the stats report: each unit's share of its device, the units that set the maximum, imbalance, input/output MB per device (predicted; measured beside where measured).",
        ),
    ] = False,
    refine_seconds: Annotated[
        float | None,
        typer.Option(
            "--refine-seconds",
            min=0.0,
            max=86_400.0,
            help="dreamshard: measured refinement of the kept plan on --backend for this long: moves and swaps off the bottleneck, ranked by predicted gain, each measured on the two devices it changes against the incumbent's; kept only when confirmed beyond the noise (plan.refine_seconds; default 0 = off).",
        ),
    ] = None,
    corpus: CorpusOpt = None,
    torchrec_out: Annotated[
        Path | None,
        typer.Option(
            "--torchrec-out",
            help="Also write the TorchRec plan file: dreamshard.integrations.torchrec.load_sharding_plan(FILE, model) turns it into TorchRec's ShardingPlan.",
        ),
    ] = None,
    torchrec_kernel: Annotated[
        str,
        typer.Option(
            "--torchrec-kernel",
            help="Compute kernel in the TorchRec file: fused or dense (cuda also: fused_uvm, fused_uvm_caching).",
        ),
    ] = "fused",
    hosts: HostsOverride = None,
    devices_per_host: DevicesPerHostOverride = None,
    optimizer: OptimizerOverride = None,
    memory_model: MemoryModelOverride = None,
    memory_reserve: MemoryReserveOverride = None,
    types: Annotated[
        str | None,
        typer.Option(
            "--types",
            help="dreamshard: sharding types the search may give a whole table besides table-wise and column-wise, comma-separated: row_wise, table_row_wise, data_parallel; converted where the learned cost says it pays (plan.types; default none).",
        ),
    ] = None,
    incumbent: Annotated[
        Path | None,
        typer.Option(
            "--incumbent",
            help="dreamshard: the plan the job runs now (e.g. the last version's): adapted to this inventory (its units keep their devices, new tables inserted where predicted lowest) it is a search candidate, `current`; the new plan's moves against it are shown. An incumbent file (`plans incumbent`) that says no plan was current means none.",
        ),
    ] = None,
) -> None:
    """Place every table of an inventory on a device with one sharder and write the plan."""
    (name,) = validate_sharders([sharder])
    if incumbent is not None:
        plan_uc.require_searching(name, "--incumbent")
        check_outputs({"--incumbent": incumbent}, {"--out": out, "--torchrec-out": torchrec_out})
    if verify:
        plan_uc.require_searching(name, "--verify")
    if refine_seconds:
        plan_uc.require_searching(name, "--refine-seconds")
    if types:
        plan_uc.require_searching(name, "--types")
    settings = resolve(
        params,
        {
            "plan.refine_seconds": refine_seconds,
            **host_overrides(devices, hosts, devices_per_host),
            "plan.types": [t.strip() for t in types.split(",") if t.strip()] if types is not None else None,
            **memory_overrides(optimizer, memory_model, memory_reserve),
            "topology.memory_per_device_gb": memory_gb,
            "topology.batch_size": batch_size,
            "topology.device_type": device_type,
            "topology.interconnect": interconnect,
            "plan.samples": samples,
            "plan.risk": risk,
            "plan.verify": verify,
            "plan.verify_rounds": verify_rounds,
            "plan.verify_anchors": verify_anchors,
            "plan.verify_confidence": verify_confidence,
            "profile.backend": backend,
            "profile.warmup": warmup,
            "profile.repeats": repeats,
            "profile.num_threads": threads,
        },
    )
    request = plan_uc.PlanRequest(
        settings=settings,
        inventory=inventory,
        out=out,
        sharder=name,
        model=model,
        seed=seed,
        torchrec_out=torchrec_out,
        torchrec_kernel=torchrec_kernel,
        corpus=corpus,
        incumbent=load_incumbent(incumbent) if incumbent is not None else None,
    )
    searching = name == plan_uc.SEARCHING_SHARDER
    n_verify = settings.plan.verify if searching else 0
    n_refine = settings.plan.refine_seconds if searching else 0.0
    doing = ([f"measuring the {n_verify} best candidates"] if n_verify else []) + (
        [f"refining for {n_refine:g} s"] if n_refine else []
    )
    status = (
        console.status(f"{' then '.join(doing)} on {settings.profile.backend}", spinner="dots")
        if doing
        else nullcontext()
    )
    with status:
        result = plan_uc.run(request)
    warn(result.warnings)
    if explain and result.search is None:
        warn([f"'{name}' does not search (--sharder dreamshard does)"], "--explain ignored")
    if explain and result.search is not None:
        console.print(_search_table(result.search))
        print_reasons(explain_uc.reasons_of(load_inventory(inventory), result.plan, model))
    if result.plan.verification is not None:
        console.print(verification_table(result.plan.verification))
    if (r := result.plan.refinement) is not None:
        console.print(
            f"refinement: {r.tried} proposal(s) measured in {r.seconds:.1f} s ({r.device_timings} device "
            f"timings, {r.tried / r.seconds if r.seconds else 0:.2f} proposals/s), {r.kept} kept; bottleneck "
            f"{r.initial_ms:.3f} -> {r.final_ms:.3f} ms measured ({r.measured_gain:+.1%})",
            markup=False,
        )
    inv = load_inventory(inventory)  # memory recomputed and broken down (weights / optimizer / io)
    console.print(device_table(result.plan, inv))
    if request.incumbent is not None:
        console.print(f"against --incumbent: {plan_diff(request.incumbent, result.plan, inv).summary}", markup=False)
    if stats:
        print_stats(explain_uc.stats_of(inv, result.plan, model))
    console.print(f"wrote {out}")


def register(app: typer.Typer) -> None:
    app.command("plan")(plan)
