"""TorchRec's own planner as a contender: ``EmbeddingShardingPlanner`` restricted to table-wise sharding.

How our topology maps onto TorchRec's:

* ``world_size`` = ``num_devices``; ``compute_device`` = our ``device_type`` (TorchRec's planner runs on a
  CPU-only machine for both: it works on meta tensors and analytic estimates, no process group needed).
* Our ``memory_per_device_gb`` is TorchRec's per-rank capacity for that device kind: ``hbm_cap`` on cuda,
  ``ddr_cap`` on cpu (the fused kernel keeps its weights there).
* Memory model (``memory_model``): by default ``"dreamshard"``, TorchRec's storage estimator is replaced by
  one that charges each table its weights only (rows x dim x bytes), our model, so TorchRec competes under
  exactly the memory constraint every other sharder obeys; its perf estimator, proposers and greedy
  partitioner are untouched. ``"torchrec"`` keeps TorchRec's own ``EmbeddingStorageEstimator``, which adds
  each table's input/output buffers (and optimizer state, none for fused SGD): stricter, so every plan it
  accepts also fits ours, but it refuses placements that fit ours with modest slack (e.g. 20 tables on
  4 devices with 10 % spare memory; 1,000 small tables on 16 devices with 50 % spare).
* Storage reservation (``reserve_fraction``): TorchRec's default ``HeuristicalStorageReservation`` keeps
  back 15 % of HBM plus an estimate of dense parameters. Our memory model counts table weights only, so
  by default we reserve nothing; pass ``reserve_fraction=0.15`` to reproduce TorchRec's margin. We apply
  the fraction to the capacity we hand TorchRec (its own percentage reservation only shrinks HBM, so it
  would be silently ignored on cpu) and give it a zero ``FixedPercentageStorageReservation``.
* ``Sharder.shard`` checks the result against ``dreamshard.memory.check_placement`` in any case.
* ``batch_size`` = our topology's batch size; each table's ``pooling_factor`` is its TorchRec
  ``ParameterConstraints.pooling_factors``; only ``compute_kernels=["fused"]`` is allowed.
* Sharding types (``column_wise``): ``"auto"`` (default) keeps a table that takes at most half a device
  ``table_wise``; for a bigger one TorchRec may also choose ``column_wise``, and must for a table larger than a
  device. Its shards are the widest multiple-of-4 divisor of the dim whose shard takes at most half a device (at
  most a whole device if none does; TorchRec's ``min_partition``). So an inventory of small tables gets exactly
  the table-wise plan, while Criteo Terabyte at dim 128 plans on 8 x 16 GB (its 23 GB tables in 32-column
  shards; table-wise alone TorchRec's greedy partitioner also fails on the 14 GB table). ``"never"`` is
  table-wise only: a table larger than a device is then an InfeasiblePlacementError naming it.
  The result is read back through ``dreamshard.integrations.torchrec`` (the same import as any TorchRec plan).

Table names go to TorchRec as ``t0, t1, ...`` (an EmbeddingBagCollection rejects names with dots), so any
inventory name works; the ranks are mapped back to our names.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import re
import warnings
from collections.abc import Iterator
from typing import Any, Literal

import torch

from dreamshard.errors import InfeasiblePlacementError, PlanError, UnknownSharderError
from dreamshard.integrations.torchrec import document_from_sharding_plan
from dreamshard.memory import check_each_table_fits
from dreamshard.sharders.base import Sharder, make_plan
from dreamshard.shards import COLUMN_ALIGN, fold
from dreamshard.types import GB, ColumnShard, Inventory, Plan, Table, Topology

MemoryModel = Literal["dreamshard", "torchrec"]
ColumnWise = Literal["auto", "never"]

INSTALL_HINT = "torchrec sharder needs torchrec: pip install torchrec fbgemm-gpu-cpu (or fbgemm-gpu on CUDA)"

_SHARD_FAILED = re.compile(
    r"storage: Storage\((?P<need>[^)]*)\).*?of table (?P<table>\S+?),\s*"
    r"largest device storage: Storage\((?P<storage>[^)]*)\)",
    re.DOTALL,
)
_TORCHREC_HANDLER_LOGGER = re.compile(r"^[A-Za-z0-9]+Logger-[A-Za-z]+Handler$")
_GLOBAL_NEED = re.compile(r"Global storage requirement for model parallel: Storage\((?P<storage>[^)]*)\)")
_GLOBAL_HAVE = re.compile(r"Global storage available for model parallel: Storage\((?P<storage>[^)]*)\)")


def _internal_name(i: int) -> str:
    return f"t{i}"


def split_width(table: Table, capacity_bytes: int) -> int | None:
    """Column-shard width for a table larger than a device: the widest multiple-of-4 divisor of its dim whose
    shard takes at most half a device, else at most a whole device; None if even 4 columns do not fit."""
    widths = [w for w in range(table.embedding_dim, 0, -1)
              if table.embedding_dim % w == 0 and w % COLUMN_ALIGN == 0 and w < table.embedding_dim]
    per_column = table.num_embeddings * table.bytes_per_element
    for budget in (capacity_bytes // 2, capacity_bytes):
        fitting = [w for w in widths if w * per_column <= budget]
        if fitting:
            return fitting[0]
    return None


def _storage_field(storage: str, key: str) -> float | None:
    """Read ``key`` (hbm/ddr) from TorchRec's ``Storage(hbm=1, ddr=2)`` or ``Storage(hbm = 0.1 GB, ...)``."""
    m = re.search(rf"{key}\s*=\s*([0-9.eE+-]+)\s*(GB)?", storage)
    if m is None:
        return None
    value = float(m.group(1))
    return value if m.group(2) else value / GB


def _torchrec_loggers() -> list[logging.Logger]:
    """TorchRec's loggers: the ``torchrec.*`` module loggers and its ``<Destination>-<Handler>`` ones."""
    names = [
        n
        for n in list(logging.root.manager.loggerDict)
        if n == "torchrec" or n.startswith("torchrec.") or _TORCHREC_HANDLER_LOGGER.match(n)
    ]
    return [logging.getLogger(n) for n in names]


@contextlib.contextmanager
def _quiet(verbose: bool) -> Iterator[None]:
    """Silence TorchRec's loggers and warnings (stats box, topology advice) unless asked for them."""
    if verbose:
        yield
        return
    loggers = [*_torchrec_loggers(), logging.getLogger("torchrec")]
    old = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, old):
            lg.setLevel(level)


@functools.cache
def _weights_only_estimator_class() -> type:
    """A TorchRec ShardEstimator charging each shard its weights only: our memory model (defined lazily,
    its base class lives in torchrec)."""
    # optional dependency: torchrec
    from torchrec.distributed.planner.types import ShardEstimator, Storage

    class WeightsOnlyStorageEstimator(ShardEstimator):
        def __init__(self, topology: Any, constraints: dict[str, Any] | None = None) -> None:
            self._on_ddr = topology.compute_device == "cpu"

        def estimate(self, sharding_options: list[Any], sharder_data_map: Any = None) -> None:
            for option in sharding_options:
                element = option.tensor.element_size()
                for shard in option.shards:
                    nbytes = int(math.prod(shard.size)) * element
                    shard.storage = Storage(hbm=0, ddr=nbytes) if self._on_ddr else Storage(hbm=nbytes, ddr=0)

    return WeightsOnlyStorageEstimator


class TorchRecSharder(Sharder):
    """Table-wise placement by TorchRec's ``EmbeddingShardingPlanner`` (its analytic estimator and greedy
    partitioner), wrapped so that its result is a dreamshard Plan and its failures are our typed errors.
    `place()` (Sharder's) is its plan's whole-table placement, an error when TorchRec split a table."""

    name = "torchrec"
    family = "torchrec"
    options = frozenset({"reserve_fraction", "memory_model", "verbose", "column_wise"})

    def __init__(
        self,
        reserve_fraction: float = 0.0,
        memory_model: MemoryModel = "dreamshard",
        verbose: bool = False,
        column_wise: ColumnWise = "auto",
    ) -> None:
        if not 0.0 <= reserve_fraction < 1.0:
            raise PlanError(f"torchrec reserve_fraction must be in [0, 1), got {reserve_fraction}")
        if memory_model not in ("dreamshard", "torchrec"):
            raise PlanError(f"torchrec memory_model must be 'dreamshard' or 'torchrec', got '{memory_model}'")
        if column_wise not in ("auto", "never"):
            raise PlanError(f"torchrec column_wise must be 'auto' or 'never', got '{column_wise}'")
        self.reserve_fraction = reserve_fraction
        self.memory_model = memory_model
        self.verbose = verbose
        self.column_wise = column_wise

    def shard(self, inventory: Inventory, topology: Topology) -> Plan:
        placement, shards = self._plan(inventory, topology)
        return make_plan(inventory, topology, placement, self.name, column_shards=shards)

    def _split_widths(self, inventory: Inventory, topology: Topology) -> dict[str, int]:
        """{table: column-shard width} for the tables TorchRec may split: more than half a device (module docstring)."""
        if self.column_wise == "never":
            check_each_table_fits(inventory, topology)
            return {}
        cap = topology.memory_per_device_bytes
        widths: dict[str, int] = {}
        for t in inventory.tables:
            if 2 * t.size_bytes <= cap:
                continue
            w = split_width(t, cap)
            if w is None:
                narrowest = t.num_embeddings * t.bytes_per_element * COLUMN_ALIGN / GB
                raise InfeasiblePlacementError(
                    t.name, t.size_gb, topology.memory_per_device_gb,
                    f"larger than one device, and even a {COLUMN_ALIGN}-column shard needs {narrowest:.3f} GB",
                )
            widths[t.name] = w
        return widths

    def _plan(self, inventory: Inventory, topology: Topology) -> tuple[dict[str, int], dict[str, tuple[ColumnShard, ...]]]:
        """(whole-table placement, column shards) from TorchRec's planner."""
        widths = self._split_widths(inventory, topology)
        cap = topology.memory_per_device_bytes
        try:  # optional dependency: torchrec
            from torchrec.distributed.embedding_types import EmbeddingComputeKernel
            from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
            from torchrec.distributed.planner import EmbeddingShardingPlanner, ParameterConstraints
            from torchrec.distributed.planner.stats import EmbeddingStats, NoopEmbeddingStats
            from torchrec.distributed.planner.storage_reservations import FixedPercentageStorageReservation
            from torchrec.distributed.planner.types import PlannerError
            from torchrec.distributed.types import ShardingType
            from torchrec.modules.embedding_configs import DataType, EmbeddingBagConfig
            from torchrec.modules.embedding_modules import EmbeddingBagCollection
        except ImportError as e:
            raise UnknownSharderError(f"{INSTALL_HINT} ({e})") from None

        dtypes = {"fp32": DataType.FP32, "fp16": DataType.FP16}
        tables = inventory.tables
        configs = [
            EmbeddingBagConfig(
                num_embeddings=t.num_embeddings,
                embedding_dim=t.embedding_dim,
                name=_internal_name(i),
                feature_names=[f"f{i}"],
                data_type=dtypes[t.dtype],
            )
            for i, t in enumerate(tables)
        ]
        constraints = {
            _internal_name(i): ParameterConstraints(
                sharding_types=[
                    *([ShardingType.TABLE_WISE.value] if t.size_bytes <= cap else []),
                    *([ShardingType.COLUMN_WISE.value] if t.name in widths else []),
                ],
                compute_kernels=[EmbeddingComputeKernel.FUSED.value],
                pooling_factors=[float(t.pooling_factor)],
                min_partition=widths.get(t.name),
            )
            for i, t in enumerate(tables)
        }
        with _quiet(self.verbose):
            module = EmbeddingBagCollection(tables=configs, device=torch.device("meta"))
            tr_topology = self._torchrec_topology(topology)
            planner = EmbeddingShardingPlanner(
                topology=tr_topology,
                batch_size=topology.batch_size,
                enumerator=self._enumerator(tr_topology, topology.batch_size, constraints),
                constraints=constraints,
                storage_reservation=FixedPercentageStorageReservation(0.0),  # reserve applied to the cap
                stats=EmbeddingStats() if self.verbose else NoopEmbeddingStats(),
                debug=self.verbose,
            )
            try:
                sharding_plan = planner.plan(module, [EmbeddingBagCollectionSharder()])
            except PlannerError as e:
                raise self._translate(e, inventory, topology) from None
        return self._read_plan(sharding_plan, inventory, topology)

    def _enumerator(self, tr_topology: Any, batch_size: int, constraints: dict[str, Any]) -> Any:
        """TorchRec's enumerator with its perf estimator; storage by the chosen memory model."""
        # optional dependency: torchrec
        from torchrec.distributed.planner.constants import DEFAULT_PERF_ESTIMATOR
        from torchrec.distributed.planner.enumerators import EmbeddingEnumerator
        from torchrec.distributed.planner.estimator import EmbeddingPerfEstimatorFactory
        from torchrec.distributed.planner.shard_estimators import EmbeddingStorageEstimator

        perf = EmbeddingPerfEstimatorFactory.create(
            DEFAULT_PERF_ESTIMATOR, topology=tr_topology, constraints=constraints
        )
        storage = (
            _weights_only_estimator_class()(tr_topology, constraints)
            if self.memory_model == "dreamshard"
            else EmbeddingStorageEstimator(topology=tr_topology, constraints=constraints)
        )
        return EmbeddingEnumerator(
            topology=tr_topology, batch_size=batch_size, constraints=constraints, estimator=[perf, storage]
        )

    def _torchrec_topology(self, topology: Topology) -> Any:
        # optional dependency: torchrec
        from torchrec.distributed.planner.types import KernelConfig, TopologyFactory, TrainerConfig

        cap = int(topology.memory_per_device_bytes * (1.0 - self.reserve_fraction))
        on_cuda = topology.device_type == "cuda"
        trainer = TrainerConfig(
            world_size=topology.num_devices,
            local_world_size=topology.num_devices,
            hbm_cap_bytes=cap if on_cuda else 0,
            ddr_cap_bytes=None if on_cuda else cap,
        )
        return TopologyFactory.create_topology(
            trainer_config=trainer, kernel_config=KernelConfig(compute_device=topology.device_type)
        )

    def _read_plan(
        self, sharding_plan: Any, inventory: Inventory, topology: Topology
    ) -> tuple[dict[str, int], dict[str, tuple[ColumnShard, ...]]]:
        names = {t.name: _internal_name(i) for i, t in enumerate(inventory.tables)}
        doc = document_from_sharding_plan(sharding_plan, topology.num_devices, topology.device_type, names)
        missing = [t for t in inventory.table_names if t not in doc.tables]
        if missing:
            raise PlanError(f"torchrec planner returned no placement for table '{missing[0]}'")
        return fold(inventory, doc.units())

    def _translate(self, err: Exception, inventory: Inventory, topology: Topology) -> Exception:
        """TorchRec's PlannerError (a multi-line box) -> our one-line typed error naming the limit/table."""
        text = str(err)
        kind = "hbm" if topology.device_type == "cuda" else "ddr"
        reserve = f", {self.reserve_fraction:.0%} reserved" if self.reserve_fraction else ""
        hint = f"torchrec planner, {topology.memory_per_device_gb:.4g} GB {kind} per device{reserve}"
        if self.memory_model == "torchrec":
            hint += "; its estimate adds input/output buffers to each table"
        m = _SHARD_FAILED.search(text)
        if m is not None:
            idx = m.group("table")
            table = next((t for i, t in enumerate(inventory.tables) if _internal_name(i) == idx), None)
            free = _storage_field(m.group("storage"), kind)
            need = _storage_field(m.group("need"), kind)
            if table is not None and free is not None:
                counted = ""
                if need is not None and self.memory_model == "torchrec":
                    counted = f"; it counts this table as {need:.3f} GB"
                return InfeasiblePlacementError(table.name, table.size_gb, free, hint + counted)
        need = _GLOBAL_NEED.search(text)
        have = _GLOBAL_HAVE.search(text)
        if need is not None and have is not None:
            need_gb = _storage_field(need.group("storage"), kind)
            have_gb = _storage_field(have.group("storage"), kind)
            if need_gb is not None and have_gb is not None:
                return PlanError(
                    f"torchrec planner found no plan: it needs {need_gb:.3f} GB, {have_gb:.3f} GB available over "
                    f"{topology.num_devices} devices ({hint}); add devices or raise --memory-gb"
                )
        first = next((line.strip() for line in text.splitlines() if line.strip()), type(err).__name__)
        return PlanError(f"torchrec planner found no plan: {first} ({hint})")
