"""Which train tasks a new inventory version re-measures (`profile.incremental_tasks`; docs/architecture/measuring.md,
"The measurement corpus"): once the corpus serves at least one task entirely, at most that many of the tasks whose
placements need device timings the corpus lacks are measured, chosen by per-task draws so the same change keeps
the same tasks."""

from __future__ import annotations

from collections.abc import Callable

from dreamshard.inventory.draws import draw
from dreamshard.placement.expand import unit_table
from dreamshard.profiling.batches import ProfileJob
from dreamshard.profiling.corpus import DeviceCorpus, device_key, fused_operators
from dreamshard.values import BackendInfo

Log = Callable[[str], None]


def missing_devices(
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


def _workers_missing(job: ProfileJob, corpus: DeviceCorpus) -> dict[str, int] | None:
    """`missing_devices` as the profiling workers' timings count (the hardware of the last timings they sent
    back for this backend); None when they sent none yet: every task is new."""
    if job.profile.backend not in corpus.worker_backend:
        return None
    hardware, worker = corpus.worker_backend[job.profile.backend]
    pr = job.profile  # the workers' device and operator, this run's settings
    base = worker.model_copy(
        update={"warmup": pr.warmup, "repeats": pr.repeats, "num_threads": pr.num_threads, "row_cap": pr.row_cap}
    )
    return missing_devices(job, corpus, lambda b: base.model_copy(update={"batch_size": b}), pr.seed, hardware)


def limit_new_tasks(job: ProfileJob, corpus: DeviceCorpus, log: Log = print, workers: bool = False) -> ProfileJob:
    """`job` with at most `profile.incremental_tasks` of the train tasks whose placements need device timings
    the corpus lacks, once the corpus serves at least one task entirely (a new version of a known inventory;
    with nothing served, a first run, every task is kept). The kept ones are chosen by per-task draws, so the
    same change keeps the same tasks. `workers`: the timings count when the profiling workers made them."""
    limit = job.profile.incremental_tasks  # decided on what the corpus held before this version: reruns agree
    if limit is None or job.tasks is None:
        return job
    if workers:
        found = _workers_missing(job, corpus)
        if found is None:
            return job
        missing = found
    else:
        oracle = job.profile.oracle()
        try:
            missing = missing_devices(job, corpus, oracle.backend_info, oracle.seed, None)
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
