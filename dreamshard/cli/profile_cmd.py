"""`dreamshard profile` (an inventory's placements measured into a JSONL file, resumable) and
`dreamshard profile-stage` (the DVC stage: batches -> shards -> merged): dreamshard.usecases.profile."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from dreamshard.cli.options import (
    MAX_REPEATS,
    MAX_SEED,
    MAX_THREADS,
    BackendOverride,
    BatchOverride,
    CorpusOpt,
    DevicesOverride,
    InventoryOpt,
    MemoryOverride,
    ParamsOpt,
)
from dreamshard.config.settings import resolve
from dreamshard.errors import ConfigError
from dreamshard.lazy import lazy_module
from dreamshard.values import MAX_ROWS, CommModel

# the use cases import torch: each loads when a command uses it (dreamshard/lazy.py)
if TYPE_CHECKING:  # pragma: no cover
    from dreamshard.usecases import profile as profile_uc
else:
    profile_uc = lazy_module("dreamshard.usecases.profile")

console = Console(highlight=False, soft_wrap=True)


def profile(
    inventory: InventoryOpt,
    output: Annotated[Path, typer.Option("--output", "-o", help="Measurements JSONL (appended; reruns resume).")],
    devices: DevicesOverride = None,
    memory_gb: MemoryOverride = None,
    num_placements: Annotated[
        int | None,
        typer.Option(
            "--num-placements",
            "-k",
            min=0,
            max=100_000,
            help="Random feasible placements per train task (profile.num_placements; default 4).",
        ),
    ] = None,
    backend: BackendOverride = None,
    batch_size: BatchOverride = None,
    warmup: Annotated[
        int | None,
        typer.Option(
            "--warmup", min=0, max=MAX_REPEATS, help="Warm-up iterations per device (profile.warmup; default 3)."
        ),
    ] = None,
    repeats: Annotated[
        int | None,
        typer.Option("--repeats", min=1, max=MAX_REPEATS, help="Timed repeats, median (profile.repeats; default 7)."),
    ] = None,
    threads: Annotated[
        int | None,
        typer.Option(
            "--threads", min=1, max=MAX_THREADS, help="Intra-op threads, pinned (profile.num_threads; default 1)."
        ),
    ] = None,
    seed: Annotated[
        int | None,
        typer.Option("--seed", min=0, max=MAX_SEED, help="Seed for placements and indices (profile.seed; default 0)."),
    ] = None,
    row_cap: Annotated[
        int | None,
        typer.Option(
            "--row-cap", min=1, max=MAX_ROWS, help="Profile at most this many rows per table (profile.row_cap)."
        ),
    ] = None,
    kinds: Annotated[
        str | None,
        typer.Option(
            "--kinds",
            help="Extra placements per task, comma-separated: sharder names (heuristics, torchrec), crowded, "
            "row_wise, data_parallel; '' for none (profile.kinds).",
        ),
    ] = None,
    tasks: Annotated[Path | None, typer.Option("--tasks", help="TaskSet file: profile each train task.")] = None,
    refit_comm: Annotated[
        bool, typer.Option("--refit-comm", help="Re-run the all-to-all benchmark (ignore cache).")
    ] = False,
    params: ParamsOpt = None,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="Show a progress bar.")] = True,
    corpus: CorpusOpt = None,
) -> None:
    """Measure single-table costs and K random feasible placements (real timing; resumes an existing file)."""
    settings = resolve(
        params,
        {
            "plan.num_devices": devices,
            "topology.memory_per_device_gb": memory_gb,
            "topology.batch_size": batch_size,
            "profile.backend": backend,
            "profile.num_placements": num_placements,
            "profile.warmup": warmup,
            "profile.repeats": repeats,
            "profile.num_threads": threads,
            "profile.seed": seed,
            "profile.row_cap": row_cap,
            "profile.kinds": None if kinds is None else tuple(k.strip() for k in kinds.split(",") if k.strip()),
        },
    )
    result = profile_uc.run(
        profile_uc.ProfileRequest(
            settings=settings,
            inventory=inventory,
            out=output,
            tasks=tasks,
            refit_comm=refit_comm,
            progress=progress and console.is_terminal,
            corpus=corpus,
        )
    )
    for m in result.refit:
        console.print(f"comm fit (N={m.world_size}): {_comm_line(m)}", markup=False)
    summary = result.summary
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
        + (f", row cap {info.row_cap}" if info.row_cap else "")
        + label,
        markup=False,
    )
    for m in summary.comm_models:
        console.print(f"comm: {_comm_line(m)}", markup=False)
    if result.corpus:
        console.print(
            "corpus: {device_timings_measured} device timings measured, {device_timings_reused} reused "
            "({corpus_size} in the corpus)".format(**result.corpus),
            markup=False,
        )


def _comm_line(m: CommModel) -> str:
    r2 = f", r2 {m.r2:.3f}" if m.r2 is not None else ""
    return f"{m.backend} alpha {m.alpha_ms:.3f} ms + beta {m.beta_ms_per_mb:.3f} ms/MB (world {m.world_size}{r2})"


def profile_stage(
    inventory: Annotated[Path, typer.Option("--inventory", "-i", help="The validated inventory.")],
    tasks: Annotated[Path, typer.Option("--tasks", help="TaskSet from `dreamshard tasks`.")],
    out: Annotated[Path, typer.Option("--output", "-o", help="Merged measurements (JSONL).")],
    params: ParamsOpt = None,
    store: Annotated[
        str | None,
        typer.Option(
            "--store",
            envvar="DREAMSHARD_PROFILE_STORE",
            help="Where batch specs and shards go: directory or s3://bucket/prefix (default: a temporary "
            "directory, removed after the merge).",
        ),
    ] = None,
    endpoint_url: Annotated[
        str | None,
        typer.Option("--endpoint-url", envvar="DREAMSHARD_PROFILE_ENDPOINT", help="S3 endpoint of --store."),
    ] = None,
    campaign: Annotated[
        str | None,
        typer.Option(
            "--campaign",
            envvar="DREAMSHARD_PROFILE_CAMPAIGN",
            help="Shards of one campaign are reused (resume); default: a fresh one.",
        ),
    ] = None,
    dispatch: Annotated[
        str,
        typer.Option(
            "--dispatch",
            envvar="DREAMSHARD_PROFILE_DISPATCH",
            help="local (this process) or workers (runs of the profile-batch deployment; needs the flows).",
        ),
    ] = "local",
    parent_task_run: Annotated[
        str | None, typer.Option("--parent-task-run", envvar="DREAMSHARD_PARENT_TASK_RUN_ID", hidden=True)
    ] = None,
    corpus: CorpusOpt = None,
) -> None:
    """DVC stage `profile`: plan the measurements in batches, measure each batch into one shard (here or on the
    gpu work pool's workers), merge the shards in planned order."""
    if dispatch not in ("local", "workers"):
        raise ConfigError(f"--dispatch must be local or workers, got '{dispatch}'")
    result = profile_uc.run_batched(
        profile_uc.BatchedProfileRequest(
            settings=resolve(params),
            inventory=inventory,
            tasks=tasks,
            out=out,
            store_uri=store,
            endpoint_url=endpoint_url,
            campaign=campaign,
            dispatch=dispatch,  # type: ignore[arg-type]
            parent_task_run=parent_task_run,
            corpus=corpus,
        ),
        log=typer.echo,
    )
    typer.echo(f"wrote {out}: {result.merge.records} measurements from {result.merge.batches} batches")


def register(app: typer.Typer) -> None:
    """Add `dreamshard profile` and `dreamshard profile-stage` to the main app."""
    app.command("profile")(profile)
    app.command("profile-stage")(profile_stage)
