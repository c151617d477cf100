"""A deterministic analytic cost model: SIMULATED, for fast tests and scale studies, never a measurement
(docs/architecture/measuring.md, "Measuring").

Every record it makes says so (`BackendInfo(name="simulator", operator="analytic", is_simulated=True)`, comm
labelled "simulated"). Its shape mimics fused TBE so the learning code faces the same non-additivity: a kernel
overhead paid once per device, lookup work proportional to batch x pooling x dim, and a penalty super-linear in
the device's combined working set. Communication is costed as the oracle does. `slowdown`, `table_slowdown` and
`latency_ms` exist only for tests of the pipeline around it (a host that got slower across the board; tables that
got slower, as when their statistics moved; a timing that takes wall-clock time).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from dreamshard.errors import ProfilingError
from dreamshard.inventory.histogram import effective_histogram
from dreamshard.profiling.base import ComputeBackend, DeviceTiming
from dreamshard.profiling.comm import device_comm_ms, zero_model
from dreamshard.profiling.scaling import ScalingRule
from dreamshard.values import REUSE_BIN_EDGES, CommModel, Table, Topology
from dreamshard.values.costs import Collective


@dataclass(frozen=True)
class SimulatorParams:
    launch_ms: float = 0.08
    per_table_ms: float = 0.004
    ns_per_element: float = 0.05  # ms per 1e6 (lookup x dim) elements, x 1e-3
    bwd_factor: float = 2.0
    cache_bytes: float = 8.0 * 1024 * 1024
    ws_exponent: float = 1.5
    alpha_ms: float = 0.05
    beta_ms_per_mb: float = 0.4
    slowdown: float = 1.0  # every cost (compute and communication) times this
    # {table: factor}: the named tables cost `factor` times their own share of a device's compute
    table_slowdown: tuple[tuple[str, float], ...] = ()
    latency_ms: float = 0.0  # wall-clock time one device timing takes (0: instant)


def _mean_reuse(table: Table) -> float:
    """Mean accesses per unique row in a batch implied by the declared or assumed histogram (1 without lookups).

    Bin k > 0 holds integer counts in (2**(k-1), 2**k]: midpoint (2**(k-1) + 1 + 2**k) / 2; the open last
    bin is taken as 1.5 x its lower edge.
    """
    hist = effective_histogram(table)  # declared, else the assumed one
    if hist is None:
        return 1.0
    n = len(REUSE_BIN_EDGES)
    mids = [1.0] + [(2 ** (k - 1) + 1 + 2**k) / 2 for k in range(1, n - 1)] + [1.5 * 2 ** (n - 2)]
    return max(1.0, sum(h * m for h, m in zip(hist, mids, strict=True)))


class SimulatorBackend(ComputeBackend):
    """Analytic, deterministic: the same tables always cost the same; repeats are identical."""

    name = "simulator"
    operator = "analytic"
    device = "simulated"
    is_simulated = True
    rule = ScalingRule(max_table_bytes=None, max_device_bytes=None)

    def __init__(self, params: SimulatorParams | None = None) -> None:
        self.p = params or SimulatorParams()
        if not self.p.slowdown > 0:
            raise ProfilingError(f"simulator slowdown must be > 0, got {self.p.slowdown}")
        for name, factor in self.p.table_slowdown:
            if not factor > 0:
                raise ProfilingError(f"simulator slowdown of table '{name}' must be > 0, got {factor}")

    def compute_ms(self, tables: Sequence[Table], batch_size: int) -> tuple[float, float]:
        fwd, bwd = self._compute_ms(tables, batch_size)
        slower = dict(self.p.table_slowdown)
        for t in tables:  # a slowed table's own share of the device's compute, times its factor
            if slower.get(t.name, 1.0) != 1.0:
                one_fwd, one_bwd = self._compute_ms([t], batch_size)
                fwd, bwd = fwd + (slower[t.name] - 1.0) * one_fwd, bwd + (slower[t.name] - 1.0) * one_bwd
        return fwd * self.p.slowdown, bwd * self.p.slowdown

    def _compute_ms(self, tables: Sequence[Table], batch_size: int) -> tuple[float, float]:
        """The device's fused forward and backward compute, before any slowdown."""
        p = self.p
        if not tables:
            return 0.0, 0.0
        work = 0.0
        ws = 0.0
        for t in tables:
            lookups = batch_size * t.pooling_factor
            work += lookups * t.embedding_dim * p.ns_per_element * 1e-6
            unique = min(float(t.num_embeddings), lookups / _mean_reuse(t))
            ws += unique * t.embedding_dim * 4
        penalty = 1.0 + (ws / p.cache_bytes) ** p.ws_exponent
        fixed = p.per_table_ms * len(tables)
        fwd = p.launch_ms + fixed + work * penalty
        bwd = 2 * p.launch_ms + fixed + p.bwd_factor * work * penalty
        return fwd, bwd

    def shared_compute_ms(self) -> float:
        """fwd + bwd compute a device pays once however many tables it holds (the kernel launches): the part
        of each single-table cost that tables placed together share (a lower bound's floor, not a measurement)."""
        return 3 * self.p.launch_ms * self.p.slowdown

    def table_floor_ms(self, table: Table, batch_size: int) -> float:
        """The least fwd + bwd compute `table` adds to the devices that hold it, however it is placed or split
        into column shards: its per-table term once and its lookup work with the working-set penalty at its floor
        (1; shards split the work, never shrink it). Summed over tables, with `shared_compute_ms` once per
        device, it bounds every placement's compute from below (dreamshard.evaluation.bounds)."""
        p = self.p
        work = batch_size * table.pooling_factor * table.embedding_dim * p.ns_per_element * 1e-6
        return (2 * p.per_table_ms + (1 + p.bwd_factor) * work) * p.slowdown

    def time_device(self, tables: Sequence[Table], batch_size: int, warmup: int, repeats: int) -> DeviceTiming:
        fwd, bwd = self.compute_ms(tables, batch_size)
        if self.p.latency_ms > 0:
            time.sleep(self.p.latency_ms / 1000.0)
        n = max(1, repeats)
        return DeviceTiming((fwd,) * n, (bwd,) * n, tuple(t.num_embeddings for t in tables))

    def comm_model(self, world_size: int, collective: Collective = "all_to_all") -> CommModel:
        """The simulated alpha-beta model of `collective` on `world_size` devices (one device's rate)."""
        if world_size <= 1:
            return zero_model(collective)
        return CommModel(
            alpha_ms=self.p.alpha_ms * self.p.slowdown,
            beta_ms_per_mb=self.p.beta_ms_per_mb * self.p.slowdown,
            backend="simulated",
            world_size=world_size,
            collective=collective,
        )

    def device_comm_ms(self, topology: Topology, nbytes: float, collective: Collective = "all_to_all") -> float:
        """One device's simulated cost of sending `nbytes` in `collective` on `topology` (host-aware; flat: the
        simulated model's ``cost_ms``)."""
        return device_comm_ms(topology, self.comm_model(topology.num_devices, collective), nbytes)
