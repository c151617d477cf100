"""Measurements: an inventory's placements measured in this process (`dreamshard profile`), or the batched
profile stage (`dreamshard profile-stage`: batches -> one shard each -> merged in planned order).

Batches run in this process, or on workers: `dispatch="workers"` hands them to the dispatcher registered under
the `dreamshard.dispatchers` entry point group (the Prefect flows register `workers`: one run of the
profile-batch deployment per batch), so this library never imports Prefect.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Callable, Sequence
from importlib.metadata import entry_points
from pathlib import Path
from typing import Literal

from dreamshard.config.stages import PipelineSettings
from dreamshard.documents import check_outputs, load_inventory
from dreamshard.errors import ConfigError
from dreamshard.inventory.draws import draw
from dreamshard.learning.taskset import load_taskset
from dreamshard.placement.expand import unit_table
from dreamshard.profiling import ProfileSummary, profile_inventory
from dreamshard.profiling.batches import (
    BatchSpec,
    MergeSummary,
    ProfileJob,
    ProfileShard,
    WorkerInfo,
    merge_shards,
    plan_batches,
    read_shard,
    read_spec,
    run_batch,
    write_shard,
    write_spec,
)
from dreamshard.profiling.corpus import WORKERS_WRITER, DeviceCorpus, device_key, entry_problem
from dreamshard.profiling.oracle import fused_operators
from dreamshard.store import open_store
from dreamshard.store.base import PlanStore
from dreamshard.usecases.base import Request, Result
from dreamshard.values import BackendInfo, CommModel

DISPATCHER_GROUP = "dreamshard.dispatchers"
CORPUS_WRITER = "profile"  # this use case's file in the corpus directory
Log = Callable[[str], None]


class ProfileRequest(Request):
    """Single-table costs and random feasible placements of an inventory (or of each train task) -> JSONL."""

    inventory: Path
    out: Path
    tasks: Path | None = None
    num_devices: int | None = None  # default: the published plan's (settings.plan_devices)
    refit_comm: bool = False
    progress: bool = False
    corpus: Path | None = None  # the measurement corpus: device timings reused from it and added to it


class ProfileResult(Result):
    summary: ProfileSummary
    refit: list[CommModel] = []
    corpus: dict[str, int] = {}


def run(request: ProfileRequest) -> ProfileResult:
    s = request.settings
    check_outputs(
        {"--inventory": request.inventory, "--tasks": request.tasks, "--params": s.source}, {"--output": request.out}
    )
    inv = load_inventory(request.inventory)
    topology = s.topology_for(request.num_devices)
    topology = topology.model_copy(update={"device_type": "cuda" if s.profile.backend == "cuda" else "cpu"})
    taskset = load_taskset(request.tasks) if request.tasks is not None else None
    refit: list[CommModel] = []
    oracle = s.oracle()
    oracle.corpus = DeviceCorpus(request.corpus, CORPUS_WRITER) if request.corpus is not None else None
    try:
        if request.refit_comm:
            sizes = {topology.num_devices} | ({t.num_devices for t in taskset.train} if taskset else set())
            refit = [
                oracle.comm_model(topology.model_copy(update={"num_devices": n}), refit=True) for n in sorted(sizes)
            ]
        summary = profile_inventory(
            inv,
            topology,
            s.profile.num_placements,
            request.out,
            oracle,
            seed=s.profile.seed,
            tasks=taskset,
            progress=request.progress,
            kinds=s.profile.kinds,
        )
    finally:
        oracle.close()
    return ProfileResult(summary=summary, refit=refit, corpus=oracle.corpus.stats() if oracle.corpus else {})


class BatchedProfileRequest(Request):
    """The profile stage: the train tasks' planned measurements in batches of pipeline.items_per_batch."""

    inventory: Path
    tasks: Path
    out: Path
    store_uri: str | None = None  # batch specs and shards; None: a scratch directory removed after the merge
    endpoint_url: str | None = None
    campaign: str | None = None  # shards of one campaign are reused (resume); None: a fresh campaign
    dispatch: Literal["local", "workers"] = "local"
    parent_task_run: str | None = None
    corpus: Path | None = None  # the measurement corpus (workers: their timings are added to it after the merge)


class BatchedProfileResult(Result):
    merge: MergeSummary
    batches: int
    ran: int
    campaign: str
    corpus: dict[str, int] = {}


def _missing_devices(
    job: ProfileJob, corpus: DeviceCorpus, info_at: Callable[[int], BackendInfo], seed: int, hardware: str | None
) -> dict[str, int]:
    """Per train task, how many of its placements' devices the corpus held no timing of before this version."""
    missing: dict[str, int] = {}
    by_name = job.inventory.by_name()
    fp = job.inventory.fingerprint()
    for it in job.items():
        if it.kind != "placement":
            continue
        for d in range(it.topology.num_devices):
            tables = [unit_table(by_name, n) for n, dev in it.placement.items() if dev == d]
            # keyed as the oracle records them: one entry per fused operator (replicas apart, at their batch share)
            if any(
                not corpus.known_before(device_key(info_at(batch), seed, group, hardware), fp)
                for group, batch in fused_operators(tables, it.topology)
            ):
                missing[it.task] = missing.get(it.task, 0) + 1
    return missing


def limit_new_tasks(job: ProfileJob, corpus: DeviceCorpus, log: Log = print, workers: bool = False) -> ProfileJob:
    """`job` with at most `profile.incremental_tasks` of the train tasks whose placements need device timings
    the corpus lacks, once the corpus serves at least one task entirely (a new version of a known inventory;
    with nothing served, a first run, every task is kept). The kept ones are chosen by per-task draws, so the
    same change keeps the same tasks. `workers`: the timings count when the profiling workers made them (the
    hardware of the last timings they sent back for this backend; none yet: every task is new)."""
    limit = job.profile.incremental_tasks  # decided on what the corpus held before this version: reruns agree
    if limit is None or job.tasks is None:
        return job
    if workers:
        if job.profile.backend not in corpus.worker_backend:
            return job  # the workers sent nothing back for this backend yet: every task is new
        hardware, worker = corpus.worker_backend[job.profile.backend]
        pr = job.profile  # the workers' device and operator, this run's settings
        base = worker.model_copy(
            update={"warmup": pr.warmup, "repeats": pr.repeats, "num_threads": pr.num_threads, "row_cap": pr.row_cap}
        )
        missing = _missing_devices(job, corpus, lambda b: base.model_copy(update={"batch_size": b}), pr.seed, hardware)
    else:
        oracle = job.profile.oracle()
        try:
            missing = _missing_devices(job, corpus, oracle.backend_info, oracle.seed, None)
        finally:
            oracle.close()
    new = [t for t in job.tasks.train if missing.get(t.name)]
    if len(new) <= limit or len(new) == len(job.tasks.train):
        return job
    keep = set(sorted((t.name for t in new), key=lambda n: draw(job.profile.seed, "incremental", n))[:limit])
    train = tuple(t for t in job.tasks.train if t.name in keep or not missing.get(t.name))
    log(
        f"corpus: {len(new)} of {len(job.tasks.train)} train tasks need new device timings; measuring "
        f"{limit} of them (profile.incremental_tasks)"
    )
    return job.model_copy(update={"tasks": job.tasks.model_copy(update={"train": train})})


def plan_stage_batches(
    request: BatchedProfileRequest, campaign: str, corpus: DeviceCorpus | None = None, log: Log = print
) -> list[BatchSpec]:
    """The stage's batches (same files, settings and corpus -> same batches and shard keys)."""
    s = request.settings
    job = ProfileJob(
        inventory=load_inventory(request.inventory),
        tasks=load_taskset(request.tasks),
        topology=s.topology_for(s.tasks.train_devices),
        profile=s.profile,
    )
    if corpus is not None:
        job = limit_new_tasks(job, corpus, log, workers=request.dispatch == "workers")
    return plan_batches(job, s.pipeline.items_per_batch, campaign)


def collect_worker_timings(store: PlanStore, specs: Sequence[BatchSpec], root: Path) -> tuple[int, int]:
    """Add the device timings the workers sent back in the batches' shards to the corpus at `root` (its
    WORKERS_WRITER file); a timing that fails `entry_problem` is left out. Returns (new, left out)."""
    corpus = DeviceCorpus(root, WORKERS_WRITER)
    added = rejected = 0
    for spec in specs:
        shard = read_shard(store, spec)
        tables = spec.inventory.by_name()
        for e in shard.timings if shard is not None else ():
            if entry_problem(e, tables) is not None:
                rejected += 1
            else:
                added += corpus.add_entry(e)
    return added, rejected


def run_locally(
    store: PlanStore, specs: Sequence[BatchSpec], log: Log = print, corpus: DeviceCorpus | None = None
) -> int:
    """Measure every batch without a shard in this process (one oracle for all; device timings from `corpus` when
    it holds them); returns how many ran."""
    todo = [spec for spec in specs if read_shard(store, spec) is None]
    if not todo:
        return 0
    oracle = todo[0].profile.oracle()
    oracle.corpus = corpus
    try:
        for spec in todo:
            write_spec(store, spec)
            write_shard(store, run_batch(spec, oracle), spec)
            log(f"batch {spec.batch_id}: {len(spec.items)} measurements (local)")
    finally:
        oracle.close()
    return len(todo)


def measure_stored_batch(
    store: PlanStore, spec_key: str, worker: WorkerInfo | None = None
) -> tuple[BatchSpec, ProfileShard]:
    """One batch whose spec is in the store, measured into its shard (kept if already written): what a worker
    runs. Returns the spec and its shard."""
    spec = read_spec(store, spec_key)
    done = read_shard(store, spec)
    if done is None:
        oracle = spec.profile.oracle()
        try:
            done = run_batch(spec, oracle, worker)
        finally:
            oracle.close()
        write_shard(store, done, spec)
    return spec, done


Dispatcher = Callable[..., object]


def dispatcher(name: str) -> Dispatcher:
    """The registered batch dispatcher `name` (entry point group `dreamshard.dispatchers`)."""
    found = {ep.name: ep for ep in entry_points(group=DISPATCHER_GROUP)}
    if name not in found:
        raise ConfigError(
            f"no batch dispatcher '{name}' is installed (the Prefect flows provide 'workers'; "
            f"install dreamshard with its flows), or use --dispatch local"
        )
    loaded = found[name].load()
    if not callable(loaded):
        raise ConfigError(f"batch dispatcher '{name}' is not callable")
    return loaded


def run_batched(request: BatchedProfileRequest, log: Log = print) -> BatchedProfileResult:
    if request.dispatch == "workers" and not request.store_uri:
        raise ConfigError("--dispatch workers needs --store (object storage every worker can reach)")
    check_outputs(
        {"--inventory": request.inventory, "--tasks": request.tasks, "--params": request.settings.source},
        {"--output": request.out},
    )
    campaign = request.campaign or f"c-{uuid.uuid4().hex[:12]}"
    corpus = DeviceCorpus(request.corpus, CORPUS_WRITER) if request.corpus is not None else None
    specs = plan_stage_batches(request, campaign, corpus, log)
    log(f"{sum(len(s.items) for s in specs)} planned measurements in {len(specs)} batches (campaign {campaign})")
    scratch = None
    store_uri = request.store_uri
    if not store_uri:
        tmp_root = Path(".dvc/tmp") if Path(".dvc/tmp").is_dir() else None
        scratch = store_uri = tempfile.mkdtemp(prefix="dreamshard-profile-", dir=tmp_root)
    try:
        store = open_store(store_uri, endpoint_url=request.endpoint_url)
        if request.dispatch == "workers":
            settings: PipelineSettings = request.settings.pipeline
            runs = dispatcher("workers")(
                store,
                store_uri,
                request.endpoint_url,
                specs,
                settings,
                parent_task_run_id=request.parent_task_run,
                log=log,
            )
            ran = len(runs) if isinstance(runs, dict) else 0
            if request.corpus is not None:
                added, rejected = collect_worker_timings(store, specs, request.corpus)
                log(
                    f"corpus: {added} device timings from the workers"
                    + (
                        f"; {rejected} left out (not timings of the batches' tables: see corpus.entry_problem)"
                        if rejected
                        else ""
                    )
                )
        else:
            ran = run_locally(store, specs, log=log, corpus=corpus)
        merge = merge_shards(store, specs, request.out)
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    for bid, who in merge.workers.items():
        log(f"  {bid}: {who}")
    if corpus is not None:
        log(
            "corpus: {device_timings_measured} device timings measured, {device_timings_reused} reused "
            "({corpus_size} in the corpus)".format(**corpus.stats())
        )
    return BatchedProfileResult(
        merge=merge, batches=len(specs), ran=ran, campaign=campaign, corpus=corpus.stats() if corpus else {}
    )
