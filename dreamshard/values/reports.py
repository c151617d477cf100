"""What the plan's explanations report: the stats of a plan (per table and per device, the bottleneck's units) and
why each unit is on its device. Values: dreamshard.explain computes them, the use cases return them and the doors
render them without importing the explainers (which load torch)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class TableStat(BaseModel):
    model_config = ConfigDict(frozen=True)
    unit: str  # a table, or a column shard `table@start:end`
    type: str  # the sharding type of its table (Plan.sharding_type): table_wise, column_wise, row_wise, ...
    device: int
    size_gb: float
    dim: int
    pooling: float
    outputs: int  # outputs per sample: one per feature (a sequence table's: one row per lookup of each)
    pooled: bool = True  # False: a sequence table (TorchRec's EmbeddingCollection), outputs follow its lookups
    predicted_ms: float  # its share of its device's predicted total
    measured_ms: float | None  # its share of its device's measured total (measured plans)
    rank: int  # 1 = the costliest unit (by measured share where measured, else predicted)


class DeviceStat(BaseModel):
    model_config = ConfigDict(frozen=True)
    device: int
    units: int
    memory_gb: float  # recomputed from the inventory (dreamshard.placement.device_memory): weights + optimizer + io
    weights_gb: float
    optimizer_gb: float  # the topology's fused optimizer's state
    io_gb: float  # input/output buffers as TorchRec counts them (memory_model "torchrec"; else 0)
    input_mb: float  # indices + offsets of one batch
    output_mb: float  # outputs of one batch (what its all-to-all sends)
    predicted_ms: float
    measured_ms: float | None
    bottleneck: bool


class PlanStats(BaseModel):
    model_config = ConfigDict(frozen=True)
    plan_id: str
    basis: str  # measured | predicted: what ranks and the imbalance use
    tables: tuple[TableStat, ...]
    devices: tuple[DeviceStat, ...]
    imbalance: float  # max / mean device total (basis)
    critical: tuple[str, ...]  # the bottleneck device's units, costliest first: what sets the maximum
    # {table: its constraints carried, not planned on} (dreamshard.integrations.torchrec_carried.carried_report)
    carried: dict[str, list[str]] = {}


class UnitReason(BaseModel):
    model_config = ConfigDict(frozen=True)

    unit: str
    device: int
    kind: str  # fixed | memory | gain
    alternative: int | None = None  # the best other device with room (gain)
    delta_ms: float = 0.0  # predicted maximum after moving it there, minus now (gain)
    text: str
