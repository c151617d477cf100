"""Per-table constraints: where a table may go and how it may be sharded (docs/architecture/data-model.md,
"Constraints").

One model carries both vocabularies a team may write: ours (`devices`, `min_shards`, `max_shards`) and TorchRec's
``ParameterConstraints`` fields under their own names, so a team's existing constraints dict loads as it is. Keys
neither knows are an error. Each field is one of three kinds (`CONSTRAINT_KIND`):

* enforced: every sharder plans within it, and validation, the gate and the export refuse a plan that breaks it;
* statistics: fills the inventory (a feature's pooling) where the table does not say it already;
* carried: not planned on; written into the TorchRec export and listed in the plan's report as carried.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StrictBool, field_validator, model_validator

from dreamshard.values.base import Number, StrictModel

#: TorchRec's sharding types (``torchrec.distributed.types.ShardingType`` values).
TORCHREC_SHARDING_TYPES: tuple[str, ...] = (
    "data_parallel",
    "table_wise",
    "column_wise",
    "row_wise",
    "table_row_wise",
    "table_column_wise",
    "grid_shard",
)
#: TorchRec's compute kernels (``EmbeddingComputeKernel`` values) a constraint may name.
COMPUTE_KERNELS: tuple[str, ...] = (
    "dense",
    "fused",
    "fused_uvm",
    "fused_uvm_caching",
    "key_value",
    "quant",
    "quant_uvm",
    "quant_uvm_caching",
    "ssd_virtual_table",
    "dram_virtual_table",
    "dram_ssd_virtual_table",
    "customized_kernel",
)
#: TorchRec's data types (``torchrec.types.DataType``), lower-cased.
DATA_TYPES = Literal["fp32", "fp16", "bf16", "int64", "int32", "int8", "uint8", "int4", "int2", "nfp8"]
#: The kernels a plan unit may carry: what runs the table in training.
Kernel = Literal["dense", "fused", "fused_uvm", "fused_uvm_caching", "key_value"]
#: Kernels whose weights live in host memory (DDR) rather than on the device: all of them for `fused_uvm`, with a
#: device-side cache of `load_factor` of the rows for `fused_uvm_caching` (TorchRec's `compute_storage_usage`).
HOST_KERNELS: tuple[str, ...] = ("fused_uvm", "fused_uvm_caching")
#: TorchRec's default cache load factor (``UVM_CACHING_RATIO``) when a caching table names none.
DEFAULT_CACHE_LOAD_FACTOR = 0.2

ConstraintKind = Literal["enforced", "statistics", "carried"]


class CacheParams(StrictModel):
    """TorchRec's ``CacheParams`` of a `fused_uvm_caching` table: the load factor is planned on, the rest carried."""

    @field_validator("algorithm", "precision", mode="before")
    @classmethod
    def _lower(cls, v: object) -> object:
        return v.lower() if isinstance(v, str) else v

    algorithm: Literal["lru", "lfu"] | None = None
    load_factor: Annotated[float, Number, Field(gt=0.0, le=1.0)] | None = None
    reserved_memory: Annotated[float, Number, Field(ge=0.0)] | None = None
    precision: DATA_TYPES | None = None
    prefetch_pipeline: StrictBool | None = None


#: The one kernel with a cache: `cache_params` belong to a table planned with it, and to no other.
CACHING_KERNEL = "fused_uvm_caching"


class TableConstraints(StrictModel):
    """What a team requires of one table (module docstring). Every field is optional; empty means no constraint."""

    # ours
    devices: tuple[Annotated[int, Number, Field(ge=0, le=4095)], ...] | None = None
    min_shards: Annotated[int, Number, Field(ge=1, le=4096)] | None = None
    max_shards: Annotated[int, Number, Field(ge=1, le=4096)] | None = None
    # TorchRec's ParameterConstraints, by their own names
    sharding_types: tuple[str, ...] | None = None
    compute_kernels: tuple[str, ...] | None = None
    min_partition: Annotated[int, Number, Field(ge=4, le=2**16)] | None = None
    cache_params: CacheParams | None = None
    enforce_hbm: StrictBool | None = None
    device_group: Literal["cpu", "cuda"] | None = None
    pooling_factors: tuple[Annotated[float, Number, Field(ge=0, le=1e6)], ...] | None = None
    num_poolings: tuple[Annotated[float, Number, Field(ge=0, le=1e6)], ...] | None = None
    batch_sizes: tuple[Annotated[int, Number, Field(ge=1, le=2**24)], ...] | None = None
    feature_names: tuple[str, ...] | None = None
    is_weighted: StrictBool | None = None
    stochastic_rounding: StrictBool | None = None
    bounds_check_mode: Literal["fatal", "warning", "ignore", "none", "v2_fatal", "v2_warning", "v2_ignore"] | None = (
        None
    )
    output_dtype: DATA_TYPES | None = None
    key_value_params: dict[str, int | float | str | bool | None] | None = None
    use_virtual_table: StrictBool | None = None

    @field_validator("bounds_check_mode", "output_dtype", mode="before")
    @classmethod
    def _lower(cls, v: object) -> object:
        """TorchRec's enum names as written in Python (`FP16`, `FATAL`) read like their lower-case values."""
        return v.lower() if isinstance(v, str) else v

    @model_validator(mode="after")
    def _consistent(self) -> TableConstraints:
        if self.devices is not None:
            if not self.devices:
                raise ValueError("devices is empty: give at least one allowed device index, or leave it out")
            if len(set(self.devices)) != len(self.devices):
                raise ValueError(f"devices lists a device twice: {list(self.devices)}")
        if self.min_shards is not None and self.max_shards is not None and self.min_shards > self.max_shards:
            raise ValueError(f"min_shards {self.min_shards} is above max_shards {self.max_shards}")
        if self.cache_params is not None and self.compute_kernels != (CACHING_KERNEL,):
            raise ValueError(
                f"cache_params applies only to compute kernel {CACHING_KERNEL} (TorchRec's cache), and a table runs "
                f"cached only with compute_kernels [{CACHING_KERNEL}]: set that, or remove cache_params"
            )
        for field, names, known in (
            ("sharding_types", self.sharding_types, TORCHREC_SHARDING_TYPES),
            ("compute_kernels", self.compute_kernels, COMPUTE_KERNELS),
        ):
            if names is None:
                continue
            if not names:
                raise ValueError(f"{field} is empty: give at least one, or leave it out")
            unknown = [n for n in names if n not in known]
            if unknown:
                raise ValueError(f"{field}: unknown '{unknown[0]}'; choose from {', '.join(known)}")
        return self

    def allows_type(self, sharding_type: str) -> bool:
        return self.sharding_types is None or sharding_type in self.sharding_types

    def allows_kernel(self, kernel: str) -> bool:
        return self.compute_kernels is None or kernel in self.compute_kernels

    def allows_device(self, device: int) -> bool:
        return self.devices is None or device in self.devices

    def allows_shards(self, count: int) -> bool:
        return (self.min_shards is None or count >= self.min_shards) and (
            self.max_shards is None or count <= self.max_shards
        )

    @property
    def cache_load_factor(self) -> float | None:
        return self.cache_params.load_factor if self.cache_params is not None else None

    def given(self) -> dict[str, object]:
        """The fields set, as written (what the report and the export list)."""
        return self.model_dump(exclude_none=True)

    def feature_problem(self, table: str, feature_names: tuple[str, ...]) -> str:
        """Why `feature_names` and `pooling_factors` do not fit a table serving `feature_names` ("" if they do):
        the same check for an inventory file, `inventory validate`, `plan` and `from-torchrec`."""
        if self.feature_names is not None and sorted(self.feature_names) != sorted(feature_names):
            return (
                f"table '{table}': constraint 'feature_names' {list(self.feature_names)} is not the table's features "
                f"{list(feature_names)}"
            )
        if self.pooling_factors is not None and len(self.pooling_factors) != len(feature_names):
            return (
                f"table '{table}': constraint 'pooling_factors' gives {len(self.pooling_factors)} values for its "
                f"{len(feature_names)} features ({', '.join(feature_names)})"
            )
        return ""


#: What the planner does with each constraint field (module docstring).
CONSTRAINT_KIND: dict[str, ConstraintKind] = {
    "devices": "enforced",
    "min_shards": "enforced",
    "max_shards": "enforced",
    "sharding_types": "enforced",
    "compute_kernels": "enforced",
    "min_partition": "enforced",
    "cache_params": "enforced",
    "enforce_hbm": "enforced",
    "device_group": "enforced",
    "pooling_factors": "statistics",
    "feature_names": "statistics",
    "num_poolings": "carried",
    "batch_sizes": "carried",
    "is_weighted": "carried",
    "stochastic_rounding": "carried",
    "bounds_check_mode": "carried",
    "output_dtype": "carried",
    "key_value_params": "carried",
    "use_virtual_table": "carried",
}
