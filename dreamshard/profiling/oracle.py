"""The Oracle: measures a placement's per-device costs, the ground truth of the product (docs/architecture/measuring.md,
"Measuring").

Per device: the compute of the fused operators over its units (the `statistic` of `repeats` timed runs after
`warmup`) and the communication of its outputs and gradients, costed by the collective models fitted for the world
size (`Oracle._device_cost`); its spread is the relative IQR of its per-repeat totals. A placement's overall cost
is its bottleneck device's total; an empty device costs exactly 0. `make_oracle` is the one construction.
"""

from __future__ import annotations

import contextlib
import statistics
from collections.abc import Iterator, Mapping
from dataclasses import replace
from functools import partial

import dreamshard.profiling.comm as comm_mod
from dreamshard.errors import ProfilingError
from dreamshard.placement.expand import with_units
from dreamshard.placement.validate import check_placement
from dreamshard.profiling.base import (
    Clock,
    ComputeBackend,
    DeviceTiming,
    pinned_threads,
    relative_iqr,
    summarize,
    timing_clock,
)
from dreamshard.profiling.corpus import DeviceCorpus, device_key, fused_operators
from dreamshard.profiling.names import BACKENDS
from dreamshard.profiling.scaling import CPU_RULE, ScalingRule
from dreamshard.profiling.simulator import SimulatorBackend, SimulatorParams
from dreamshard.values import (
    BackendInfo,
    CommModel,
    Costs,
    DeviceCost,
    Inventory,
    Measurement,
    MeasurementKind,
    Table,
    Topology,
    new_measurement_id,
)
from dreamshard.values.costs import Collective, Statistic
from dreamshard.values.units import parse_unit

DEFAULT_BATCH_SIZE = 2048


class Oracle:
    """A compute backend + a comm model provider + the measurement settings."""

    def __init__(
        self,
        backend: ComputeBackend,
        *,
        warmup: int = 3,
        repeats: int = 7,
        num_threads: int = 1,
        row_cap: int | None = None,
        comm_backend: str = "gloo",
        comm_models: Mapping[int, CommModel] | None = None,
        seed: int = 0,
        statistic: Statistic = "min",
    ) -> None:
        """``comm_models`` pins the comm model of given world sizes (no benchmark for those); ``seed`` is the
        backend's index seed (part of a corpus key); ``statistic`` how a device's repeats become its figure
        (`costs.Statistic`; the corpus keeps the repeats, so it serves either)."""
        if warmup < 0:
            raise ProfilingError(f"warmup must be >= 0, got {warmup}")
        if repeats < 1:
            raise ProfilingError(f"repeats must be >= 1, got {repeats}")
        if num_threads < 1:
            raise ProfilingError(f"num_threads must be >= 1, got {num_threads}")
        if statistic not in ("median", "min"):
            raise ProfilingError(f"statistic must be median or min, got {statistic!r}")
        self.statistic = statistic
        self.backend = backend
        self.warmup = warmup
        self.repeats = repeats
        self.num_threads = num_threads
        self.row_cap = row_cap
        self.comm_backend = comm_backend
        # fitted (or pinned) models by (world size, collective)
        self._comm: dict[tuple[int, str], CommModel] = {(n, m.collective): m for n, m in (comm_models or {}).items()}
        self._batch_size = DEFAULT_BATCH_SIZE
        self.seed = seed
        #: device timings reused and recorded here when set (the profile stage and the training loop only)
        self.corpus: DeviceCorpus | None = None
        #: timing passes per measurement and the CPU clock (`timing_as`): 1 and wall time for planning; the gate's
        #: comparison takes more passes and the thread's CPU time
        self.passes = 1
        self.clock: Clock = "wall"

    # ------------------------------------------------------------------------------------ descriptions

    def backend_info(self, batch_size: int | None = None) -> BackendInfo:
        return BackendInfo(
            name=self.backend.name,
            operator=self.backend.operator,
            device=self.backend.device,
            num_threads=self.num_threads,
            batch_size=batch_size or self._batch_size,
            warmup=self.warmup,
            repeats=self.repeats,
            row_cap=self.row_cap,
            is_simulated=self.backend.is_simulated,
            statistic=self.statistic,
        )

    @property
    def info(self) -> BackendInfo:
        """Backend and settings (batch_size: the last topology measured, 2048 before any)."""
        return self.backend_info()

    def describe(self) -> str:
        i = self.info
        label = " [SIMULATED]" if i.is_simulated else ""
        threads = f"{i.num_threads} thread(s)"
        return f"{i.name}/{i.operator} on {i.device}, {threads}, warmup {i.warmup}, repeats {i.repeats}{label}"

    # ------------------------------------------------------------------------------------ comm

    def comm_model(self, topology: Topology, refit: bool = False) -> CommModel:
        """The alpha-beta all-to-all model for ``topology.num_devices`` (fitted once, cached)."""
        return self.collective_model(topology, "all_to_all", refit)

    def collective_model(self, topology: Topology, collective: Collective, refit: bool = False) -> CommModel:
        """The alpha-beta model of `collective` (all-to-all of pooled outputs, reduce-scatter of row-wise partial
        sums, all-reduce of data-parallel gradients) for ``topology.num_devices``, fitted once and cached; the
        declared world's model when the topology's world declares its figures (dreamshard.values.world)."""
        n = topology.num_devices
        if (world := comm_mod.declared(topology)) is not None:
            return comm_mod.world_model(world, n, collective)
        key = (n, collective)
        if refit or key not in self._comm:
            sim = getattr(self.backend, "comm_model", None)
            if self.backend.is_simulated and callable(sim):
                self._comm[key] = sim(n, collective)
            else:
                self._comm[key] = comm_mod.comm_model_for(n, self.comm_backend, refit=refit, collective=collective)
        return self._comm[key]

    def _device_cost(
        self, tables: list[Table], topology: Topology, comm: CommModel, fingerprint: str
    ) -> tuple[DeviceCost, float]:
        """One device's four costs and its spread. Table-wise and column-wise units and row shards run at the global
        batch (row shards: their share of the lookups); data-parallel replicas at this device's share of the batch
        (`fused_operators`). Outputs (`Table.output_elements_per_sample`): all-to-all (whole tables, column shards,
        and a sequence table's row shards: the rows its lookups found), reduce-scatter forward and its all-gather
        backward (a pooled table's row shards: partial sums of the whole batch); data-parallel gradients all-reduced
        (backward)."""
        batch, n = topology.batch_size, topology.num_devices
        kinds = [parse_unit(t.name).kind for t in tables]
        replicas = [t for t, k in zip(tables, kinds, strict=True) if k == "replica"]
        rows = [t for t, k in zip(tables, kinds, strict=True) if k == "row" and t.pooled]
        a2a = [
            t for t, k in zip(tables, kinds, strict=True) if k in ("table", "column") or (k == "row" and not t.pooled)
        ]
        timings = [self._time_device(group, b, fingerprint) for group, b in fused_operators(tables, topology)]
        fwd = [sum(x) for x in zip(*(t.fwd_ms for t in timings), strict=True)]
        bwd = [sum(x) for x in zip(*(t.bwd_ms for t in timings), strict=True)]
        out_ms = grad_ms = 0.0
        if n > 1:
            if a2a:  # dim x outputs (shared tables), dim x lookups (sequence tables)
                out_ms = comm_mod.device_comm_ms(
                    topology, comm, comm_mod.device_comm_bytes(batch, [t.output_elements_per_sample for t in a2a], n)
                )
            if rows:
                rs = self.collective_model(topology, "reduce_scatter")
                out_ms += comm_mod.device_comm_ms(
                    topology, rs, comm_mod.reduce_scatter_bytes(batch, [t.output_dim for t in rows], n)
                )
            grad_ms = out_ms
            if replicas:
                ar = self.collective_model(topology, "all_reduce")
                grad_ms += comm_mod.device_comm_ms(
                    topology, ar, comm_mod.all_reduce_bytes([(t.num_embeddings, t.embedding_dim) for t in replicas], n)
                )
        cost = DeviceCost(
            fwd_compute=summarize(fwd, self.statistic),
            fwd_comm=out_ms,
            bwd_comm=grad_ms,
            bwd_compute=summarize(bwd, self.statistic),
        )
        return cost, relative_iqr([f + b + out_ms + grad_ms for f, b in zip(fwd, bwd, strict=True)])

    def set_comm_model(self, world_size: int, model: CommModel) -> None:
        """Pin the comm model used for ``world_size`` devices (e.g. one fitted elsewhere) for its collective."""
        self._comm[(world_size, model.collective)] = model

    # ------------------------------------------------------------------------------------ measuring

    def measure(
        self,
        inventory: Inventory,
        placement: Mapping[str, int],
        topology: Topology,
        *,
        kind: MeasurementKind = "placement",
        task: str = "",
        measurement_id: str | None = None,
        kernels: Mapping[str, str] | None = None,
        cache_load_factors: Mapping[str, float] | None = None,
    ) -> Measurement:
        """Measure one placement. ``placement`` may cover a subset of the inventory for kind="single" or a task,
        and may name units (column shards, row shards, replicas: dreamshard.values.units) instead of whole tables; each
        runs as its sharding type runs (`_device_cost`). The record keeps `inventory`'s name and fingerprint.
        `kernels` / `cache_load_factors`: a plan's (by table), so that its memory is checked as the plan keeps it
        (a table cached from host memory); the units are timed with the backend's own operator."""
        if kind not in ("single", "placement"):
            raise ProfilingError(f"kind must be 'single' or 'placement', got '{kind}'")
        fingerprint = inventory.fingerprint()
        inventory = with_units(inventory, placement)
        check_placement(
            inventory,
            placement,
            topology,
            partial=(kind == "single" or bool(task)),
            kernels=kernels,
            cache_load_factors=cache_load_factors,
        )
        batch = topology.batch_size
        self._batch_size = batch
        n = topology.num_devices
        comm = self.comm_model(topology)
        by_name = inventory.by_name()
        ordered = [t.name for t in inventory.tables if t.name in placement]
        devices = [[by_name[name] for name in ordered if int(placement[name]) == d] for d in range(n)]
        per_device, spreads = self._devices(devices, topology, comm, fingerprint)
        return Measurement(
            measurement_id=measurement_id or new_measurement_id(),
            kind=kind,
            task=task,
            inventory_name=inventory.name,
            inventory_fingerprint=fingerprint,
            topology=topology,
            placement={name: int(placement[name]) for name in ordered},
            costs=Costs.from_devices(per_device),
            spread=tuple(round(s, 6) for s in spreads),
            backend=self.backend_info(batch),
            comm_model=comm,
        )

    def _devices(
        self, devices: list[list[Table]], topology: Topology, comm: CommModel, fingerprint: str
    ) -> tuple[list[DeviceCost], list[float]]:
        """Every device's costs and spread (an empty device: exactly 0), timed in `passes` passes over the devices
        (each device once per pass, so a device's passes are apart in time), each device's figures the
        component-wise median over its passes. A simulated backend (exact figures) is timed once."""
        passes = 1 if self.backend.is_simulated else self.passes
        threads = contextlib.nullcontext() if self.backend.is_simulated else pinned_threads(self.num_threads)
        clock = timing_clock(self.clock if self.num_threads == 1 else "wall")  # several threads: wall time only
        runs: list[list[tuple[DeviceCost, float]]] = []
        with threads, clock:
            for _ in range(passes):
                runs.append(
                    [
                        self._device_cost(t, topology, comm, fingerprint) if t else (DeviceCost.zero(), 0.0)
                        for t in devices
                    ]
                )
        if passes == 1:
            return [c for c, _ in runs[0]], [s for _, s in runs[0]]
        per_device = [
            DeviceCost.from_list([statistics.median(x) for x in zip(*(r[d][0].as_list() for r in runs), strict=True)])
            for d in range(len(devices))
        ]
        return per_device, [statistics.median(r[d][1] for r in runs) for d in range(len(devices))]

    @contextlib.contextmanager
    def timing_as(self, passes: int, clock: Clock = "wall") -> Iterator[None]:
        """Inside the block, each device of a measured placement is timed `passes` times and its figure is the median
        over them (`_devices`): one burst of interference moves one pass, not the median; CPU timings read `clock`
        (`profiling.base.timing_clock`; "thread": the timing thread's CPU time, so a process sharing the cores
        adds no waiting; with one intra-op thread only). The gate's comparison measures so (publish.timing_passes,
        publish.timing_clock); planning measures once on the wall clock. The oracle's own settings come back after."""
        if passes < 1:
            raise ProfilingError(f"passes must be >= 1, got {passes}")
        if clock not in ("wall", "thread"):
            raise ProfilingError(f"clock must be wall or thread, got {clock!r}")
        before = (self.passes, self.clock)
        self.passes, self.clock = passes, clock
        try:
            yield
        finally:
            self.passes, self.clock = before

    @contextlib.contextmanager
    def corpus_as(self, corpus: DeviceCorpus | None) -> Iterator[None]:
        """Measure with `corpus` (None: none) inside the block; the oracle's own corpus is restored after it."""
        before, self.corpus = self.corpus, corpus
        try:
            yield
        finally:
            self.corpus = before

    def _time_device(self, tables: list[Table], batch: int, inventory: str) -> DeviceTiming:
        """One device's timing: from the corpus when it holds these tables under these settings, else measured
        (and added to it)."""
        if self.corpus is None:
            return self.backend.time_device(tables, batch, self.warmup, self.repeats)
        info = self.backend_info(batch)
        key = device_key(info, self.seed, tables)
        timing = self.corpus.get(key)
        if timing is None:
            timing = self.backend.time_device(tables, batch, self.warmup, self.repeats)
            self.corpus.add(key, info, tables, timing, inventory, seed=self.seed)
        return timing

    def measure_single(
        self, inventory: Inventory, table: str, topology: Topology, measurement_id: str | None = None
    ) -> Measurement:
        """One table alone on device 0 of ``topology`` (its comm included), kind="single"."""
        return self.measure(inventory, {table: 0}, topology, kind="single", measurement_id=measurement_id)

    def single_table_costs(self, inventory: Inventory, topology: Topology) -> dict[str, float]:
        """Total ms of each table alone on a device of ``topology``."""
        return {t.name: self.measure_single(inventory, t.name, topology).overall_ms for t in inventory.tables}

    def close(self) -> None:
        self.backend.close()


def _cuda_available() -> bool:
    import torch  # loads torch

    try:
        return bool(torch.cuda.is_available())
    except Exception:
        return False


def make_oracle(
    backend: str = "cpu",
    *,
    warmup: int = 3,
    repeats: int = 7,
    num_threads: int = 1,
    seed: int = 0,
    row_cap: int | None = None,
    simulator: SimulatorParams | None = None,
    statistic: Statistic = "min",
) -> Oracle:
    """Build the oracle for ``backend`` (cpu | cuda | simulator); ``simulator`` sets the simulator's knobs.

    The one construction of an oracle: ``ProfileConfig.oracle()`` (params.yaml `profile:`, what the CLI, the DVC
    stages and the flows use) calls it with its settings; code without a config calls it directly.
    """
    if row_cap is not None and row_cap < 1:
        raise ProfilingError(f"row_cap must be >= 1, got {row_cap}")
    settings = partial(
        Oracle, warmup=warmup, repeats=repeats, num_threads=num_threads, row_cap=row_cap, seed=seed, statistic=statistic
    )
    if backend == "simulator":
        return settings(SimulatorBackend(simulator))
    if backend in ("cpu", "cuda"):
        impl, comm_backend = _torch_backend(backend, row_cap, seed)
        return settings(impl, comm_backend=comm_backend)
    raise ProfilingError(f"unknown profiling backend '{backend}'; choose from {', '.join(BACKENDS)}")


def _torch_backend(backend: str, row_cap: int | None, seed: int) -> tuple[ComputeBackend, str]:
    """The cpu or cuda backend (FBGEMM's operator where it loads, else torch's EmbeddingBag) and the collectives'
    backend. Torch and the backends' modules load here, not with this module: a simulated or merely planned
    profiling run (the batch dispatcher, `stop-prefect.sh`) never loads them."""
    import torch  # loads torch

    from dreamshard.profiling.embedding_bag_backend import EmbeddingBagBackend  # loads torch
    from dreamshard.profiling.fbgemm_backend import FbgemmBackend, fbgemm_available  # loads torch

    if backend == "cpu":
        rule = _with_cap(CPU_RULE, row_cap)
        if fbgemm_available():
            return FbgemmBackend("cpu", "cpu", rule, seed=seed), "gloo"
        return EmbeddingBagBackend("cpu", "cpu", rule, seed=seed), "gloo"
    if not _cuda_available():
        raise ProfilingError("backend 'cuda' needs a CUDA GPU, and torch sees none here; use --backend cpu")
    free, _ = torch.cuda.mem_get_info()
    rule = ScalingRule(max_table_bytes=None, row_cap=row_cap, max_device_bytes=int(free * 0.5))
    impl: ComputeBackend = (
        FbgemmBackend("cuda", "cuda:0", rule, seed=seed)
        if fbgemm_available(cuda=True)
        else EmbeddingBagBackend("cuda", "cuda:0", rule, seed=seed)
    )
    return impl, "nccl" if torch.cuda.device_count() >= 2 else "gloo"


def _with_cap(rule: ScalingRule, row_cap: int | None) -> ScalingRule:
    return replace(rule, row_cap=row_cap)


__all__ = ["BACKENDS", "Oracle", "make_oracle"]
