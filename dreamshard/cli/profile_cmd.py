"""`dreamshard profile`: measure single-table costs and random placements into a JSONL file (resumable)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from dreamshard.cli.options import (
    MAX_REPEATS,
    MAX_SEED,
    MAX_THREADS,
    DevicesOpt,
    InventoryOpt,
    MemoryOpt,
    make_topology,
)
from dreamshard.types import MAX_BATCH, MAX_ROWS

console = Console(highlight=False, soft_wrap=True)


def profile(
    inventory: InventoryOpt,
    devices: DevicesOpt,
    memory_gb: MemoryOpt,
    output: Annotated[Path, typer.Option("--output", "-o", help="Measurements JSONL (appended; reruns resume).")],
    num_placements: Annotated[
        Optional[int], typer.Option("--num-placements", "-k", min=0, max=100_000, help="Random feasible placements (per train task).")
    ] = None,
    backend: Annotated[Optional[str], typer.Option("--backend", help="cpu (default), cuda or simulator.")] = None,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, max=MAX_BATCH, help="Global batch size.")] = 2048,
    warmup: Annotated[Optional[int], typer.Option("--warmup", min=0, max=MAX_REPEATS, help="Warm-up iterations per device.")] = None,
    repeats: Annotated[Optional[int], typer.Option("--repeats", min=1, max=MAX_REPEATS, help="Timed repeats (median).")] = None,
    threads: Annotated[Optional[int], typer.Option("--threads", min=1, max=MAX_THREADS, help="Intra-op threads (pinned).")] = None,
    seed: Annotated[Optional[int], typer.Option("--seed", min=0, max=MAX_SEED, help="Seed for placements and indices.")] = None,
    row_cap: Annotated[Optional[int], typer.Option("--row-cap", min=1, max=MAX_ROWS, help="Profile at most this many rows per table.")] = None,
    tasks: Annotated[Optional[Path], typer.Option("--tasks", help="TaskSet file: profile each train task.")] = None,
    refit_comm: Annotated[bool, typer.Option("--refit-comm", help="Re-run the all-to-all benchmark (ignore cache).")] = False,
    params: Annotated[Optional[Path], typer.Option("--params", help="params.yaml: defaults from its `profile` section.")] = None,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="Show a progress bar.")] = True,
) -> None:
    """Measure single-table costs and K random feasible placements (real timing; resumes an existing file)."""
    from dreamshard.config import load_section
    from dreamshard.io import check_outputs, load_inventory
    from dreamshard.profiling import ProfileConfig, profile_inventory

    check_outputs({"--inventory": inventory, "--tasks": tasks, "--params": params}, {"--output": output})
    cfg = load_section(params, "profile", ProfileConfig)
    flags = {
        "backend": backend, "num_placements": num_placements, "warmup": warmup, "repeats": repeats,
        "num_threads": threads, "seed": seed, "row_cap": row_cap,
    }
    cfg = ProfileConfig.model_validate({**cfg.model_dump(), **{k: v for k, v in flags.items() if v is not None}})
    inv = load_inventory(inventory)
    device_type = "cuda" if cfg.backend == "cuda" else "cpu"
    topology = make_topology(devices, memory_gb, batch_size, device_type)
    taskset = None
    if tasks is not None:
        from dreamshard.learning.tasks import load_taskset

        taskset = load_taskset(tasks)
    oracle = cfg.oracle()
    try:
        if refit_comm:
            sizes = {topology.num_devices} | ({t.num_devices for t in taskset.train} if taskset else set())
            for n in sorted(sizes):
                m = oracle.comm_model(topology.model_copy(update={"num_devices": n}), refit=True)
                console.print(f"comm fit (N={n}): {_comm_line(m)}")
        summary = profile_inventory(
            inv, topology, cfg.num_placements, output, oracle, seed=cfg.seed, tasks=taskset,
            progress=progress and console.is_terminal, kinds=cfg.kinds,
        )
    finally:
        oracle.close()
    info = summary.backend
    label = "  [SIMULATED: analytic model, not a measurement]" if info.is_simulated else ""
    console.print(
        f"profiled {summary.planned} items -> {summary.out_path}: measured {summary.measured}, "
        f"resumed (already present) {summary.skipped}, wall {summary.wall_s:.1f} s",
        markup=False,
    )
    console.print(
        f"backend {info.name}, operator {info.operator}, device {info.device}, threads {info.num_threads}, "
        f"batch {info.batch_size}, warmup {info.warmup}, repeats {info.repeats}"
        + (f", row cap {info.row_cap}" if info.row_cap else "") + label,
        markup=False,
    )
    for m in summary.comm_models:
        console.print(f"comm: {_comm_line(m)}", markup=False)


def _comm_line(m: object) -> str:
    from dreamshard.types import CommModel

    assert isinstance(m, CommModel)
    r2 = f", r2 {m.r2:.3f}" if m.r2 is not None else ""
    return f"{m.backend} alpha {m.alpha_ms:.3f} ms + beta {m.beta_ms_per_mb:.3f} ms/MB (world {m.world_size}{r2})"


def register(app: typer.Typer) -> None:
    """Add `dreamshard profile` to the main app."""
    app.command("profile")(profile)
