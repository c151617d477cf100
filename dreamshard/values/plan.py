"""A plan: every table of an inventory placed on the devices of a topology, with what predicted, verified and
refined it (docs/architecture/data-model.md, "Data model" and "Sharding types")."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import Field, model_validator

from dreamshard.values.assumptions import AccessAssumptions
from dreamshard.values.calibration import CalibrationReport
from dreamshard.values.constraints import Kernel
from dreamshard.values.costs import BackendInfo, CommModel, CostBasis, Costs
from dreamshard.values.ids import new_id, utcnow
from dreamshard.values.lineage import Lineage
from dreamshard.values.tables import Number, StrictModel
from dreamshard.values.topology import Topology
from dreamshard.values.units import ColumnShard, RowShard, ShardingType, replica_name, row_shard_name, shard_name
from dreamshard.values.world import ChargedWorld


class VerifiedCandidate(StrictModel):
    """One candidate plan measured by `--verify`: where it came from, what was predicted, what was measured."""

    source: str
    predicted_ms: Annotated[float, Field(ge=0)]  # pessimistic predicted overall cost (the search objective)
    measured_ms: Annotated[float, Field(ge=0)]  # median over the verification rounds
    spread: Annotated[float, Field(ge=0)]  # (max - min) / median over the rounds
    rounds: Annotated[int, Field(ge=1)] | None = None  # rounds measured (fewer: dropped from the race); None: all
    # why it was measured beside the K best predicted: "search only" (the plan the search alone would give),
    # "heuristic" (a heuristic's own plan), "torchrec" (TorchRec's planner's own plan); None: a learned candidate
    role: str | None = None
    kept: bool = False  # the plan the race kept (an older plan: see Verification.chosen)
    # cut short: one of its devices alone measured over CUT_SHORT_AT x a round's fastest plan, its other devices were
    # not timed and it was dropped; its measured_ms is then a lower bound (dreamshard.evaluation.cut_short)
    cut_short: bool = False

    @property
    def label(self) -> str:
        """The row's name in a report: `heuristic:dim_greedy`, `torchrec:torchrec`, `policy+search (search only)`, or
        the source."""
        if self.role in ("heuristic", "torchrec"):
            return f"{self.role}:{self.source}"
        return f"{self.source} ({self.role})" if self.role else self.source


class Verification(StrictModel):
    """What the plan stage's race measured (`plan --verify K`): the search-only plan, the K best predicted candidates,
    every heuristic's own plan and TorchRec's, interleaved on one backend (dreamshard.measured.verify)."""

    backend: BackendInfo
    rounds: Annotated[int, Field(ge=1)]
    candidates: tuple[VerifiedCandidate, ...]
    chosen: str  # the source of the plan kept (the best measured)
    search_only: str | None = None  # the source of the search-only candidate (None: an older plan)
    search_only_ms: Annotated[float, Field(ge=0)] | None = None  # its median over the verification rounds
    # the kept plan / the search-only plan: the median of their paired rounds (1.0 when the search-only is kept)
    kept_vs_search: Annotated[float, Field(gt=0)] | None = None
    # the plan stage's plan / the search-only plan, measured interleaved: kept_vs_search, times the refined plan /
    # its start (measured whole, interleaved) when refinement kept its plan (dreamshard.measured.stage)
    stage_vs_search: Annotated[float, Field(gt=0)] | None = None
    # {contender: why it was not measured}: a heuristic that cannot place the inventory, TorchRec's planner where it
    # cannot honour a constraint, a plan the same as one measured ("the same plan as ...": measured as that one)
    not_measured: dict[str, str] = Field(default_factory=dict)
    # the fastest measured baseline's row label (a heuristic's or TorchRec's own plan) and the kept plan / it, both as
    # paired ratios to the race's leader: <= 1 by construction, except where a re-plan held the current plan
    best_baseline: str | None = None
    kept_vs_baseline: Annotated[float, Field(gt=0)] | None = None
    # wall seconds: the search alone, the whole plan (search and the measured steps after it), the budget
    # (plan.stage_budget x the search; None: none) and what refinement was given of it (None: no refinement asked)
    search_s: Annotated[float, Field(ge=0)] | None = None
    plan_s: Annotated[float, Field(ge=0)] | None = None
    budget_s: Annotated[float, Field(ge=0)] | None = None
    refine_s: Annotated[float, Field(ge=0)] | None = None


class RefineStep(StrictModel):
    """One proposal of `plan --refine-seconds`: measured on the two devices it changes, against the incumbent's."""

    proposal: str  # "move t 0->2" or "swap t@0 <-> u@2" (units: whole tables or column shards)
    devices: tuple[int, int]  # the bottleneck and the other device
    predicted_ms: Annotated[float, Field(ge=0)]  # predicted overall after the proposal (learned cost deltas)
    incumbent_ms: Annotated[float, Field(ge=0)]  # median over rounds of the incumbent's slower device of the two
    measured_ms: Annotated[float, Field(ge=0)]  # the same for the proposal
    kept: bool  # confirmed beyond the noise (every proposal round faster than every incumbent round)
    rounds: Annotated[int, Field(ge=0)] = 0  # rounds measured (one lost round ends a proposal); 0: an older plan


class RefineTrace(StrictModel):
    """What measured refinement did (dreamshard.measured.refine)."""

    seconds: Annotated[float, Field(ge=0)]
    budget_s: Annotated[float, Field(ge=0)]
    rounds: Annotated[int, Field(ge=1)]
    confirm_rounds: Annotated[int, Field(ge=0)] = 0  # a passing proposal's second block (0: none)
    tried: Annotated[int, Field(ge=0)]
    kept: Annotated[int, Field(ge=0)]
    device_timings: Annotated[int, Field(ge=0)]  # fused operators timed on one device
    initial_ms: Annotated[float, Field(ge=0)]  # the search's plan's bottleneck: median timings up to the first keep
    final_ms: Annotated[float, Field(ge=0)]  # the bottleneck after the kept proposals (median recent timings)
    measured_gain: float  # (initial - final) / initial
    steps: tuple[RefineStep, ...] = ()
    # With a kept proposal, the refined plan measured whole against the plan refinement started from, interleaved
    # (dreamshard.measured.stage): the rounds, both medians, refined / start (median of paired rounds), and whether
    # the start was kept because the refined plan was not faster in every round (0 / None / False: not measured).
    whole_rounds: Annotated[int, Field(ge=0)] = 0
    start_ms: Annotated[float, Field(ge=0)] | None = None
    refined_ms: Annotated[float, Field(ge=0)] | None = None
    vs_start: Annotated[float, Field(gt=0)] | None = None
    reverted: bool = False


class Plan(StrictModel):
    """A placement of every table of an inventory on the devices of a topology.

    Each table has exactly one sharding type (dreamshard.values.units): whole on one device (`placement`), column
    ranges (`column_shards`), row ranges over every device or the devices of one host (`row_shards`), or a
    replica on every device (`data_parallel`). Plans written before row-wise and data-parallel load unchanged.
    `dreamshard.placement.expand` expands a plan into its placement *units*, which is what memory accounting, profiling
    and the cost model work on.
    """

    plan_id: str = Field(default_factory=lambda: new_id("plan-"))
    inventory_name: str
    inventory_fingerprint: str
    # Inventory.schema_fingerprint of the inventory (tables' names, rows, dims, dtypes, features): how a training
    # job finds the plan for its model (integrations.torchrec_current). None in a plan that does not record it.
    schema_fingerprint: str | None = None
    topology: Topology
    sharder: str
    placement: dict[str, Annotated[int, Number, Field(ge=0)]]
    column_shards: dict[str, tuple[ColumnShard, ...]] = Field(default_factory=dict)
    row_shards: dict[str, tuple[RowShard, ...]] = Field(default_factory=dict)
    data_parallel: tuple[str, ...] = ()
    # a table's compute kernel when it is not the default (`fused`; `dense` for data-parallel), and the cache load
    # factor of a `fused_uvm_caching` table (TorchRec's default when left out): both part of the placement
    kernels: dict[str, Kernel] = Field(default_factory=dict)
    cache_load_factors: dict[str, Annotated[float, Number, Field(gt=0.0, le=1.0)]] = Field(default_factory=dict)
    memory_per_device_gb: tuple[float, ...]
    predicted: Costs | None = None
    measured: Costs | None = None
    measured_by: BackendInfo | None = None  # which backend produced `measured` (a simulator is labelled so)
    model_version: str | None = None
    # Inputs outside the ranges the model was trained on (one line each); planning warned about them and the
    # publish gate then requires a measured comparison.
    out_of_range: tuple[str, ...] = ()
    lineage: Lineage | None = None  # what data, model, params and code produced a published plan
    verification: Verification | None = None  # candidates measured by `plan --verify`, when asked
    refinement: RefineTrace | None = None  # proposals measured by `plan --refine-seconds`, when asked
    calibration: CalibrationReport | None = None  # the cost model's correction for this inventory, when asked
    # {table: why it got its layout} for each table the plan does not keep whole (dreamshard.search.layout_prior)
    layouts: dict[str, str] = Field(default_factory=dict)
    # the collective fits the plan was costed with, each with its quality or the reason for its fallback
    comm_fits: tuple[CommModel, ...] = ()
    # the world the plan was costed in (its name, alpha, GB/s, source) and the note when that is not the job's own
    # (a cuda job planned on the host's gloo fit); the gate's own: the world its measurement charged
    world: ChargedWorld | None = None
    assumptions: AccessAssumptions | None = None  # the id distributions planned for, where statistics are missing
    created_at: datetime = Field(default_factory=utcnow)

    @model_validator(mode="after")
    def _check(self) -> Plan:
        n = self.topology.num_devices
        for table, d in self.placement.items():
            if d >= n:
                raise ValueError(f"table '{table}' placed on device {d} but topology has {n} devices")
        for table, shards in self.column_shards.items():
            if table in self.placement:
                raise ValueError(f"table '{table}' is both placed whole and split into column shards")
            if not shards:
                raise ValueError(f"table '{table}' has an empty list of column shards")
            for sh in shards:
                if sh.device >= n:
                    raise ValueError(
                        f"column shard {sh.start}:{sh.end} of table '{table}' placed on device {sh.device} "
                        f"but topology has {n} devices"
                    )
        kinds: dict[str, str] = {t: "placed whole" for t in self.placement}
        for label, names in (
            ("split into column shards", self.column_shards),
            ("split into row shards", self.row_shards),
            ("data-parallel", self.data_parallel),
        ):
            for table in names:
                if table in kinds and kinds[table] == label:  # only data_parallel is a list that can repeat
                    raise ValueError(f"table '{table}' is listed twice in data_parallel")
                if table in kinds:
                    raise ValueError(f"table '{table}' is both {kinds[table]} and {label}; give it one sharding type")
                kinds[table] = label
        for table, rshards in self.row_shards.items():
            if not rshards:
                raise ValueError(f"table '{table}' has an empty list of row shards")
            for rs in rshards:
                if rs.device >= n:
                    raise ValueError(
                        f"row shard {rs.start}:{rs.end} of table '{table}' placed on device "
                        f"{rs.device} but topology has {n} devices"
                    )
        if len(self.memory_per_device_gb) != n:
            raise ValueError(f"memory_per_device_gb has {len(self.memory_per_device_gb)} entries, expected {n}")
        for label, costs in (("predicted", self.predicted), ("measured", self.measured)):
            if costs is not None and len(costs.per_device) != n:
                raise ValueError(f"{label} has {len(costs.per_device)} devices, expected {n}")
        self._check_kernels(set(kinds))
        return self

    def _check_kernels(self, tables: set[str]) -> None:
        for table, kernel in self.kernels.items():
            if table not in tables:
                raise ValueError(f"kernels names table '{table}', which the plan does not place")
            if table in self.data_parallel and kernel != "dense":
                raise ValueError(
                    f"table '{table}' has kernel '{kernel}': data-parallel tables run the dense kernel (sharded "
                    f"tables run fused, dense or a UVM / key-value kernel)"
                )
        for table in self.cache_load_factors:
            if self.kernels.get(table) != "fused_uvm_caching":
                raise ValueError(f"table '{table}' has a cache load factor but not the fused_uvm_caching kernel")

    def kernel(self, table: str) -> str:
        """The table's compute kernel: as set in `kernels`, else `dense` for data-parallel and `fused` otherwise."""
        return self.kernels.get(table, "dense" if table in self.data_parallel else "fused")

    def units(self) -> dict[str, int]:
        """{unit name: device}: whole tables by name, shards and replicas by their unit names
        (dreamshard.values.units)."""
        out = dict(self.placement)
        for table, shards in self.column_shards.items():
            out.update({shard_name(table, sh.start, sh.end): sh.device for sh in shards})
        for table, rshards in self.row_shards.items():
            out.update({row_shard_name(table, rs.start, rs.end): rs.device for rs in rshards})
        for table in self.data_parallel:
            out.update({replica_name(table, d): d for d in range(self.topology.num_devices)})
        return out

    @property
    def table_names(self) -> list[str]:
        """Every table the plan places, in any sharding type."""
        return list(dict.fromkeys([*self.placement, *self.column_shards, *self.row_shards, *self.data_parallel]))

    def sharding_type(self, table: str) -> ShardingType:
        """The table's sharding type; row shards on the devices of one host of several are table-row-wise."""
        if table in self.column_shards:
            return "column_wise"
        if table in self.data_parallel:
            return "data_parallel"
        if table in self.row_shards:
            hosts = {self.topology.host_of(rs.device) for rs in self.row_shards[table]}
            return "table_row_wise" if self.topology.hosts > 1 and len(hosts) == 1 else "row_wise"
        return "table_wise"

    def sharding_types(self) -> dict[str, int]:
        """How many tables use each sharding type (types the plan does not use are left out)."""
        out: dict[str, int] = {}
        for t in self.table_names:
            kind = self.sharding_type(t)
            out[kind] = out.get(kind, 0) + 1
        return out

    def device_tables(self) -> list[list[str]]:
        """Unit names on each device (whole tables, and column shards as `table@start:end`)."""
        out: list[list[str]] = [[] for _ in range(self.topology.num_devices)]
        for unit, d in self.units().items():
            out[d].append(unit)
        return out

    def fits_memory(self) -> bool:
        """Whether the plan's own memory figures fit (the gate recomputes them:
        dreamshard.placement.validate.check_plan)."""
        return all(m <= self.topology.memory_per_device_gb + 1e-12 for m in self.memory_per_device_gb)

    @property
    def best_costs(self) -> Costs | None:
        """Measured if present, else predicted."""
        return self.measured or self.predicted

    @property
    def cost_basis(self) -> CostBasis | None:
        """How `best_costs` was obtained, the one labelling rule for tables, listings and the gate: 'simulated'
        when the analytic simulator backend produced `measured` (never 'measured'), 'predicted' for the cost
        model's figures, None when the plan has no costs."""
        if self.measured is not None:
            simulated = self.measured_by is not None and self.measured_by.is_simulated
            return "simulated" if simulated else "measured"
        return "predicted" if self.predicted is not None else None

    def to_torchrec(self) -> dict[str, dict[str, object]]:
        """TorchRec form: {table: {sharding_type, compute_kernel, ranks}} (column-wise tables list one rank per
        shard, in column order)."""
        out: dict[str, dict[str, object]] = {
            t: {"sharding_type": "table_wise", "compute_kernel": self.kernel(t), "ranks": [d]}
            for t, d in self.placement.items()
        }
        for t, shards in self.column_shards.items():
            ordered = sorted(shards, key=lambda sh: sh.start)
            out[t] = {
                "sharding_type": "column_wise",
                "compute_kernel": self.kernel(t),
                "ranks": [sh.device for sh in ordered],
                "column_ranges": [[sh.start, sh.end] for sh in ordered],
            }
        for t, rshards in self.row_shards.items():
            rows = sorted(rshards, key=lambda rs: rs.start)
            out[t] = {
                "sharding_type": self.sharding_type(t),
                "compute_kernel": self.kernel(t),
                "ranks": [rs.device for rs in rows],
                "row_ranges": [[rs.start, rs.end] for rs in rows],
            }
        for t in self.data_parallel:
            out[t] = {
                "sharding_type": "data_parallel",
                "compute_kernel": "dense",
                "ranks": list(range(self.topology.num_devices)),
            }
        for t, factor in self.cache_load_factors.items():
            out[t]["cache_load_factor"] = factor
        return dict(sorted(out.items()))


Verification.model_rebuild()
Plan.model_rebuild()
