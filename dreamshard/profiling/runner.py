"""Profiling runs: single-table costs and feasible placements, appended to a JSONL file, resumable
(docs/architecture/measuring.md, "Measuring").

`plan_items` is what a run measures: singles (each table alone on device 0), then, for the whole inventory or per
train task, K random feasible placements and one per extra kind (`profile.kinds`: a sharder's plan, `crowded`,
`row_wise`, `data_parallel`; `kind_placement`). Every item has a deterministic `measurement_id` (kind, task,
fingerprint, topology, placement and backend name hashed), so a rerun into the same file measures only what is
missing; a killed run's partial last line is dreamshard.documents' to handle (`append_measurement`).
"""

from __future__ import annotations

import hashlib
import json
import statistics
import time
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from pydantic import BaseModel, ConfigDict
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from dreamshard.documents import append_measurement, iter_measurements
from dreamshard.errors import InfeasiblePlacementError, InventoryError, PlanError, ProfilingError
from dreamshard.inventory.draws import draw
from dreamshard.placement.expand import expand_plan, replica_table, row_shard_table, with_units
from dreamshard.placement.validate import check_each_table_fits, check_placement, footprint
from dreamshard.profiling.names import TYPE_KINDS
from dreamshard.profiling.oracle import Oracle
from dreamshard.sharders import get_sharder, options_for
from dreamshard.values import (
    GB,
    BackendInfo,
    CommModel,
    Inventory,
    Measurement,
    MeasurementKind,
    Table,
    TaskSet,
    Topology,
)
from dreamshard.values.units import row_blocks

#: Draws in a row that may give a duplicate (or infeasible) placement before a task is taken to have no more
#: distinct random placements (tiny tasks; `profile -k` beyond what exists).
_MAX_MISSES = 200


class ProfileSummary(BaseModel):
    """What a profiling run did."""

    model_config = ConfigDict(frozen=True)

    out_path: str
    planned: int
    measured: int
    skipped: int
    singles: int
    placements: int
    wall_s: float
    backend: BackendInfo
    comm_models: tuple[CommModel, ...] = ()


@dataclass(frozen=True)
class PlannedItem:
    key: str
    kind: MeasurementKind
    task: str
    placement: dict[str, int]
    topology: Topology


def item_key(
    kind: MeasurementKind, task: str, fingerprint: str, topology: Topology, placement: dict[str, int], backend: str
) -> str:
    """Deterministic id of a planned measurement (stable across runs and processes)."""
    payload = json.dumps(
        {
            "kind": kind,
            "task": task,
            "inventory": fingerprint,
            "topology": topology.model_dump(mode="json"),
            "placement": sorted(placement.items()),
            "backend": backend,
        },
        sort_keys=True,
        separators=(",", ":"),
    )
    digest = hashlib.sha256(payload.encode()).hexdigest()[:16]
    return f"{kind}-{task or 'all'}-{digest}"


def _device_for(table: Table, need: int, used: list[int], cap: int, u: float) -> int:
    """The device a draw `u` picks for `table` (`need` bytes), or the next one with room (InfeasiblePlacementError:
    none has)."""
    n = len(used)
    first = min(int(u * n), n - 1)
    for i in range(n):
        d = (first + i) % n
        if used[d] + need <= cap:
            return d
    raise InfeasiblePlacementError(table.name, need / GB, (cap - min(used)) / GB)


def _table_draw(seed: int, tag: str, table: Table) -> float:
    """The draw of `table` under `tag`: the same table, seed and tag always draw the same number."""
    return draw(seed, tag, table.name)


def _drawn_placement(
    inventory: Inventory, topology: Topology, pick: Callable[[Table], float], used: list[int] | None = None
) -> dict[str, int]:
    """Tables (largest first) on the device their own draw picks, or the next with room (InfeasiblePlacementError
    when one fits nowhere). A table's device depends on its draw and on memory only, so where memory does not
    bind, a new or changed table moves no other table (their devices come from the measurement corpus). `used`:
    bytes already on each device."""
    used = list(used) if used is not None else [0] * topology.num_devices
    out: dict[str, int] = {}
    for t in sorted(inventory.tables, key=lambda t: (-t.size_bytes, t.name)):
        need = footprint(t, topology)
        d = _device_for(t, need, used, topology.usable_memory_bytes, pick(t))
        used[d] += need
        out[t.name] = d
    return {t.name: out[t.name] for t in inventory.tables}


def _random_placements(inventory: Inventory, topology: Topology, k: int, seed: int) -> list[dict[str, int]]:
    """Up to k distinct random feasible placements; stops after _MAX_MISSES draws in a row gave a duplicate or an
    infeasible one (a small task has few distinct placements); none feasible: the last draw's error."""
    out: list[dict[str, int]] = []
    seen: set[tuple[tuple[str, int], ...]] = set()
    last_error: InfeasiblePlacementError | None = None
    misses = j = 0
    while len(out) < k and misses < _MAX_MISSES:
        tag = f"random-{j}"
        j += 1
        try:
            p = _drawn_placement(inventory, topology, partial(_table_draw, seed, tag))
        except InfeasiblePlacementError as e:  # tight memory: this draw painted itself into a corner
            last_error, misses = e, misses + 1
            continue
        sig = tuple(sorted(p.items()))
        if sig in seen:
            misses += 1
            continue
        misses = 0
        seen.add(sig)
        out.append(p)
    if not out and last_error is not None:
        raise last_error
    return out


def crowded_placement(inventory: Inventory, topology: Topology, seed: int) -> dict[str, int] | None:
    """One device (seeded) gets about half the tables, the others go to devices of their own draws; None when
    there is a single device or memory does not allow it."""
    n = topology.num_devices
    if n < 2 or inventory.num_tables < 3:
        return None
    hot = min(int(draw(seed, "crowded-hot", "") * n), n - 1)

    def pick(t: Table) -> float:
        u = draw(seed, "crowded", t.name)
        return (hot + 0.5) / n if u < 0.5 else (u - 0.5) * 2

    try:
        return _drawn_placement(inventory, topology, pick)
    except InfeasiblePlacementError:
        return None


def _typed_table(kind: str, inventory: Inventory, topology: Topology, seed: int) -> Table | None:
    """The table a `row_wise` kind row-shards (one of the 3 largest that has a row per device) or a
    `data_parallel` kind replicates (one of the smallest third), by a per-task draw; None if there is none."""
    n = topology.num_devices
    if kind == "row_wise":
        pool = sorted(
            (t for t in inventory.tables if t.num_embeddings >= 2 * n), key=lambda t: (-t.size_bytes, t.name)
        )[:3]
    else:
        pool = sorted(inventory.tables, key=lambda t: (t.size_bytes, t.name))[: max(1, inventory.num_tables // 3)]
    if not pool:
        return None
    return pool[min(int(draw(seed, kind, "") * len(pool)), len(pool) - 1)]


def typed_placement(kind: str, inventory: Inventory, topology: Topology, seed: int) -> dict[str, int] | None:
    """A random placement with one table row-sharded over every device (`row_wise`) or replicated on every device
    (`data_parallel`), as units (dreamshard.values.units): the cost model then learns those types from measurements of
    devices that mix them with whole tables. None with one device, no such table or no room."""
    n = topology.num_devices
    table = _typed_table(kind, inventory, topology, seed) if n > 1 and inventory.num_tables > 1 else None
    if table is None:
        return None
    # unit d goes on device d: row block d, or the replica of device d
    on = (
        [row_shard_table(table, a, b) for a, b in row_blocks(table.num_embeddings, n)]
        if kind == "row_wise"
        else [replica_table(table, d) for d in range(n)]
    )
    units = {u.name: d for d, u in enumerate(on)}
    rest = inventory.subset([t.name for t in inventory.tables if t.name != table.name])
    try:
        held = [footprint(u, topology) for u in on]
        placement = {**_drawn_placement(rest, topology, lambda t: draw(seed, kind, t.name), held), **units}
        check_placement(with_units(inventory, units), placement, topology)
    except (InfeasiblePlacementError, PlanError):
        return None
    return placement


def kind_placement(kind: str, inventory: Inventory, topology: Topology, seed: int) -> dict[str, int] | None:
    """The placement of one extra kind (a sharder's plan as its units, `crowded`, or a `TYPE_KINDS` one); None if
    it cannot place the task."""
    if kind == "crowded":
        return crowded_placement(inventory, topology, seed)
    if kind in TYPE_KINDS:
        return typed_placement(kind, inventory, topology, seed)
    try:
        # the seed is shared by every kind: a sharder that takes no seed (the deterministic ones) gets none
        plan = get_sharder(kind, **options_for(kind, {"seed": seed})).shard(inventory, topology)
    except InfeasiblePlacementError:
        return None
    units, placement = expand_plan(inventory, plan)  # a sharder that splits or replicates is measured as it plans
    return {u.name: int(placement[u.name]) for u in units.tables}


def plan_items(
    inventory: Inventory,
    topology: Topology,
    num_placements: int,
    backend: str,
    seed: int = 0,
    tasks: TaskSet | None = None,
    kinds: Sequence[str] = (),
    singles: bool = True,
) -> list[PlannedItem]:
    """Every measurement a profiling run makes, in order (singles first, unless `singles` is False)."""
    fp = inventory.fingerprint()
    items: list[PlannedItem] = []
    if tasks is None:
        check_each_table_fits(inventory, topology)
        single_names = inventory.table_names
        groups: list[tuple[str, Inventory, Topology]] = [("", inventory, topology)]
    else:
        by_name = inventory.by_name()
        for task in tasks.train:
            for name in task.tables:
                if name not in by_name:
                    raise InventoryError(
                        f"task '{task.name}' names table '{name}', which is not in inventory '{inventory.name}'"
                    )
        single_names = list(dict.fromkeys(n for task in tasks.train for n in task.tables))
        groups = [
            (
                task.name,
                inventory.subset(list(task.tables)),
                topology.model_copy(update={"num_devices": task.num_devices}),
            )
            for task in tasks.train
        ]
        check_each_table_fits(inventory.subset(single_names), topology)
    for name in single_names if singles else ():
        placement = {name: 0}
        items.append(
            PlannedItem(item_key("single", "", fp, topology, placement, backend), "single", "", placement, topology)
        )
    for task_name, inv, topo in groups:
        task_seed = seed + 7919 * zlib.crc32(task_name.encode())  # by name: the same task, the same placements
        placements = _random_placements(inv, topo, num_placements, task_seed)
        for kind in kinds:
            extra = kind_placement(kind, inv, topo, task_seed)
            if extra is not None:
                placements.append(extra)
        for placement in placements:
            key = item_key("placement", task_name, fp, topo, placement, backend)
            items.append(PlannedItem(key, "placement", task_name, placement, topo))
    # Duplicates (identical random placements) are measured once.
    return list({it.key: it for it in items}.values())


def _done_ids(path: Path, inventory: Inventory, backend: str) -> set[str]:
    """Ids already measured in `path`; refuses a file that holds another inventory's records or another
    backend's (a simulated record must never sit among measured ones)."""
    if not path.exists():
        return set()
    fp = inventory.fingerprint()
    done: set[str] = set()
    for m in iter_measurements(path):
        if m.inventory_fingerprint != fp:
            raise InventoryError(
                f"{path} holds measurements of inventory '{m.inventory_name}' ({m.inventory_fingerprint[:12]}), "
                f"not of '{inventory.name}' ({fp[:12]}); write to a new file or move that one aside"
            )
        if m.backend.name != backend:
            raise ProfilingError(
                f"{path} holds measurements on backend '{m.backend.name}', this run measures on '{backend}'; "
                "write to a new file (each backend's records in their own) or move that one aside"
            )
        done.add(m.measurement_id)
    return done


def profile_inventory(
    inventory: Inventory,
    topology: Topology,
    num_placements: int,
    out_path: Path,
    oracle: Oracle,
    *,
    seed: int = 0,
    tasks: TaskSet | None = None,
    progress: bool = True,
    kinds: Sequence[str] = (),
    singles: bool = True,
) -> ProfileSummary:
    """Measure singles then random placements into ``out_path`` (JSONL), skipping what is already there."""
    out_path = Path(out_path)
    t0 = time.perf_counter()
    items = plan_items(
        inventory, topology, num_placements, oracle.info.name, seed=seed, tasks=tasks, kinds=kinds, singles=singles
    )
    done = _done_ids(out_path, inventory, oracle.info.name)
    todo = [it for it in items if it.key not in done]
    comm_models: dict[int, CommModel] = {}
    with Progress(
        TextColumn("[bold]profiling[/] {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        disable=not progress,
        transient=False,
    ) as bar:
        job = bar.add_task(oracle.info.name, total=len(todo))
        for it in todo:
            bar.update(job, description=f"{it.kind} {it.task or ''}".strip())
            m = oracle.measure(inventory, it.placement, it.topology, kind=it.kind, task=it.task, measurement_id=it.key)
            if m.comm_model is not None:
                comm_models[it.topology.num_devices] = m.comm_model
            append_measurement(out_path, m)
            bar.advance(job)
    return ProfileSummary(
        out_path=str(out_path),
        planned=len(items),
        measured=len(todo),
        skipped=len(items) - len(todo),
        singles=sum(1 for it in items if it.kind == "single"),
        placements=sum(1 for it in items if it.kind == "placement"),
        wall_s=round(time.perf_counter() - t0, 3),
        backend=oracle.backend_info(topology.batch_size),
        comm_models=tuple(comm_models[k] for k in sorted(comm_models)),
    )


def single_table_costs_from(measurements: Iterable[Measurement]) -> dict[str, float]:
    """{table: total ms alone} from kind="single" records (the median when a table was measured repeatedly)."""
    acc: dict[str, list[float]] = {}
    for m in measurements:
        if m.kind != "single" or len(m.placement) != 1:
            continue
        (name,) = m.placement
        acc.setdefault(name, []).append(m.overall_ms)
    return {k: float(statistics.median(v)) for k, v in acc.items()}
