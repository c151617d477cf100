"""`dreamshard profile` (an inventory's placements measured into a JSONL file, resumable) and
`dreamshard profile-stage` (the DVC stage: batches -> shards -> merged): dreamshard.usecases.profile."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table as RichTable

from dreamshard.cli.options import (
    MAX_REPEATS,
    MAX_SEED,
    MAX_THREADS,
    BackendOverride,
    BatchOverride,
    CorpusOpt,
    DevicesOverride,
    MemoryOverride,
    ParamsOpt,
)
from dreamshard.config.job import MAX_DEVICES
from dreamshard.config.settings import resolve
from dreamshard.documents import read_checked_inventory
from dreamshard.errors import ConfigError
from dreamshard.lazy import lazy_module
from dreamshard.values import MAX_ROWS

# the use cases import torch: each loads when a command uses it (dreamshard/lazy.py)
if TYPE_CHECKING:  # pragma: no cover
    from dreamshard.usecases import comm_fits as comm_fits_uc
    from dreamshard.usecases import profile as profile_uc
else:
    profile_uc = lazy_module("dreamshard.usecases.profile")
    comm_fits_uc = lazy_module("dreamshard.usecases.comm_fits")

console = Console(highlight=False, soft_wrap=True)


def profile(
    ctx: typer.Context,
    inventory: Annotated[Path | None, typer.Option("--inventory", "-i", help="Inventory file (YAML or JSON).")] = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Measurements JSONL (appended; reruns resume).")
    ] = None,
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
    """Measure single-table costs and K random feasible placements (real timing; resumes an existing file).
    `dreamshard profile comm`: the collective fits and their quality."""
    if ctx.invoked_subcommand is not None:
        return
    if inventory is None or output is None:
        raise ConfigError("dreamshard profile needs --inventory and --output (or the subcommand: comm)")
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
    inputs = {"--tasks": tasks, "--params": settings.source}
    result = profile_uc.run(
        profile_uc.ProfileRequest(
            settings=settings,
            inventory=read_checked_inventory(inputs, inventory, {"--output": output}),
            out=output,
            tasks=tasks,
            refit_comm=refit_comm,
            progress=progress and console.is_terminal,
            corpus=corpus,
        )
    )
    for m in result.refit:
        console.print(f"comm fit (N={m.world_size}): {m.describe()}", markup=False)
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
        console.print(f"comm: {m.describe()}", markup=False)
    if result.corpus:
        console.print(
            "corpus: {device_timings_measured} device timings measured, {device_timings_reused} reused "
            "({corpus_size} in the corpus)".format(**result.corpus),
            markup=False,
        )


def comm_fits(
    show: Annotated[bool, typer.Option("--show/--no-show", help="Print the fits, their points and quality.")] = True,
    refit: Annotated[
        bool, typer.Option("--refit", help="Measure every collective again first (at most one rank per core).")
    ] = False,
    devices: Annotated[
        list[int] | None,
        typer.Option("--devices", "-n", min=2, max=MAX_DEVICES, help="A world to show derived fits for (repeatable)."),
    ] = None,
    backend: Annotated[str, typer.Option("--backend", help="Process group: gloo (CPU) or nccl (GPUs).")] = "gloo",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
) -> None:
    """The collective fits this machine has cached: points, r2, monotonicity, held-out error, ranks and cores,
    date, machine, and whether planning reuses each or measures it again (and why)."""
    if backend not in ("gloo", "nccl"):
        raise ConfigError(f"--backend must be gloo or nccl, got '{backend}'")
    result = comm_fits_uc.run(comm_fits_uc.CommFitsRequest(devices=tuple(devices or ()), refit=refit, backend=backend))
    if as_json:
        typer.echo(json.dumps([_fit_json(r) for r in result.rows], indent=2))
        return
    if not result.rows:
        console.print(f"no {backend} fits cached in {result.cache_dir}: the first plan measures them", markup=False)
        return
    if show:
        for row in result.rows:
            _print_fit(row)


def _fit_json(row: comm_fits_uc.CommFitRow) -> dict[str, object]:
    return {
        "file": str(row.path),
        "model": row.model.model_dump(mode="json") if row.model is not None else None,
        "reused_by_planning": not row.refit_reason,
        "refit_reason": row.refit_reason or None,
        "derived": [d.model_dump(mode="json") for d in row.derived],
    }


def _print_fit(row: comm_fits_uc.CommFitRow) -> None:
    m = row.model
    status = "reused by planning" if not row.refit_reason else f"measured again on next use: {row.refit_reason}"
    if not row.refit_reason and m is not None and m.fallback:
        status = "reused by planning as a labelled fallback for an hour after it was measured, then measured again"
    if m is None:
        console.print(f"{row.path.name}: {status}", markup=False)
        return
    console.print(f"{m.describe()}\n  {status}", markup=False, soft_wrap=True)
    q = m.quality
    if q is not None:
        held = q.held_out
        console.print(
            f"  measured {q.measured_at:%Y-%m-%d %H:%M} UTC on {q.machine}; {q.repeats} repeats, {q.attempts} "
            f"benchmark(s); per-peer {m.per_peer_ms:.3f} ms"
            + (
                f"; held-out {held.megabytes:.3f} MB: {held.measured_ms:.3f} ms measured, {held.predicted_ms:.3f} "
                f"predicted"
                if held is not None
                else ""
            ),
            markup=False,
            soft_wrap=True,
        )
    table = RichTable("MB", "ms measured", "ms fitted", box=None, pad_edge=False)
    for mb, ms in m.points:
        table.add_row(f"{mb:.4f}", f"{ms:.3f}", f"{m.alpha_ms + m.beta_ms_per_mb * mb:.3f}")
    console.print(table)
    for d in row.derived:
        console.print(f"  for {d.world_size} devices: {d.alpha_ms:.3f} ms + {d.beta_ms_per_mb:.3f} ms/MB", markup=False)


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
    settings = resolve(params)
    inputs = {"--tasks": tasks, "--params": settings.source}
    result = profile_uc.run_batched(
        profile_uc.BatchedProfileRequest(
            settings=settings,
            inventory=read_checked_inventory(inputs, inventory, {"--output": out}),
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
    """Add `dreamshard profile` (with its subcommand `comm`) and `dreamshard profile-stage` to the main app."""
    profile_app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    profile_app.callback(invoke_without_command=True)(profile)
    profile_app.command("comm")(comm_fits)
    app.add_typer(profile_app, name="profile")
    app.command("profile-stage")(profile_stage)
