"""Pre-training the packaged model on a wide, generated table distribution (docs/architecture/learning.md, "Learning").

`pretraining_tasks` draws tasks with their own tables (dreamshard.inventory.families.wide_table) and device
counts, so tables per device span 1..max_tables_per_device; `pretraining_batch_sizes` draws each task's batch size
log-uniform in `batch_sizes` from its own seeded stream. `pretrain` measures every task at its batch size, runs the
outer loop (dreamshard.learning.loop) from scratch and writes the model with its card (the data it saw, the
ranges it covers, the held-out error per regime). `make pretrain` writes dreamshard/pretrained/; production
retrains start from it (`train.init: pretrained`).
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np

from dreamshard.config.learning import PretrainConfig, TopologyConfig
from dreamshard.documents import load_measurements
from dreamshard.inventory.families import wide_table
from dreamshard.learning.loop import train
from dreamshard.learning.loop_planner import Searcher
from dreamshard.learning.model_store import ModelCard, load_card, load_model, save_model
from dreamshard.profiling.oracle import Oracle
from dreamshard.profiling.runner import profile_inventory
from dreamshard.values import BackendInfo, Inventory, Measurement, Task, TaskSet
from dreamshard.values.progress import Progress

MEASUREMENTS_FILE = "pretrain_measurements.jsonl"
#: mixed into the seed of the batch-size stream (apart from the tables' and devices' draws)
_BATCH_STREAM = 0xBA7C5


def pretraining_tasks(cfg: PretrainConfig) -> tuple[Inventory, TaskSet]:
    """The pool of every generated table and one training task per draw (seeded): tables per task log-uniform
    in `tables`, tables per device log-uniform in [1, max_tables_per_device] within `devices`."""
    rng = np.random.default_rng(cfg.seed)
    tables = []
    tasks = []
    lo, hi = cfg.tables
    for i in range(cfg.num_tasks):
        n = int(round(math.exp(rng.uniform(math.log(lo), math.log(hi + 0.499)))))
        n = min(max(n, lo), hi)
        # tables per device log-uniform in [1, max], so crowded devices are as common as sparse ones
        per_device = math.exp(rng.uniform(0.0, math.log(cfg.max_tables_per_device)))
        d_lo = max(cfg.devices[0], math.ceil(n / cfg.max_tables_per_device))
        d = min(max(int(round(n / per_device)), d_lo), max(d_lo, min(cfg.devices[1], n)))
        names = []
        for j in range(n):
            t = wide_table(f"p{i:04d}_t{j:03d}", np.random.default_rng([cfg.seed, i, j]))
            tables.append(t)
            names.append(t.name)
        tasks.append(Task(name=f"pre-{i:04d}", tables=tuple(names), num_devices=d))
    pool = Inventory(name=f"pretrain-s{cfg.seed}", tables=tuple(tables))
    taskset = TaskSet(
        pool_name=pool.name,
        pool_fingerprint=pool.fingerprint(),
        train_tables=tuple(pool.table_names),
        test_tables=(),
        train=tuple(tasks),
        test=(),
    )
    return pool, taskset


def pretraining_batch_sizes(cfg: PretrainConfig, taskset: TaskSet) -> dict[str, int]:
    """Each training task's batch size by name: log-uniform in `cfg.batch_sizes` (seeded, its own stream)."""
    lo, hi = cfg.batch_sizes
    rng = np.random.default_rng([cfg.seed, _BATCH_STREAM])
    out = {}
    for task in taskset.train:
        b = int(round(math.exp(rng.uniform(math.log(lo), math.log(hi))))) if hi > lo else lo
        out[task.name] = min(max(b, lo), hi)
    return out


def _profile(
    pool: Inventory,
    taskset: TaskSet,
    template: TopologyConfig,
    batch_sizes: dict[str, int],
    cfg: PretrainConfig,
    path: Path,
    oracle: Oracle,
    progress: bool,
) -> BackendInfo:
    """Measure every task at its own batch size into `path` (one profiling run per batch size; already
    measured items are skipped); returns the backend (at the smallest batch size)."""
    by_batch: dict[int, list[Task]] = {}
    for task in taskset.train:
        by_batch.setdefault(batch_sizes[task.name], []).append(task)
    backends = []
    for batch, tasks in sorted(by_batch.items()):
        group = taskset.model_copy(update={"train": tuple(tasks)})
        topo = template.topology(1).model_copy(update={"batch_size": batch})
        prof = profile_inventory(
            pool,
            topo,
            cfg.num_placements,
            path,
            oracle,
            seed=cfg.seed,
            tasks=group,
            progress=progress,
            kinds=cfg.kinds,
            singles=False,
        )
        backends.append(prof.backend)
    return backends[0]


def _batch_data(records: list[Measurement], batch_sizes: dict[str, int]) -> dict[str, object]:
    drawn = list(batch_sizes.values())
    return {
        "batch_sizes": [min(drawn), max(drawn)],
        "distinct_batch_sizes": len(set(drawn)),
        "profiled_batch_sizes": [
            min(m.topology.batch_size for m in records),
            max(m.topology.batch_size for m in records),
        ]
        if records
        else [],
    }


def pretrain(
    cfg: PretrainConfig,
    out_dir: Path,
    state_dir: Path,
    oracle: Oracle,
    searcher: Searcher,
    progress: bool = True,
    resume: bool = True,
    report: Progress | None = None,
) -> dict[str, object]:
    """Measure the pretraining tasks into `state_dir` (each at its own batch size), train from scratch (`searcher`:
    the search planner of the loop), save the model in `out_dir`. Resumable: a rerun measures nothing twice and
    continues from the last completed loop iteration. `report`: the loop's progress lines (`loop.train`)."""
    state_dir = Path(state_dir)
    state_dir.mkdir(parents=True, exist_ok=True)
    pool, taskset = pretraining_tasks(cfg)
    batch_sizes = pretraining_batch_sizes(cfg, taskset)
    template = TopologyConfig(
        device_type="cuda" if oracle.info.name == "cuda" else "cpu",  # the devices that measure
        memory_per_device_gb=cfg.memory_per_device_gb,
        batch_size=cfg.batch_sizes[0],
    )
    t0 = time.perf_counter()
    backend = _profile(pool, taskset, template, batch_sizes, cfg, state_dir / MEASUREMENTS_FILE, oracle, progress)
    t_profile = time.perf_counter() - t0
    records = load_measurements(state_dir / MEASUREMENTS_FILE)
    work = state_dir / "model"
    t1 = time.perf_counter()
    results = train(
        pool,
        taskset,
        template,
        oracle,
        cfg.loop,
        work,
        state_dir=state_dir / "loop",
        resume=resume,
        progress=progress,
        measurements=records,
        backend_name=backend.name,
        batch_sizes=batch_sizes,
        searcher=searcher,
        report=report,
    )
    t_train = time.perf_counter() - t1
    card = load_card(work)
    data = _data_summary(cfg, pool, taskset, records, batch_sizes, card, backend)
    walls = {"profile_wall_s": round(t_profile, 1), "train_wall_s": round(t_train, 1)}
    provenance = {
        **card.provenance,
        "command": "pretrain",
        "data": data,
        **walls,
        "iterations_run_now": [r.iteration for r in results],
    }
    model = load_model(work, require_policy=True)
    final = save_model(
        out_dir,
        model.cost_net,
        model.policy,
        configs={"pretrain": cfg.model_dump(mode="json")},
        inventory_name="",
        inventory_fingerprint="",
        backend=card.backend,
        comm_models=card.comm_models,
        feature_ranges=card.feature_ranges,
        cost_metrics=card.cost_metrics,
        policy_metrics=card.policy_metrics,
        provenance=provenance,
    )
    return {"version": final.version, **data, **walls}


def _data_summary(
    cfg: PretrainConfig,
    pool: Inventory,
    taskset: TaskSet,
    records: list[Measurement],
    batch_sizes: dict[str, int],
    card: ModelCard,
    backend: BackendInfo,
) -> dict[str, object]:
    """What the model card says about the data the model was pre-trained on."""
    per_task = [len(t.tables) / t.num_devices for t in taskset.train]
    return {
        "generator": "dreamshard.inventory.families.wide_table",
        "seed": cfg.seed,
        "tasks": len(taskset.train),
        "tables": pool.num_tables,
        "tables_per_task": [min(len(t.tables) for t in taskset.train), max(len(t.tables) for t in taskset.train)],
        "devices": [min(t.num_devices for t in taskset.train), max(t.num_devices for t in taskset.train)],
        "mean_tables_per_device": [round(min(per_task), 2), round(max(per_task), 2)],
        **_batch_data(records, batch_sizes),
        "profile_records": len(records),
        "loop_records": int(card.provenance.get("n_measurements", 0)) - len(records),
        "backend": backend.model_dump(mode="json"),
    }
