"""TorchRec's own planner as a contender: `torchrec` (`TorchRecSharder`, the baseline) unrestricted, and
`torchrec_tw_cw` (`TorchRecTwCwSharder`) table- and column-wise only (docs/architecture/measuring.md, "Integrations").

Both run `EmbeddingShardingPlanner` on meta tensors (pooled tables as an EmbeddingBagCollection, sequence tables as
EmbeddingCollections, each kind asked through its own TorchRec sharder) with our topology (world size, hosts, memory
per device as its hbm or ddr cap, batch size, each table's pooling), storage counted by our weights-only estimator
or TorchRec's own (`memory_model`), and `reserve_fraction` taken off the capacity we hand it. Its plan is read back
through dreamshard.integrations.torchrec_import and checked by the placement validator; its failures become one-line
typed errors (dreamshard.sharders.torchrec_messages). Tables go to TorchRec as `t0, t1, ...` (it rejects dots in names).
"""

from __future__ import annotations

import functools
import math
import re
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Literal

import torch

from dreamshard.errors import BrokenConstraintError, InfeasiblePlacementError, PlanError, UnknownSharderError
from dreamshard.integrations.torchrec_carried import document_kernels
from dreamshard.integrations.torchrec_import import document_from_sharding_plan
from dreamshard.integrations.torchrec_job import torchrec_topology
from dreamshard.placement.constraint_check import broken_constraint
from dreamshard.placement.expand import Folded, fold_units
from dreamshard.placement.kernels import SHARDED_KERNELS, device_kernel_problem
from dreamshard.placement.make_plan import make_plan
from dreamshard.placement.validate import check_each_table_fits
from dreamshard.sharders.base import Sharder
from dreamshard.sharders.torchrec_messages import internal_name as _internal_name
from dreamshard.sharders.torchrec_messages import quiet as _quiet
from dreamshard.sharders.torchrec_messages import translate, unhonoured
from dreamshard.sharders.torchrec_parameters import parameter_constraints, unexpressible
from dreamshard.values import DIM_ALIGN, GB, Inventory, Kernel, Plan, Table, Topology


@dataclass(frozen=True)
class _Answer:
    """TorchRec's plan as dreamshard reads it: the placement, and the kernels and cache load factors it chose
    besides the defaults."""

    folded: Folded
    kernels: dict[str, Kernel]
    cache_load_factors: dict[str, float]


#: Whose storage estimate TorchRec's planner plans with: ours (each shard its weights) or its own estimator's.
StorageEstimate = Literal["dreamshard", "torchrec"]
#: Whether TorchRec may split the tables that take more than half a device into column shards.
ColumnWise = Literal["auto", "never"]

#: TorchRec's planner is deterministic for one (sharder options, inventory version, topology) and takes seconds on a
#: 100-table inventory; a process asks it several times for the same plan (the plan stage's candidates, the gate's
#: baselines, the fallback's recomputation), so its answers are kept, a few at a time (`_answer`).
_ANSWERS: OrderedDict[tuple[Any, ...], _Answer] = OrderedDict()
_ANSWERS_KEPT = 16

INSTALL_HINT = "torchrec sharder needs torchrec: pip install torchrec fbgemm-gpu-cpu (or fbgemm-gpu on CUDA)"
#: The sharding types a dreamshard plan holds, so the ones the unrestricted planner may choose (TorchRec's
#: table_column_wise and grid_shard have no dreamshard form).
PLANNABLE_TYPES: tuple[str, ...] = ("table_wise", "column_wise", "row_wise", "table_row_wise", "data_parallel")
#: The ones TorchRec's EmbeddingCollectionSharder offers a sequence table (it has no table_row_wise).
SEQUENCE_TYPES: tuple[str, ...] = ("table_wise", "column_wise", "row_wise", "data_parallel")


def _named(text: str, inventory: Inventory) -> str:
    """TorchRec's first line with its internal table names (`t5`) replaced by the inventory's ('ad')."""
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "no plan")
    first = first.split(". Module:")[0]
    names = {_internal_name(i): t.name for i, t in enumerate(inventory.tables)}
    return re.sub(r"\bt\d+\b", lambda m: f"table '{names[m.group(0)]}'" if m.group(0) in names else m.group(0), first)


def split_width(table: Table, capacity_bytes: int) -> int | None:
    """Column-shard width for a table larger than a device: the widest multiple-of-4 divisor of its dim whose
    shard takes at most half a device, else at most a whole device; None if even 4 columns do not fit."""
    widths = [
        w
        for w in range(table.embedding_dim, 0, -1)
        if table.embedding_dim % w == 0 and w % DIM_ALIGN == 0 and w < table.embedding_dim
    ]
    per_column = table.num_embeddings * table.bytes_per_element
    for budget in (capacity_bytes // 2, capacity_bytes):
        fitting = [w for w in widths if w * per_column <= budget]
        if fitting:
            return fitting[0]
    return None


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


def _module(inventory: Inventory) -> torch.nn.Module:
    """The inventory as the modules a TorchRec model holds, on the meta device, tables named `internal_name`:
    ``ebc`` (an EmbeddingBagCollection of the pooled tables) and ``ec_<dim>`` (an EmbeddingCollection of the
    sequence tables of each dim, as dreamshard.integrations.torchrec_build.build_model groups them), so TorchRec's
    planner asks its EmbeddingBagCollectionSharder about the pooled tables and its EmbeddingCollectionSharder
    about the sequence ones (their sharding types, kernels and output sizes differ)."""
    # optional dependency: torchrec
    from torchrec.modules.embedding_configs import DataType, EmbeddingBagConfig, EmbeddingConfig
    from torchrec.modules.embedding_modules import EmbeddingBagCollection, EmbeddingCollection

    dtypes = {"fp32": DataType.FP32, "fp16": DataType.FP16}
    meta = torch.device("meta")
    bags: list[Any] = []
    sequences: dict[int, list[Any]] = {}
    for i, t in enumerate(inventory.tables):
        common = {
            "num_embeddings": t.num_embeddings,
            "embedding_dim": t.embedding_dim,
            "name": _internal_name(i),
            "feature_names": [f"f{i}"],
            "data_type": dtypes[t.dtype],
        }
        if t.pooled:
            bags.append(EmbeddingBagConfig(**common))
        else:
            sequences.setdefault(t.embedding_dim, []).append(EmbeddingConfig(**common))
    modules: dict[str, torch.nn.Module] = {}
    if bags:
        modules["ebc"] = EmbeddingBagCollection(tables=bags, device=meta)
    for dim, configs in sorted(sequences.items()):
        modules[f"ec_{dim}"] = EmbeddingCollection(tables=configs, device=meta)
    return torch.nn.ModuleDict(modules)


class TorchRecTwCwSharder(Sharder):
    """TorchRec's ``EmbeddingShardingPlanner`` restricted to table-wise (and column-wise for big tables) with the
    fused kernel (its analytic estimator and greedy partitioner), wrapped so that its result is a dreamshard Plan
    and its failures are our typed errors. `place()` (Sharder's) is its plan's whole-table placement, an error
    when TorchRec split a table. Registered as ``torchrec_tw_cw``; ``torchrec`` is `TorchRecSharder`."""

    name = "torchrec_tw_cw"
    family = "torchrec"
    options = frozenset({"reserve_fraction", "memory_model", "verbose", "column_wise"})

    def __init__(
        self,
        reserve_fraction: float = 0.0,
        memory_model: StorageEstimate = "dreamshard",
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
        answer = self._answer(inventory, topology)
        folded = answer.folded
        try:
            return make_plan(
                inventory,
                topology,
                folded.placement,
                self.name,
                column_shards=folded.column_shards,
                row_shards=folded.row_shards,
                data_parallel=folded.data_parallel,
                kernels=answer.kernels,
                cache_load_factors=answer.cache_load_factors,
            )
        except PlanError:
            cannot = sorted({name for t in inventory.tables for name in unexpressible(t)})
            broken = broken_constraint(
                inventory,
                topology,
                folded.placement,
                folded.column_shards,
                folded.row_shards,
                folded.data_parallel,
                answer.kernels,
                answer.cache_load_factors,
            )
            if not cannot or broken is None:
                raise
            why = f"TorchRec's ParameterConstraints cannot express {', '.join(cannot)}"
            raise BrokenConstraintError("torchrec planner", *broken, why) from None

    def _answer(self, inventory: Inventory, topology: Topology) -> _Answer:
        """`_plan`'s answer, from `_ANSWERS` when this sharder (class and options) already planned this inventory
        version (its fingerprint: every table field; and the tables' order, which the planner's tie-breaks see) on
        this topology in this process. The kept answer is never handed out: `shard` builds each plan's containers
        afresh from it (`make_plan`), and its shards are frozen."""
        if self.verbose:  # the planner's own stats table is printed by planning: plan again
            return self._plan(inventory, topology)
        key = (
            type(self).__name__,
            self.reserve_fraction,
            self.memory_model,
            self.column_wise,
            tuple(t.name for t in inventory.tables),
            inventory.fingerprint(),
            topology.model_dump_json(),
        )
        answer = _ANSWERS.get(key)
        if answer is None:
            answer = self._plan(inventory, topology)
            _ANSWERS[key] = answer
            while len(_ANSWERS) > _ANSWERS_KEPT:
                _ANSWERS.popitem(last=False)
        else:
            _ANSWERS.move_to_end(key)
        return answer

    def _constraints(self, inventory: Inventory, topology: Topology) -> dict[str, Any]:
        """TorchRec ParameterConstraints per internal table name: table-wise, column-wise where allowed, fused, within
        each table's own constraints (dreamshard.sharders.torchrec_parameters)."""
        widths = self._split_widths(inventory, topology)
        cap = topology.memory_per_device_bytes
        out: dict[str, Any] = {}
        for i, t in enumerate(inventory.tables):
            types = [*(["table_wise"] if t.size_bytes <= cap else []), *(["column_wise"] if t.name in widths else [])]
            asked = parameter_constraints(t, types, kernels=["fused"])
            if t.name in widths:
                asked.min_partition = max(widths[t.name], asked.min_partition or 0)
            out[_internal_name(i)] = asked
        return out

    def _split_widths(self, inventory: Inventory, topology: Topology) -> dict[str, int]:
        """{table: column-shard width} for the tables TorchRec may split (`column_wise="auto"`): those that take
        more than half a device, cut as `split_width` says; `"never"`: none, and every table must fit whole."""
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
                narrowest = t.num_embeddings * t.bytes_per_element * DIM_ALIGN / GB
                raise InfeasiblePlacementError(
                    t.name,
                    t.size_gb,
                    topology.memory_per_device_gb,
                    f"larger than one device, and even a {DIM_ALIGN}-column shard needs {narrowest:.3f} GB",
                )
            widths[t.name] = w
        return widths

    def _plan(self, inventory: Inventory, topology: Topology) -> _Answer:
        """The plan's fields from TorchRec's planner, asked with both of its sharders: the pooled tables as an
        EmbeddingBagCollection, the sequence tables as EmbeddingCollections (`_module`)."""
        try:  # optional dependency: torchrec
            from torchrec.distributed.embedding import EmbeddingCollectionSharder
            from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
            from torchrec.distributed.planner import EmbeddingShardingPlanner
            from torchrec.distributed.planner.stats import EmbeddingStats, NoopEmbeddingStats
            from torchrec.distributed.planner.storage_reservations import FixedPercentageStorageReservation
            from torchrec.distributed.planner.types import PlannerError
        except ImportError as e:
            raise UnknownSharderError(f"{INSTALL_HINT} ({e})") from None

        for t in inventory.tables:  # a kernel that cannot run on the devices: named here, never TorchRec's traceback
            if problem := device_kernel_problem(t, topology.device_type):
                raise PlanError(problem)
        constraints = self._constraints(inventory, topology)
        with _quiet(self.verbose):
            module = _module(inventory)
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
            sharders = [EmbeddingBagCollectionSharder(), EmbeddingCollectionSharder()]
            try:
                sharding_plan = planner.plan(module, sharders)
            except PlannerError as e:
                raise translate(
                    e, inventory, topology, self.reserve_fraction, self.memory_model == "torchrec"
                ) from None
            except RuntimeError as e:  # its enumerator: "No available sharding type and compute kernel ... for t5"
                raise unhonoured(_named(str(e), inventory), str(e), inventory, topology) from None
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
        """TorchRec's Topology of `topology`, each device's memory less the reserve (`torchrec_job.torchrec_topology`:
        a world that declares its bandwidths is TorchRec's too)."""
        return torchrec_topology(topology, int(topology.memory_per_device_bytes * (1.0 - self.reserve_fraction)))

    def _read_plan(self, sharding_plan: Any, inventory: Inventory, topology: Topology) -> _Answer:
        names = {t.name: _internal_name(i) for i, t in enumerate(inventory.tables)}
        doc = document_from_sharding_plan(
            sharding_plan, topology.num_devices, topology.device_type, names, topology.local_world_size
        )
        missing = [t for t in inventory.table_names if t not in doc.tables]
        if missing:
            raise PlanError(f"torchrec planner returned no placement for table '{missing[0]}'")
        kernels, factors = document_kernels(doc.tables)
        typed = {name: SHARDED_KERNELS[k] for name, k in kernels.items()}  # PLANNED_KERNELS: sharded ones
        return _Answer(fold_units(inventory, doc.units()), typed, factors)

    def _translate(self, err: Exception, inventory: Inventory, topology: Topology) -> Exception:
        """TorchRec's PlannerError -> our one-line typed error (`torchrec_messages.translate`)."""
        return translate(err, inventory, topology, self.reserve_fraction, self.memory_model == "torchrec")


class TorchRecSharder(TorchRecTwCwSharder):
    """TorchRec's planner unrestricted (the ``torchrec`` baseline): every sharding type a dreamshard plan holds
    (`PLANNABLE_TYPES`) and every compute kernel TorchRec enumerates for the device (dense and fused on CPU; the
    UVM ones on CUDA), TorchRec's own storage estimator by default (``memory_model="torchrec"``), our topology
    (world size, ``local_world_size``, memory per device, batch size). What it chooses comes back as a Plan with
    row shards and data-parallel tables where TorchRec chose them, and the kernels (and cache load factors) it
    chose besides the defaults. ``column_wise="never"`` leaves column-wise out of its choices. Each table's
    constraints narrow what it may choose; those TorchRec cannot express (a device pin, a shard count) are checked on
    its plan, which is refused in one line when it breaks one (BrokenConstraintError, which `compare` reports as the
    row's outcome: dreamshard.sharders.torchrec_parameters). Sequence tables are asked as an EmbeddingCollection
    (`_module`), so only the types its sharder offers (no table_row_wise)."""

    name = "torchrec"

    def __init__(
        self,
        reserve_fraction: float = 0.0,
        memory_model: StorageEstimate = "torchrec",
        verbose: bool = False,
        column_wise: ColumnWise = "auto",
    ) -> None:
        super().__init__(reserve_fraction, memory_model, verbose, column_wise)

    def _constraints(self, inventory: Inventory, topology: Topology) -> dict[str, Any]:
        types = [t for t in PLANNABLE_TYPES if not (t == "column_wise" and self.column_wise == "never")]
        return {
            _internal_name(i): parameter_constraints(
                t, types if t.pooled else [x for x in types if x in SEQUENCE_TYPES]
            )
            for i, t in enumerate(inventory.tables)
        }
