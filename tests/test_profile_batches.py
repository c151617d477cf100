"""Profiling fan-out without a server: batches and shard keys are deterministic, a batch's shard holds exactly its
items, a retry overwrites, the merge equals what the one-process profiler writes, and nothing is lost or doubled."""

from __future__ import annotations

from pathlib import Path

import pytest
from flows_support import tiny_inventory

from dreamshard.config.learning import TasksConfig
from dreamshard.documents import load_measurements
from dreamshard.errors import ProfilingError
from dreamshard.learning.taskset import make_taskset
from dreamshard.profiling import ProfileConfig, profile_inventory
from dreamshard.profiling.batches import (
    ProfileJob,
    WorkerInfo,
    list_shards,
    merge_shards,
    plan_batches,
    read_shard,
    run_batch,
    write_shard,
    write_spec,
)
from dreamshard.store import open_store
from dreamshard.values import Topology

PROFILE = ProfileConfig(backend="simulator", num_placements=3, warmup=0, repeats=1)


def _job(tmp_path: Path) -> ProfileJob:
    inv = tiny_inventory(tmp_path / "inv.yaml", num_tables=20)
    tasks = make_taskset(
        inv, TasksConfig(train_num_tasks=3, train_tables=(4, 5), train_devices=2, test_tables=(4,), test_devices=(2,))
    )
    return ProfileJob(
        inventory=inv,
        tasks=tasks,
        topology=Topology(num_devices=2, memory_per_device_gb=1.0, batch_size=256),
        profile=PROFILE,
    )


def test_batches_are_consecutive_planned_items_with_deterministic_keys(tmp_path: Path) -> None:
    job = _job(tmp_path)
    planned = [it.key for it in job.items()]
    specs = plan_batches(job, 4, "c1")
    assert [len(s.items) for s in specs] == [4] * (len(planned) // 4) + ([len(planned) % 4] if len(planned) % 4 else [])
    assert [k for s in specs for k in s.item_ids] == planned  # planned order, each item once
    again = plan_batches(job, 4, "c1")
    assert [s.shard_key for s in again] == [s.shard_key for s in specs]
    fp16 = job.inventory.fingerprint()[:16]
    assert specs[1].shard_key == f"profiling/c1/{fp16}/{specs[1].batch_id}.shard.json"
    assert specs[1].batch_id.startswith("b0001-")
    assert {s.shard_key for s in plan_batches(job, 4, "c2")}.isdisjoint({s.shard_key for s in specs})
    with pytest.raises(ProfilingError, match="items_per_batch"):
        plan_batches(job, 0, "c1")


def test_merged_shards_equal_the_one_process_profiler(tmp_path: Path) -> None:
    job = _job(tmp_path)
    store = open_store(str(tmp_path / "store"))
    specs = plan_batches(job, 5, "c1")
    oracle = PROFILE.oracle()
    for spec in reversed(specs):  # completion order does not matter
        write_spec(store, spec)
        write_shard(
            store, run_batch(spec, oracle, WorkerInfo(host="h", pid=spec.index + 100, ppid=1, worker="w")), spec
        )
    summary = merge_shards(store, specs, tmp_path / "merged.jsonl")
    assert summary.batches == len(specs) and summary.records == sum(len(s.items) for s in specs)
    assert summary.workers[specs[0].batch_id] == "w@h pid 100"
    direct = tmp_path / "direct.jsonl"
    profile_inventory(
        job.inventory,
        job.topology,
        PROFILE.num_placements,
        direct,
        oracle,
        seed=PROFILE.seed,
        tasks=job.tasks,
        progress=False,
        kinds=PROFILE.kinds,
    )
    merged, alone = load_measurements(tmp_path / "merged.jsonl"), load_measurements(direct)
    assert [m.measurement_id for m in merged] == [m.measurement_id for m in alone]
    assert [m.costs for m in merged] == [m.costs for m in alone]  # the simulator is deterministic
    assert [s.index for s in list_shards(store, "c1")] == [s.index for s in specs]


def test_a_retried_batch_overwrites_its_shard(tmp_path: Path) -> None:
    job = _job(tmp_path)
    store = open_store(str(tmp_path / "store"))
    specs = plan_batches(job, 6, "c1")
    oracle = PROFILE.oracle()
    for spec in specs:
        write_shard(store, run_batch(spec, oracle, WorkerInfo(host="h", pid=1, ppid=1, worker="first")), spec)
    write_shard(store, run_batch(specs[0], oracle, WorkerInfo(host="h", pid=2, ppid=1, worker="retry")), specs[0])
    keys = [k for k in store.list_keys("profiling/") if k.endswith(".shard.json")]
    assert len(keys) == len(specs)  # one object per batch, never a second copy
    assert read_shard(store, specs[0]).worker.worker == "retry"
    ids = [m.measurement_id for m in load_measurements(merge_shards(store, specs, tmp_path / "m.jsonl").out_path)]
    assert ids == [k for s in specs for k in s.item_ids] and len(ids) == len(set(ids))


def test_missing_or_foreign_shards_fail_the_merge_and_write_nothing(tmp_path: Path) -> None:
    job = _job(tmp_path)
    store = open_store(str(tmp_path / "store"))
    specs = plan_batches(job, 6, "c1")
    oracle = PROFILE.oracle()
    write_shard(store, run_batch(specs[0], oracle), specs[0])
    out = tmp_path / "m.jsonl"
    with pytest.raises(ProfilingError, match=rf"{len(specs) - 1} of {len(specs)} profiling batches have no shard"):
        merge_shards(store, specs, out)
    assert not out.exists()
    other = run_batch(specs[1], oracle)
    with pytest.raises(ProfilingError, match=f"shard of batch {specs[0].batch_id} holds"):
        write_shard(store, other, specs[0])  # batch 1's records under batch 0's key
    store.put_bytes(
        specs[1].shard_key, other.model_copy(update={"records": other.records[:-1]}).model_dump_json().encode()
    )
    with pytest.raises(ProfilingError, match="not exactly its"):
        read_shard(store, specs[1])  # a shard that lost a record is refused, not merged short


def test_worker_timings_join_the_corpus_only_when_they_are_timings_of_the_batch_tables(tmp_path: Path) -> None:
    """A worker's shard carries its device timings; the dispatcher adds them to the corpus unless they cannot be
    what they claim: a relabelled table, a forged key, a NaN or a missing backend are left out and counted."""
    import math

    from dreamshard.profiling.corpus import WORKERS_WRITER, DeviceCorpus, entry_problem
    from dreamshard.usecases.profile import collect_worker_timings

    job = _job(tmp_path)
    store = open_store(str(tmp_path / "store"))
    specs = plan_batches(job, 6, "c1")
    oracle = PROFILE.oracle()
    shards = [run_batch(spec, oracle) for spec in specs]  # no corpus on the oracle: the worker's case
    assert all(s.timings for s in shards) and oracle.corpus is None
    tables = job.inventory.by_name()
    good = shards[0].timings[0]
    assert entry_problem(good, tables) is None
    other = next(n for n in tables if n not in good.tables)
    forged = [
        good.model_copy(update={"tables": (other,)}),  # relabelled: the key no longer matches
        good.model_copy(update={"key": "0" * 64}),
        good.model_copy(update={"fwd_ms": (-1.0,) * len(good.fwd_ms)}),
        good.model_copy(update={"info": None}),
        good.model_copy(update={"tables": ("nope",)}),
    ]
    assert [entry_problem(e, tables) is not None for e in forged] == [True] * 5
    assert entry_problem(good.model_copy(update={"bwd_ms": (math.nan,) * len(good.bwd_ms)}), tables) is not None
    shards[0] = shards[0].model_copy(update={"timings": (*shards[0].timings, *forged)})
    for spec, shard in zip(specs, shards, strict=True):
        write_spec(store, spec)
        write_shard(store, shard, spec)
    added, rejected = collect_worker_timings(store, specs, tmp_path / "corpus")
    assert rejected == 5 and added == len({e.key for s in shards for e in s.timings} - {"0" * 64})
    kept = DeviceCorpus(tmp_path / "corpus", "reader")
    assert len(kept) == added and all(entry_problem(e, tables) is None for e in kept.entries.values())
    assert (tmp_path / "corpus" / f"{WORKERS_WRITER}.jsonl").is_file()
    assert collect_worker_timings(store, specs, tmp_path / "corpus") == (0, 5)  # again: nothing new
