"""Value objects shared by the CLI, DVC stages, Prefect flows and storage (docs/architecture.md).

All models are pydantic v2, strict about unknown fields, and frozen where they are plain values. Numbers are
strict too: a bool or a string is not read as a number (`num_embeddings: true` is an error, not 1), and every
size has an upper bound so arithmetic on it cannot overflow.
"""

from __future__ import annotations

import hashlib
import json
import math
import uuid
from datetime import datetime, timezone
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from dreamshard.lineage import Lineage

#: Number of access-histogram bins: unique rows whose access count in one batch falls in
#: (0,1], (1,2], (2,4], ..., (16384,32768], (32768, inf).
NUM_REUSE_BINS = 17
#: Upper edges of the reuse bins (the last bin is open).
REUSE_BIN_EDGES: tuple[float, ...] = tuple(float(2**i) for i in range(NUM_REUSE_BINS - 1)) + (math.inf,)

DTYPE_BYTES: dict[str, int] = {"fp32": 4, "fp16": 2}
GB = float(1024**3)

DeviceType = Literal["cpu", "cuda"]
DType = Literal["fp32", "fp16"]
#: Where a plan's costs come from: a real measurement, the analytic simulator backend, or the cost model.
CostBasis = Literal["measured", "simulated", "predicted"]


def _number_only(v: object) -> object:
    """Reject bools and strings where a number is expected (pydantic's lax mode reads `true` as 1, "3" as 3)."""
    if isinstance(v, (bool, str, bytes)):
        raise ValueError(f"must be a number, got {type(v).__name__} {v!r}")
    return v


#: Numbers as users write them in inventories, plans and params: int/float only, never bool or string.
Number = BeforeValidator(_number_only)
#: Upper bounds that keep sizes finite in float arithmetic (1 TiB-row tables, 64k-wide rows, 1 PiB devices).
MAX_ROWS = 2**40
MAX_DIM = 2**16
MAX_POOLING = 1e6
MAX_DEVICE_GB = float(2**20)
MAX_BATCH = 2**24


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, allow_inf_nan=False)


class Table(_Strict):
    """One embedding table."""

    name: Annotated[str, Field(min_length=1)]
    num_embeddings: Annotated[int, Number, Field(ge=1, le=MAX_ROWS)]
    embedding_dim: Annotated[int, Number, Field(ge=1, le=MAX_DIM)]
    pooling_factor: Annotated[float, Number, Field(ge=0, le=MAX_POOLING)]
    access_histogram: tuple[float, ...] | None = None
    dtype: DType = "fp32"

    @field_validator("embedding_dim")
    @classmethod
    def _check_dim(cls, v: int) -> int:
        if v % 4:  # FBGEMM's table-batched kernels (what profiles and what TorchRec runs) need dim % 4 == 0
            raise ValueError(f"{v} is not a multiple of 4 (FBGEMM's fused kernels need dim % 4 == 0); "
                             f"pad it to {(v + 3) // 4 * 4}")
        return v

    @field_validator("access_histogram")
    @classmethod
    def _check_histogram(cls, v: tuple[float, ...] | None) -> tuple[float, ...] | None:
        if v is None:
            return v
        if len(v) != NUM_REUSE_BINS:
            raise ValueError(f"must have {NUM_REUSE_BINS} bins, got {len(v)}")
        if any((not math.isfinite(x)) or x < 0 for x in v):
            raise ValueError("bins must be finite and >= 0")
        total = sum(v)
        if abs(total - 1.0) > 1e-3:
            raise ValueError(f"bins must sum to 1 (got {total:.4f})")
        return v

    @property
    def bytes_per_element(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def size_elements(self) -> int:
        """rows x dim."""
        return self.num_embeddings * self.embedding_dim

    @property
    def size_bytes(self) -> int:
        return self.size_elements * self.bytes_per_element

    @property
    def size_gb(self) -> float:
        return self.size_bytes / GB

    def canonical(self) -> dict[str, object]:
        """Content used for fingerprints: every field, defaults filled, floats rounded stably."""
        d = self.model_dump()
        d["pooling_factor"] = round(float(d["pooling_factor"]), 9)
        if d["access_histogram"] is not None:
            d["access_histogram"] = [round(float(x), 9) for x in d["access_histogram"]]
        return d


class Inventory(_Strict):
    """A named set of embedding tables with unique names."""

    name: Annotated[str, Field(min_length=1)]
    tables: Annotated[tuple[Table, ...], Field(min_length=1)]

    @model_validator(mode="after")
    def _unique_names(self) -> Inventory:
        seen: set[str] = set()
        for t in self.tables:
            if t.name in seen:
                raise ValueError(f"duplicate table name '{t.name}'")
            seen.add(t.name)
        return self

    @property
    def num_tables(self) -> int:
        return len(self.tables)

    @property
    def table_names(self) -> list[str]:
        return [t.name for t in self.tables]

    def by_name(self) -> dict[str, Table]:
        return {t.name: t for t in self.tables}

    def subset(self, names: list[str], name: str | None = None) -> Inventory:
        idx = self.by_name()
        return Inventory(name=name or self.name, tables=tuple(idx[n] for n in names))

    def fingerprint(self) -> str:
        """sha256 over canonical table content; independent of key order and table order.

        The inventory name is deliberately not part of it: the same tables are the same workload.
        """
        rows = sorted(json.dumps(t.canonical(), sort_keys=True, separators=(",", ":")) for t in self.tables)
        return hashlib.sha256("\n".join(rows).encode()).hexdigest()


#: How the all-to-all is costed: "measured" = the alpha-beta fit of a real benchmark on this machine (gloo on
#: CPU, NCCL on GPUs); "fast" = a fixed fast-interconnect profile (about 10 GB/s per device, NVLink-class
#: latency), for planning a cluster whose network is much faster than the machine that profiles.
Interconnect = Literal["measured", "fast"]


class Topology(_Strict):
    num_devices: Annotated[int, Number, Field(ge=1, le=4096)]
    device_type: DeviceType = "cpu"
    memory_per_device_gb: Annotated[float, Number, Field(gt=0, le=MAX_DEVICE_GB)]
    batch_size: Annotated[int, Number, Field(ge=1, le=MAX_BATCH)] = 2048
    interconnect: Interconnect = "measured"

    @property
    def memory_per_device_bytes(self) -> int:
        return int(self.memory_per_device_gb * GB)


#: The four per-device cost components, in the order of DeviceCost's fields, as_list() and every table/plot.
COST_COMPONENTS: tuple[str, ...] = ("fwd_compute", "fwd_comm", "bwd_comm", "bwd_compute")


class DeviceCost(_Strict):
    """The four cost components of one device, in milliseconds (names: COST_COMPONENTS)."""

    fwd_compute: Annotated[float, Field(ge=0)]
    fwd_comm: Annotated[float, Field(ge=0)]
    bwd_comm: Annotated[float, Field(ge=0)]
    bwd_compute: Annotated[float, Field(ge=0)]

    @property
    def total(self) -> float:
        return self.fwd_compute + self.fwd_comm + self.bwd_comm + self.bwd_compute

    def as_list(self) -> list[float]:
        return [self.fwd_compute, self.fwd_comm, self.bwd_comm, self.bwd_compute]

    @classmethod
    def from_list(cls, v: list[float] | tuple[float, ...]) -> DeviceCost:
        a, b, c, d = (max(0.0, float(x)) for x in v)
        return cls(fwd_compute=a, fwd_comm=b, bwd_comm=c, bwd_compute=d)

    @classmethod
    def zero(cls) -> DeviceCost:
        return cls(fwd_compute=0.0, fwd_comm=0.0, bwd_comm=0.0, bwd_compute=0.0)


class Costs(_Strict):
    """Per-device costs of a placement and its overall cost (max over devices of the totals)."""

    per_device: tuple[DeviceCost, ...]
    overall_ms: Annotated[float, Field(ge=0)]

    @classmethod
    def from_devices(cls, per_device: list[DeviceCost], overall_ms: float | None = None) -> Costs:
        overall = max((d.total for d in per_device), default=0.0) if overall_ms is None else overall_ms
        return cls(per_device=tuple(per_device), overall_ms=overall)

    @property
    def bottleneck_device(self) -> int:
        totals = [d.total for d in self.per_device]
        return int(max(range(len(totals)), key=totals.__getitem__)) if totals else 0


def new_id(prefix: str = "") -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"{prefix}{stamp}-{uuid.uuid4().hex[:8]}"


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class VerifiedCandidate(_Strict):
    """One candidate plan measured by `--verify`: where it came from, what was predicted, what was measured."""

    source: str
    predicted_ms: Annotated[float, Field(ge=0)]  # pessimistic predicted overall cost (the search objective)
    measured_ms: Annotated[float, Field(ge=0)]  # median over the verification rounds
    spread: Annotated[float, Field(ge=0)]  # (max - min) / median over the rounds


class Verification(_Strict):
    """What `plan --verify K` measured: the K best predicted candidates, interleaved on one backend."""

    backend: BackendInfo
    rounds: Annotated[int, Field(ge=1)]
    candidates: tuple[VerifiedCandidate, ...]
    chosen: str  # the source of the plan kept (the best measured)


class ColumnShard(_Strict):
    """Columns [start, end) of one table, placed on one device (TorchRec's column-wise sharding)."""

    start: Annotated[int, Number, Field(ge=0)]
    end: Annotated[int, Number, Field(ge=1)]
    device: Annotated[int, Number, Field(ge=0)]

    @model_validator(mode="after")
    def _check(self) -> ColumnShard:
        if self.end <= self.start:
            raise ValueError(f"column shard end {self.end} must be greater than start {self.start}")
        return self

    @property
    def width(self) -> int:
        return self.end - self.start


class Plan(_Strict):
    """A placement of every table of an inventory on a device of a topology.

    A table is either placed whole (`placement`: table-wise) or split into column ranges
    (`column_shards`: each range on one device); never both. A table-wise plan has no column shards.
    `dreamshard.shards` expands a plan into its placement *units* (whole tables and column shards), which is
    what memory accounting, profiling and the cost model work on.
    """

    plan_id: str = Field(default_factory=lambda: new_id("plan-"))
    inventory_name: str
    inventory_fingerprint: str
    topology: Topology
    sharder: str
    placement: dict[str, Annotated[int, Number, Field(ge=0)]]
    column_shards: dict[str, tuple[ColumnShard, ...]] = Field(default_factory=dict)
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
        if len(self.memory_per_device_gb) != n:
            raise ValueError(f"memory_per_device_gb has {len(self.memory_per_device_gb)} entries, expected {n}")
        for label, costs in (("predicted", self.predicted), ("measured", self.measured)):
            if costs is not None and len(costs.per_device) != n:
                raise ValueError(f"{label} has {len(costs.per_device)} devices, expected {n}")
        return self

    def units(self) -> dict[str, int]:
        """{unit name: device}: whole tables by name, column shards as `table@start:end` (dreamshard.shards)."""
        from dreamshard.shards import shard_name

        out = dict(self.placement)
        for table, shards in self.column_shards.items():
            out.update({shard_name(table, sh.start, sh.end): sh.device for sh in shards})
        return out

    @property
    def table_names(self) -> list[str]:
        """Every table the plan places, whole or in column shards."""
        return [*self.placement, *(t for t in self.column_shards if t not in self.placement)]

    def device_tables(self) -> list[list[str]]:
        """Unit names on each device (whole tables, and column shards as `table@start:end`)."""
        out: list[list[str]] = [[] for _ in range(self.topology.num_devices)]
        for unit, d in self.units().items():
            out[d].append(unit)
        return out

    def fits_memory(self) -> bool:
        """Whether the plan's own memory figures fit (the gate recomputes them: dreamshard.memory.check_plan)."""
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
            t: {"sharding_type": "table_wise", "compute_kernel": "fused", "ranks": [d]}
            for t, d in self.placement.items()
        }
        for t, shards in self.column_shards.items():
            ordered = sorted(shards, key=lambda sh: sh.start)
            out[t] = {"sharding_type": "column_wise", "compute_kernel": "fused", "ranks": [sh.device for sh in ordered],
                      "column_ranges": [[sh.start, sh.end] for sh in ordered]}
        return dict(sorted(out.items()))


class CommModel(_Strict):
    """Alpha-beta model of one all-to-all: t_ms = alpha_ms + beta_ms_per_mb * megabytes."""

    alpha_ms: Annotated[float, Field(ge=0)]
    beta_ms_per_mb: Annotated[float, Field(ge=0)]
    backend: str
    world_size: int
    points: tuple[tuple[float, float], ...] = ()  # (megabytes, ms) used for the fit
    r2: float | None = None

    def cost_ms(self, nbytes: float) -> float:
        if nbytes <= 0:
            return 0.0
        return self.alpha_ms + self.beta_ms_per_mb * nbytes / 1e6


class BackendInfo(_Strict):
    """What measured a record and with which settings."""

    name: str  # cpu | cuda | simulator
    operator: str  # fbgemm_tbe | embedding_bag | analytic
    device: str
    num_threads: int
    batch_size: int
    warmup: int
    repeats: int
    row_cap: int | None = None  # rows scaled down above this (CPU profiling rule)
    is_simulated: bool = False


class Measurement(_Strict):
    """One placement on one topology with its per-device costs (docs/architecture.md, data flow)."""

    measurement_id: str = Field(default_factory=lambda: new_id("m-"))
    kind: Literal["single", "placement"] = "placement"
    task: str = ""
    inventory_name: str
    inventory_fingerprint: str
    topology: Topology
    placement: dict[str, Annotated[int, Number, Field(ge=0)]]
    costs: Costs
    spread: tuple[float, ...] = ()  # per-device relative spread (IQR / median) of the total
    backend: BackendInfo
    comm_model: CommModel | None = None
    created_at: datetime = Field(default_factory=utcnow)

    @property
    def overall_ms(self) -> float:
        return self.costs.overall_ms

    def device_tables(self) -> list[list[str]]:
        out: list[list[str]] = [[] for _ in range(self.topology.num_devices)]
        for table, d in self.placement.items():
            out[d].append(table)
        return out


class Task(_Strict):
    """A planning task: a subset of a pool's tables on a number of devices."""

    name: str
    tables: tuple[str, ...]
    num_devices: Annotated[int, Field(ge=1)]


class TaskSet(_Strict):
    """Train and held-out tasks drawn from disjoint parts of one table pool (generalisation protocol)."""

    pool_name: str
    pool_fingerprint: str
    train_tables: tuple[str, ...]
    test_tables: tuple[str, ...]
    train: tuple[Task, ...]
    test: tuple[Task, ...]


Verification.model_rebuild()
Plan.model_rebuild()
