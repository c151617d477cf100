"""`dreamshard plan`, `dreamshard evaluate`, `dreamshard compare`."""

from __future__ import annotations

import json
import sys
from contextlib import nullcontext
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from dreamshard.cli.options import (
    BackendOpt,
    BatchOpt,
    DevicesOpt,
    DeviceTypeOpt,
    InventoryOpt,
    JsonOpt,
    MemoryOpt,
    RepeatsOpt,
    RoundsOpt,
    SeedOpt,
    ThreadsOpt,
    WarmupOpt,
    build_oracle,
    make_topology,
)
from dreamshard.errors import InputFileError
from dreamshard.evaluation import (
    compare_sharders,
    comparison_table,
    device_rows,
    device_table,
    evaluate_plan,
    validate_sharders,
    write_comparison_outputs,
)
from dreamshard.io import check_outputs, load_inventory, load_plan, save_plan
from dreamshard.sharders import ALL_SHARDERS, HEURISTICS, get_sharder, learned_options

console = Console()


def _sharder_options(model: Path | None, samples: int, seed: int) -> dict[str, Any]:
    opts: dict[str, Any] = {"seed": seed}
    if model is not None:
        opts["model_dir"] = model
    if samples:
        opts["samples"] = samples
    return opts


def plan(
    inventory: InventoryOpt,
    devices: DevicesOpt,
    memory_gb: MemoryOpt,
    sharder: Annotated[str, typer.Option("--sharder", "-s", help="Sharder name (see `dreamshard sharders`).")] = "dreamshard",
    out: Annotated[Path, typer.Option("--out", "-o", help="Plan JSON to write.")] = Path("plan.json"),
    model: Annotated[Optional[Path], typer.Option("--model", help="DreamShard model dir (default: ./models, else the packaged model).")] = None,
    samples: Annotated[int, typer.Option("--samples", min=0, max=4096, help="dreamshard: sample K placements, keep the best predicted.")] = 0,
    seed: SeedOpt = 0,
    batch_size: BatchOpt = 2048,
    device_type: DeviceTypeOpt = "cpu",
    torchrec_out: Annotated[Optional[Path], typer.Option("--torchrec-out", help="Also write the TorchRec plan file: dreamshard.integrations.torchrec.load_sharding_plan(FILE, model) turns it into TorchRec's ShardingPlan.")] = None,
    torchrec_kernel: Annotated[str, typer.Option("--torchrec-kernel", help="Compute kernel in the TorchRec file: fused or dense (cuda also: fused_uvm, fused_uvm_caching).")] = "fused",
) -> None:
    """Place every table of an inventory on a device with one sharder and write the plan."""
    from dreamshard.integrations.torchrec_file import check_kernel, save_torchrec_plan, torchrec_document

    (name,) = validate_sharders([sharder])
    kernel = check_kernel(torchrec_kernel, device_type)
    check_outputs({"--inventory": inventory, "--model": model}, {"--out": out, "--torchrec-out": torchrec_out})
    inv = load_inventory(inventory)
    topo = make_topology(devices, memory_gb, batch_size, device_type)
    p = get_sharder(name, **_sharder_options(model, samples, seed)).shard(inv, topo)
    torchrec_doc = torchrec_document(p, inv, kernel) if torchrec_out is not None else None
    if torchrec_out is not None and torchrec_out.is_dir():
        raise InputFileError(f"cannot write {torchrec_out}: it is a directory")
    save_plan(p, out)
    if torchrec_out is not None and torchrec_doc is not None:
        save_torchrec_plan(torchrec_doc, torchrec_out)
    console.print(device_table(p))
    console.print(f"wrote {out}")


def evaluate(
    inventory: InventoryOpt,
    plan_file: Annotated[Path, typer.Option("--plan", "-p", help="Plan JSON to measure.")],
    backend: BackendOpt = "cpu",
    warmup: WarmupOpt = 3,
    repeats: RepeatsOpt = 7,
    threads: ThreadsOpt = 1,
    rounds: Annotated[int, typer.Option("--rounds", min=1, max=100, help="Repeat the whole measurement and take medians.")] = 1,
    as_json: JsonOpt = False,
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="Write the plan with measured costs here.")] = None,
) -> None:
    """Measure a plan: per-device fwd compute / fwd comm / bwd comm / bwd compute / memory and overall ms."""
    check_outputs({"--inventory": inventory, "--plan": plan_file}, {"--out": out})
    inv = load_inventory(inventory)
    p = load_plan(plan_file)
    oracle = build_oracle(backend, warmup, repeats, threads)
    with console.status(f"measuring {p.plan_id} on {backend}", spinner="dots") if not as_json else nullcontext():
        measured = evaluate_plan(inv, p, oracle, rounds=rounds)
    if out is not None:
        save_plan(measured, out)
    if as_json:
        assert measured.measured is not None
        payload = {
            "plan_id": measured.plan_id,
            "sharder": measured.sharder,
            "backend": oracle.info.model_dump(mode="json"),
            "overall_ms": measured.measured.overall_ms,
            "per_device": device_rows(measured),
        }
        typer.echo(json.dumps(payload, indent=2))
    else:
        console.print(device_table(measured))
        b = oracle.info
        console.print(f"backend {b.name} ({b.operator}, {b.num_threads} thread(s), warm-up {b.warmup}, repeats {b.repeats})"
                      + (" — SIMULATED, not a measurement" if b.is_simulated else ""))


def compare(
    inventory: InventoryOpt,
    devices: DevicesOpt,
    memory_gb: MemoryOpt,
    sharders: Annotated[str, typer.Option("--sharders", help="Comma-separated sharder names, or 'heuristics' / 'all'.")] = "heuristics",
    rounds: RoundsOpt = 3,
    backend: BackendOpt = "cpu",
    warmup: WarmupOpt = 3,
    repeats: RepeatsOpt = 7,
    threads: ThreadsOpt = 1,
    batch_size: BatchOpt = 2048,
    device_type: DeviceTypeOpt = "cpu",
    model: Annotated[Optional[Path], typer.Option("--model", help="Model dir for the dreamshard sharder.")] = None,
    samples: Annotated[int, typer.Option("--samples", min=0, max=4096)] = 0,
    seed: SeedOpt = 0,
    as_json: JsonOpt = False,
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="Write the full comparison JSON here.")] = None,
    markdown_out: Annotated[Optional[Path], typer.Option("--markdown-out", help="Write a markdown table here.")] = None,
    plot_out: Annotated[Optional[Path], typer.Option("--plot-out", help="Write a PNG of per-device costs here.")] = None,
    plans_dir: Annotated[Optional[Path], typer.Option("--plans-dir", help="Save every contender's plan here.")] = None,
    plan_files: Annotated[Optional[list[Path]], typer.Option("--plan", "-p", help="Also measure this plan (repeatable); `plans publish --comparison` needs its plan in the comparison.")] = None,
) -> None:
    """Plan with several sharders and measure all plans interleaved in one run; ratios to the best and to LB."""
    names = expand_sharders(sharders)
    extra_files = list(plan_files or [])
    outputs: dict[str, Path | None] = {"--out": out, "--markdown-out": markdown_out, "--plot-out": plot_out}
    if plans_dir is not None:
        outputs.update({f"--plans-dir ({n})": plans_dir / f"{n}.json" for n in names})
    check_outputs({"--inventory": inventory, "--model": model, **{f"--plan {p}": p for p in extra_files}}, outputs)
    inv = load_inventory(inventory)
    extra = [load_plan(p) for p in extra_files]
    topo = make_topology(devices, memory_gb, batch_size, device_type)
    oracle = build_oracle(backend, warmup, repeats, threads, seed)
    opts = {**learned_options(**_sharder_options(model, samples, seed)), "random": {"seed": seed}}
    total = len(names) + 1 + rounds * (len(names) + len(extra))
    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=Console(stderr=True), disable=as_json or not sys.stderr.isatty(), transient=True,
    ) as bar:
        task = bar.add_task("comparing", total=total)

        def tick(msg: str) -> None:
            bar.update(task, description=msg, advance=1)

        cmp = compare_sharders(inv, topo, names, oracle, rounds=rounds, sharder_options=opts, progress=tick, seed=seed,
                               extra_plans=extra)
    write_comparison_outputs(cmp, json_path=out, markdown_path=markdown_out, plot_path=plot_out, plans_dir=plans_dir)
    if as_json:
        summary = cmp.summary()
        summary["results"] = [
            {
                "sharder": r.sharder,
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
    """'heuristics' -> the six heuristics; 'all' -> heuristics + torchrec + dreamshard; else a comma list."""
    parts: list[str] = []
    for item in spec.split(","):
        item = item.strip()
        if item == "heuristics":
            parts += list(HEURISTICS)
        elif item == "all":
            parts += list(ALL_SHARDERS)
        elif item:
            parts.append(item)
    return validate_sharders(parts)


def sharders_list() -> None:
    """List the available sharders."""
    from dreamshard.sharders import sharder_names

    for n in sharder_names():
        typer.echo(n)


def register(app: typer.Typer) -> None:
    app.command("plan")(plan)
    app.command("evaluate")(evaluate)
    app.command("compare")(compare)
    app.command("sharders")(sharders_list)
