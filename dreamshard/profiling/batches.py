"""Profiling fanned out: a profiling run split into batches, each measured by whoever runs it (a worker or this
process) into ONE shard object in the store, then merged back in planned order (docs/architecture/pipeline.md,
"Profiling fan-out").

`plan_batches` is deterministic (the same job gives the same batches and keys), `write_spec` stores what a worker
needs, `run_batch` + `write_shard` measure anywhere (a retry overwrites the same key), `merge_shards` writes every
planned item exactly once. What gets measured is `runner.plan_items`; this module does not care which kinds exist.
"""

from __future__ import annotations

import hashlib
import os
import socket
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from dreamshard.documents import atomic_write_text
from dreamshard.errors import ProfilingError, StoreError, first_line
from dreamshard.profiling.corpus import CorpusEntry, TimingRecorder
from dreamshard.profiling.runner import PlannedItem, plan_items
from dreamshard.profiling.settings import ProfileConfig
from dreamshard.store.base import KeyNotFoundError, PlanStore
from dreamshard.values import Inventory, Measurement, MeasurementKind, TaskSet, Topology, utcnow
from dreamshard.values.names import check_key_part

if TYPE_CHECKING:
    from dreamshard.profiling.oracle import Oracle  # the batch's measuring; loads the backends

SHARD_PREFIX = "profiling"


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PlannedMeasurement(_Frozen):
    """A planned item (`runner.PlannedItem`) in a form that travels to a worker as JSON."""

    key: str
    kind: MeasurementKind
    task: str
    placement: dict[str, int]
    topology: Topology

    @classmethod
    def of(cls, item: PlannedItem) -> PlannedMeasurement:
        return cls(key=item.key, kind=item.kind, task=item.task, placement=dict(item.placement), topology=item.topology)


class ProfileJob(_Frozen):
    """Everything one profiling run measures: the inventory, its training tasks (or none: the whole
    inventory), the topology and the `profile` settings."""

    inventory: Inventory
    tasks: TaskSet | None = None
    topology: Topology
    profile: ProfileConfig

    def items(self) -> list[PlannedItem]:
        p = self.profile
        return plan_items(
            self.inventory, self.topology, p.num_placements, p.backend, seed=p.seed, tasks=self.tasks, kinds=p.kinds
        )


class BatchSpec(_Frozen):
    """One batch, self-contained: a worker needs nothing else to measure it."""

    campaign: str
    index: int = Field(ge=0)
    batch_id: str
    inventory: Inventory
    profile: ProfileConfig
    items: tuple[PlannedMeasurement, ...]

    @property
    def item_ids(self) -> tuple[str, ...]:
        return tuple(it.key for it in self.items)

    @property
    def spec_key(self) -> str:
        return _key(self.campaign, self.inventory.fingerprint(), self.batch_id, "spec")

    @property
    def shard_key(self) -> str:
        return _key(self.campaign, self.inventory.fingerprint(), self.batch_id, "shard")


class WorkerInfo(_Frozen):
    """Who measured a shard: host and process, and the Prefect worker / flow run when there is one."""

    host: str
    pid: int
    ppid: int
    worker: str = ""  # Prefect worker name (PREFECT__WORKER_NAME in a worker's flow-run process)
    flow_run_id: str = ""

    @classmethod
    def here(cls, flow_run_id: str = "") -> WorkerInfo:
        return cls(
            host=socket.gethostname(),
            pid=os.getpid(),
            ppid=os.getppid(),
            worker=os.environ.get("PREFECT__WORKER_NAME", ""),
            flow_run_id=flow_run_id,
        )


class ProfileShard(_Frozen):
    """The records of one batch, written as one object (a retry overwrites it whole)."""

    campaign: str
    batch_id: str
    index: int
    item_ids: tuple[str, ...]
    records: tuple[Measurement, ...]
    worker: WorkerInfo
    started_at: datetime
    finished_at: datetime
    # the device timings a worker measured, for the dispatcher's measurement corpus (empty when the batch ran
    # in the dispatcher's process, which writes them to its corpus directly)
    timings: tuple[CorpusEntry, ...] = ()


class MergeSummary(_Frozen):
    out_path: str
    batches: int
    records: int
    workers: dict[str, str]  # batch id -> "worker@host pid N"


def batch_id(index: int, item_ids: Sequence[str]) -> str:
    """``b<index>-<sha256 of its item ids>[:16]``: a retried batch writes the same key (never a second copy), a
    different set of items is a different key."""
    digest = hashlib.sha256("\n".join(item_ids).encode()).hexdigest()[:16]
    return f"b{index:04d}-{digest}"


def _key(campaign: str, fingerprint: str, bid: str, kind: str) -> str:
    """``profiling/<campaign>/<inventory fingerprint[:16]>/<batch id>.<spec|shard>.json``. The campaign names one
    measuring effort (the orchestrator's flow-run id: a retried run resumes its own shards, a new run measures
    afresh)."""
    check_key_part(campaign, "profiling campaign")
    return f"{SHARD_PREFIX}/{campaign}/{fingerprint[:16]}/{bid}.{kind}.json"


def plan_batches(job: ProfileJob, items_per_batch: int, campaign: str) -> list[BatchSpec]:
    """Split the job's planned items, in planned order, into consecutive batches of at most items_per_batch."""
    if items_per_batch < 1:
        raise ProfilingError(f"items_per_batch must be >= 1, got {items_per_batch}")
    check_key_part(campaign, "profiling campaign")
    items = [PlannedMeasurement.of(it) for it in job.items()]
    specs = []
    for index, start in enumerate(range(0, len(items), items_per_batch)):
        chunk = tuple(items[start : start + items_per_batch])
        specs.append(
            BatchSpec(
                campaign=campaign,
                index=index,
                batch_id=batch_id(index, [it.key for it in chunk]),
                inventory=job.inventory,
                profile=job.profile,
                items=chunk,
            )
        )
    return specs


def run_batch(spec: BatchSpec, oracle: Oracle, worker: WorkerInfo | None = None) -> ProfileShard:
    """Measure every item of the batch (in order) on `oracle`. Without a corpus on the oracle (a worker) its device
    timings are recorded and sent back in the shard."""
    started = utcnow()
    recorder = TimingRecorder() if oracle.corpus is None else None
    if recorder is not None:
        oracle.corpus = recorder
    try:
        records = tuple(
            oracle.measure(spec.inventory, it.placement, it.topology, kind=it.kind, task=it.task, measurement_id=it.key)
            for it in spec.items
        )
    finally:
        if recorder is not None:
            oracle.corpus = None
    return ProfileShard(
        campaign=spec.campaign,
        batch_id=spec.batch_id,
        index=spec.index,
        item_ids=spec.item_ids,
        records=records,
        worker=worker or WorkerInfo.here(),
        started_at=started,
        finished_at=utcnow(),
        timings=tuple(recorder.recorded) if recorder is not None else (),
    )


def write_spec(store: PlanStore, spec: BatchSpec) -> str:
    store.put_bytes(spec.spec_key, spec.model_dump_json().encode())
    return spec.spec_key


def read_spec(store: PlanStore, key: str) -> BatchSpec:
    try:
        return BatchSpec.model_validate_json(store.get_bytes(key))
    except KeyNotFoundError:
        raise StoreError(f"no profiling batch at {key} in {store.location}") from None
    except ValueError as e:
        raise StoreError(f"profiling batch {key} in {store.location} is not a batch spec: {first_line(e)}") from None


def shard_key_of(spec_key: str) -> str:
    return spec_key.removesuffix(".spec.json") + ".shard.json"


def write_shard(store: PlanStore, shard: ProfileShard, spec: BatchSpec) -> str:
    """Store `shard` under its batch's key after checking it holds exactly the batch's items."""
    _check_shard(shard, spec)
    store.put_bytes(spec.shard_key, shard.model_dump_json().encode())
    return spec.shard_key


def read_shard(store: PlanStore, spec: BatchSpec) -> ProfileShard | None:
    """The batch's shard, or None when it was not written yet; a shard that does not match its batch is an error."""
    try:
        raw = store.get_bytes(spec.shard_key)
    except KeyNotFoundError:
        return None
    try:
        shard = ProfileShard.model_validate_json(raw)
    except ValueError as e:
        raise StoreError(f"shard {spec.shard_key} in {store.location} is corrupt: {first_line(e)}") from None
    _check_shard(shard, spec)
    return shard


def _check_shard(shard: ProfileShard, spec: BatchSpec) -> None:
    ids = tuple(m.measurement_id for m in shard.records)
    if shard.batch_id != spec.batch_id or shard.item_ids != spec.item_ids or ids != spec.item_ids:
        raise ProfilingError(
            f"shard of batch {spec.batch_id} holds {len(ids)} records that are not exactly its {len(spec.items)} "
            f"planned items; delete the shard and re-run the batch"
        )
    fp = spec.inventory.fingerprint()
    if any(m.inventory_fingerprint != fp for m in shard.records):
        raise ProfilingError(f"shard of batch {spec.batch_id} holds records of another inventory version")


def missing_batches(store: PlanStore, specs: Sequence[BatchSpec]) -> list[BatchSpec]:
    return [s for s in specs if not store.exists(s.shard_key)]


def list_shards(store: PlanStore, campaign: str) -> list[ProfileShard]:
    """Every shard written in `campaign` (all inventories), in batch order: who measured what."""
    check_key_part(campaign, "profiling campaign")
    keys = [k for k in store.list_keys(f"{SHARD_PREFIX}/{campaign}/") if k.endswith(".shard.json")]
    shards = [ProfileShard.model_validate_json(store.get_bytes(k)) for k in keys]
    return sorted(shards, key=lambda s: s.index)


def merge_shards(store: PlanStore, specs: Sequence[BatchSpec], out_path: str | Path) -> MergeSummary:
    """Write every batch's records, in planned order, to `out_path` (JSONL, atomically).

    Every planned item appears exactly once: a missing shard, or a shard that does not hold exactly its
    batch's items, is an error and nothing is written.
    """
    shards: list[ProfileShard] = []
    missing = []
    for spec in sorted(specs, key=lambda s: s.index):
        shard = read_shard(store, spec)
        if shard is None:
            missing.append(spec.batch_id)
        else:
            shards.append(shard)
    if missing:
        raise ProfilingError(
            f"{len(missing)} of {len(specs)} profiling batches have no shard yet (first: {missing[0]}); run them first"
        )
    seen: set[str] = set()
    lines: list[str] = []
    for shard in shards:
        for m in shard.records:
            if m.measurement_id in seen:
                raise ProfilingError(f"item {m.measurement_id} is planned in two batches; re-plan the batches")
            seen.add(m.measurement_id)
            lines.append(m.model_dump_json() + "\n")
    atomic_write_text(out_path, "".join(lines))
    return MergeSummary(
        out_path=str(out_path),
        batches=len(shards),
        records=len(lines),
        workers={s.batch_id: f"{s.worker.worker or 'local'}@{s.worker.host} pid {s.worker.pid}" for s in shards},
    )
