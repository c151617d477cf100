"""The compute-backend interface and what the real (torch) backends share: inputs, timing, thread pinning.

A compute backend times ONE device's fused embedding operators over the tables it holds: forward (the
operator calls) and backward (gradient of the outputs, which runs the fused SGD update), ``warmup`` untimed
iterations, then ``repeats`` timed ones. Pooled tables run in one operator; sequence tables (``Table.pooled``
false: TorchRec's EmbeddingCollection) in one without pooling per width (`operator_groups`), all timed together, as
TorchRec runs one kernel per module kind. Communication is not its business (see ``comm.py``).
"""

from __future__ import annotations

import abc
import contextlib
import gc
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

import numpy as np

from dreamshard.inventory.index_budget import batches_within_budget
from dreamshard.inventory.indices import synthesize_indices
from dreamshard.profiling.scaling import ScalingRule, padded_dim
from dreamshard.values import Table

#: Distinct index batches generated per table; timed iterations cycle through them (cache effects of a
#: fresh batch each step without paying the generation cost every time).
NUM_BATCHES = 3


@dataclass(frozen=True)
class DeviceTiming:
    """Per-repeat forward and backward compute times of one device, in ms, and the rows profiled."""

    fwd_ms: tuple[float, ...]
    bwd_ms: tuple[float, ...]
    rows_used: tuple[int, ...] = field(default=())


class ComputeBackend(abc.ABC):
    """Times one device's fused forward and backward over a set of tables."""

    name: str = "abstract"  # cpu | cuda | simulator
    operator: str = "abstract"  # fbgemm_tbe | embedding_bag | analytic
    device: str = "cpu"
    is_simulated: bool = False
    rule: ScalingRule = ScalingRule()

    @abc.abstractmethod
    def time_device(self, tables: Sequence[Table], batch_size: int, warmup: int, repeats: int) -> DeviceTiming:
        """Time the fused operator over ``tables`` (non-empty) on one device."""

    def reserve(self, devices: Sequence[Sequence[Table]]) -> None:
        """Prepare for timing each of `devices` (the tables of one `time_device` call each): a hook for a backend
        that keeps reused buffers (dreamshard.profiling.reserve); by default there is nothing to prepare."""
        return None

    def close(self) -> None:
        """Release cached resources: a hook, by default there are none."""
        return None


# --------------------------------------------------------------------------------------------- indices


class IndexBank:
    """Seeded synthetic index batches per (table, rows, batch size), LRU-bounded by bytes.

    A table's batches depend only on the seed, its content and the rows profiled, never on which other
    tables share its device, so the same table sees the same lookups in every placement.
    """

    def __init__(self, seed: int = 0, max_bytes: int = 256 * 1024 * 1024, num_batches: int = NUM_BATCHES) -> None:
        self.seed = seed
        self.max_bytes = max_bytes
        self.num_batches = num_batches
        self._cache: OrderedDict[tuple[object, ...], list[tuple[np.ndarray, np.ndarray]]] = OrderedDict()
        self._bytes = 0

    def batches(
        self, table: Table, rows: int, batch_size: int, count: int | None = None
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """`count` (default `num_batches`) batches of the table's lookups, each (indices, offsets) in TBE layout over
        its features: ``table.num_outputs * batch_size`` bags, feature-major, offsets of that length + 1 (one
        feature: the plain per-table batch). Batches are drawn in sequence from one seeded stream, so the first k
        are the same whatever `count` is."""
        count = self.num_batches if count is None else count
        key = (
            table.name,
            table.num_embeddings,
            table.pooling_factor,
            table.access_histogram,
            table.features,
            rows,
            batch_size,
        )
        hit = self._cache.get(key)
        if hit is not None and len(hit) >= count:
            self._cache.move_to_end(key)
            return hit[:count]
        if hit is not None:
            self._bytes -= sum(i.nbytes + o.nbytes for i, o in self._cache.pop(key))
        rng = np.random.default_rng([self.seed, zlib.crc32(table.name.encode()), rows, batch_size])
        out = [feature_indices(table, batch_size, rng, rows) for _ in range(count)]
        size = sum(i.nbytes + o.nbytes for i, o in out)
        self._cache[key] = out
        self._bytes += size
        while self._bytes > self.max_bytes and len(self._cache) > 1:
            _, old = self._cache.popitem(last=False)
            self._bytes -= sum(i.nbytes + o.nbytes for i, o in old)
        return out

    def clear(self) -> None:
        self._cache.clear()
        self._bytes = 0


def feature_indices(
    table: Table, batch_size: int, rng: np.random.Generator, rows: int
) -> tuple[np.ndarray, np.ndarray]:
    """One batch of a table's lookups, per feature: a shared table (`Table.features`) is k lookups into the same
    rows, each feature's bags drawn to its own pooling factor and the table's reuse histogram, concatenated
    feature-major (k x batch_size bags). A table without features: `synthesize_indices` of the table."""
    if not table.features:
        return synthesize_indices(table, batch_size, rng, num_rows=rows)
    parts = [
        synthesize_indices(
            table.model_copy(update={"pooling_factor": f.pooling_factor}), batch_size, rng, num_rows=rows
        )
        for f in table.features
    ]
    return fuse_batches([[p] for p in parts], 0)


def fuse_batches(
    per_table: Sequence[list[tuple[np.ndarray, np.ndarray]]], batch_no: int
) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate one batch of several tables in TBE layout: table-major bags (a shared table's features in
    order), offsets of length (total features) x B + 1."""
    idx_parts: list[np.ndarray] = []
    off_parts: list[np.ndarray] = []
    shift = 0
    for batches in per_table:
        idx, off = batches[batch_no % len(batches)]
        idx_parts.append(idx)
        off_parts.append(off[:-1] + shift)
        shift += int(off[-1])
    off_parts.append(np.array([shift], dtype=np.int64))
    indices = np.concatenate(idx_parts) if idx_parts else np.zeros(0, dtype=np.int64)
    return indices.astype(np.int64, copy=False), np.concatenate(off_parts).astype(np.int64, copy=False)


# --------------------------------------------------------------------------------------------- timing


#: What a fused operator's forward returns and its backward takes.
Output = TypeVar("Output")


class FusedOp(abc.ABC, Generic[Output]):
    """One device's fused operator with its inputs prepared: forward(batch) and backward(output)."""

    @abc.abstractmethod
    def forward(self, batch_no: int) -> Output: ...

    @abc.abstractmethod
    def backward(self, out: Output) -> None: ...


def _cuda_sync() -> None:
    import torch  # loads torch

    torch.cuda.synchronize()


#: The clocks a CPU timing can read (`timing_clock`): wall time, or the timing thread's own CPU time.
Clock = Literal["wall", "thread"]
_CLOCK: ContextVar[Callable[[], float]] = ContextVar("timing_clock", default=time.perf_counter)


@contextlib.contextmanager
def timing_clock(clock: Clock) -> Iterator[None]:
    """CPU timings inside the block (`time_op`) read `clock`: "wall" (perf_counter, the default) or "thread" (the
    calling thread's CPU time: on cores shared with other processes, the time the operator ran, not the time it
    waited for a core; only meaningful with one intra-op thread, where the operator runs on the calling thread)."""
    token = _CLOCK.set(time.thread_time if clock == "thread" else time.perf_counter)
    try:
        yield
    finally:
        _CLOCK.reset(token)


def time_op(op: FusedOp[Any], warmup: int, repeats: int, cuda: bool = False) -> tuple[list[float], list[float]]:
    """Warm up, then time ``repeats`` forward/backward iterations (ms) on the clock `timing_clock` set. CUDA uses
    events + synchronize."""
    for i in range(warmup):
        op.backward(op.forward(i))
    fwd: list[float] = []
    bwd: list[float] = []
    if cuda:
        import torch  # loads torch

        _cuda_sync()
        for i in range(repeats):
            s, m, e = (torch.cuda.Event(enable_timing=True) for _ in range(3))
            s.record()
            out = op.forward(warmup + i)
            m.record()
            op.backward(out)
            e.record()
            e.synchronize()
            fwd.append(float(s.elapsed_time(m)))
            bwd.append(float(m.elapsed_time(e)))
        return fwd, bwd
    now = _CLOCK.get()
    for i in range(repeats):
        t0 = now()
        out = op.forward(warmup + i)
        t1 = now()
        op.backward(out)
        t2 = now()
        fwd.append((t1 - t0) * 1e3)
        bwd.append((t2 - t1) * 1e3)
    return fwd, bwd


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """No garbage collection inside the timed region (a collection pause would land in one repeat's time)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@contextlib.contextmanager
def pinned_threads(num_threads: int) -> Iterator[None]:
    """Run with ``torch.set_num_threads(num_threads)``; restore the previous setting afterwards."""
    import torch  # loads torch

    before = torch.get_num_threads()
    torch.set_num_threads(max(1, int(num_threads)))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def median(xs: Sequence[float]) -> float:
    return float(np.median(np.asarray(xs, dtype=np.float64))) if len(xs) else 0.0


def summarize(xs: Sequence[float], statistic: str) -> float:
    """One figure of a device's timed repeats: their minimum or their median (`costs.Statistic`)."""
    if not len(xs):
        return 0.0
    return float(min(xs)) if statistic == "min" else median(xs)


def relative_iqr(xs: Sequence[float]) -> float:
    """(q75 - q25) / median, 0 for fewer than two values or a zero median."""
    if len(xs) < 2:
        return 0.0
    a = np.asarray(xs, dtype=np.float64)
    med = float(np.median(a))
    if med <= 0:
        return 0.0
    q75, q25 = np.percentile(a, [75, 25])
    return float((q75 - q25) / med)


def operator_groups(tables: Sequence[Table]) -> list[list[int]]:
    """Indices of `tables` per fused operator, in table order: the pooled tables in one (one output per bag), the
    sequence tables in one per profiled width (one output row per lookup: FBGEMM's TBE without pooling takes one
    dim, as TorchRec groups an EmbeddingCollection's tables)."""
    pooled = [i for i, t in enumerate(tables) if t.pooled]
    by_width: dict[int, list[int]] = {}
    for i, t in enumerate(tables):
        if not t.pooled:
            by_width.setdefault(padded_dim(t.embedding_dim), []).append(i)
    return ([pooled] if pooled else []) + list(by_width.values())


def arena_layout(tables: Sequence[Table], rows: Sequence[int]) -> list[tuple[list[int], int, int]]:
    """Where one device's operators keep their weights in a reused buffer: (the operator's table indices,
    `operator_groups`; its first element; its elements), one operator after the other. `build_device` builds so,
    and a backend reserving its buffer (`reserve`) sizes it so."""
    out: list[tuple[list[int], int, int]] = []
    offset = 0
    for group in operator_groups(tables):
        numel = sum(rows[i] * padded_dim(tables[i].embedding_dim) for i in group)
        out.append((group, offset, numel))
        offset += numel
    return out


class ChainedOp(FusedOp[list[Any]]):
    """Several fused operators of one device run one after the other: one forward (and backward) of the device."""

    def __init__(self, ops: Sequence[FusedOp[Any]]) -> None:
        self.ops = list(ops)

    def forward(self, batch_no: int) -> list[Any]:
        return [op.forward(batch_no) for op in self.ops]

    def backward(self, out: list[Any]) -> None:
        for op, o in zip(self.ops, out, strict=True):
            op.backward(o)


class TorchBackend(ComputeBackend):
    """A real backend: builds the device's fused operator on ``device`` and times it (cpu or cuda)."""

    def __init__(self, name: str, device: str, rule: ScalingRule, seed: int = 0) -> None:
        self.name = name
        self.device = device
        self.rule = rule
        self.bank = IndexBank(seed=seed)

    def close(self) -> None:
        from dreamshard.profiling.buffers import clear_all  # loads torch (a backend that timed has it)

        clear_all()  # the reused weights and gradient buffers go with the last oracle that timed on them

    @abc.abstractmethod
    def build(
        self,
        tables: Sequence[Table],
        rows: Sequence[int],
        batches: list[tuple[np.ndarray, np.ndarray]],
        *,
        arena_offset: int = 0,
    ) -> FusedOp[Any]:
        """The fused operator over ``tables`` (``rows`` each; all pooled, or all sequence tables of one width)
        with fused inputs ``batches`` prepared; a backend that keeps weights in a reused buffer places them
        `arena_offset` elements in (the device's earlier operators hold the ones before)."""

    def build_device(
        self, tables: Sequence[Table], rows: Sequence[int], per_table: Sequence[list[tuple[np.ndarray, np.ndarray]]]
    ) -> FusedOp[Any]:
        """The device's operators (`operator_groups`) over its tables' batches `per_table`, as one."""
        ops: list[FusedOp[Any]] = []
        for group, offset, _ in arena_layout(tables, rows):
            fused = [fuse_batches([per_table[i] for i in group], b) for b in range(len(per_table[0]))]
            ops.append(self.build([tables[i] for i in group], [rows[i] for i in group], fused, arena_offset=offset))
        return ops[0] if len(ops) == 1 else ChainedOp(ops)

    def time_device(self, tables: Sequence[Table], batch_size: int, warmup: int, repeats: int) -> DeviceTiming:
        # The index budget (inventory.index_budget): the device's batches are sized before anything is allocated; a
        # device whose NUM_BATCHES batches do not fit cycles through fewer, one that does not fit is refused.
        n = len(tables)
        what = "measuring it (one batch)" if n == 1 else f"measuring its device ({n} tables, one batch)"
        # no more batches than iterations: a race round's 1 warm-up and 1 repeat use two (the bank's stream gives
        # the same first batches whatever the count, so a later profile of more iterations extends them)
        wanted = max(1, min(self.bank.num_batches, warmup + repeats))
        k = batches_within_budget(tables, batch_size, wanted, what)
        rows = self.rule.device_rows(list(tables))
        per_table = [self.bank.batches(t, r, batch_size, k) for t, r in zip(tables, rows, strict=True)]
        op = self.build_device(tables, rows, per_table)
        try:
            with gc_paused():
                fwd, bwd = time_op(op, warmup, repeats, cuda=self.device.startswith("cuda"))
        finally:
            del op
            gc.collect(1)  # the young generations only: the operator is freed by refcount, and a full collection
            # walks every object the process holds (with torch loaded, longer than many timings)
        return DeviceTiming(tuple(fwd), tuple(bwd), tuple(rows))
