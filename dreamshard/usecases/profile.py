"""Measurements: an inventory's placements measured in this process (`dreamshard profile`), or the batched
profile stage (`dreamshard profile-stage`: batches -> one shard each -> merged in planned order).

Batches run in this process, or on workers: `dispatch="workers"` hands them to the dispatcher registered under
the `dreamshard.dispatchers` entry point group (`profiling/dispatch.py`; the Prefect flows register `workers`),
so this library never imports Prefect. Which train tasks a new version re-measures is `profiling/task_choice.py`.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

from dreamshard.config.stages import PipelineSettings
from dreamshard.errors import ConfigError
from dreamshard.learning.taskset import load_taskset
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
from dreamshard.profiling.corpus import WORKERS_WRITER, DeviceCorpus, entry_problem
from dreamshard.profiling.dispatch import DISPATCHER_GROUP as DISPATCHER_GROUP
from dreamshard.profiling.dispatch import dispatcher
from dreamshard.profiling.task_choice import limit_new_tasks
from dreamshard.store import open_store
from dreamshard.store.base import PlanStore
from dreamshard.usecases.base import Request, Result
from dreamshard.usecases.profile_batches import Batches
from dreamshard.values import CommModel, Inventory

CORPUS_WRITER = "profile"  # this use case's file in the corpus directory
Log = Callable[[str], None]


class ProfileRequest(Request):
    """Single-table costs and random feasible placements of an inventory (or of each train task) -> JSONL (the door
    checked that `out` is no input)."""

    inventory: Inventory
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
    inv = request.inventory
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
    """The profile stage: the train tasks' planned measurements in batches of pipeline.items_per_batch (the door
    checked that `out` is no input)."""

    inventory: Inventory
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


def plan_stage_batches(
    request: BatchedProfileRequest, campaign: str, corpus: DeviceCorpus | None = None, log: Log = print
) -> list[BatchSpec]:
    """The stage's batches (same files, settings and corpus -> same batches and shard keys)."""
    s = request.settings
    job = ProfileJob(
        inventory=request.inventory,
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


class BatchDone(Result):
    """One batch a worker measured (or found measured): what the profile-batch flow reports."""

    batch_id: str
    records: int
    shard: str  # the shard's store key
    worker: WorkerInfo


def measure_batch(store_uri: str, endpoint_url: str | None, spec_key: str, flow_run_id: str) -> BatchDone:
    """What a worker of the profile-batch deployment runs: `measure_stored_batch` in the store at `store_uri`,
    recorded as measured by this host under `flow_run_id`."""
    store = open_store(store_uri, endpoint_url=endpoint_url)
    spec, done = measure_stored_batch(store, spec_key, WorkerInfo.here(flow_run_id))
    return BatchDone(batch_id=spec.batch_id, records=len(done.records), shard=spec.shard_key, worker=done.worker)


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


def _run_on_workers(
    request: BatchedProfileRequest, store: PlanStore, store_uri: str, specs: Sequence[BatchSpec], log: Log
) -> int:
    """Hand the batches to the `workers` dispatcher, then add the device timings they sent back to the corpus;
    returns how many batches it ran."""
    settings: PipelineSettings = request.settings.pipeline
    batches = Batches(store, specs)
    runs = dispatcher("workers")(
        batches, store_uri, request.endpoint_url, settings, parent_task_run_id=request.parent_task_run, log=log
    )
    if request.corpus is not None:
        added, rejected = collect_worker_timings(store, specs, request.corpus)
        left_out = f"; {rejected} left out (not timings of the batches' tables: see corpus.entry_problem)"
        log(f"corpus: {added} device timings from the workers" + (left_out if rejected else ""))
    return len(runs) if isinstance(runs, dict) else 0


def run_batched(request: BatchedProfileRequest, log: Log = print) -> BatchedProfileResult:
    if request.dispatch == "workers" and not request.store_uri:
        raise ConfigError("--dispatch workers needs --store (object storage every worker can reach)")
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
            ran = _run_on_workers(request, store, store_uri, specs, log)
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
