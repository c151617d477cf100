"""The TorchRec plan file: what ``dreamshard plan --torchrec-out FILE`` writes (no torch needed to read it;
docs/torchrec.md).

One JSON document, ``{"format": "dreamshard-torchrec-plan", "version": 1, "world_size", "device_type", ...,
"tables": {name: TableSharding}}``: per table its sharding type, compute kernel, ranks and, by type, its column or
row ranges (``ranges[i]`` on ``ranks[i]``) and shape. A bare ``{table: {...}}`` map is read too, with the world size
given by the caller. Column shards are any tiling of the columns in multiples of 4, on any ranks; row ranges must
be TorchRec's row blocks; a data_parallel table lists every rank with the ``dense`` kernel.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, cast, get_args

from pydantic import BaseModel, ConfigDict, Field, model_validator

from dreamshard.documents import atomic_write_text, read_structured, validate_mapping
from dreamshard.errors import ConfigError, InputFileError, PlanError
from dreamshard.integrations.torchrec_carried import (
    BoundsCheckMode,
    DataTypeName,
    carried_fields,
    document_kernels,
    table_kernels,
)
from dreamshard.placement.expand import brief, check_column_shards, check_row_shards, fold_units
from dreamshard.placement.make_plan import make_plan
from dreamshard.placement.validate import check_plan
from dreamshard.values import (
    CacheParams,
    ColumnShard,
    DeviceType,
    Inventory,
    Plan,
    RowShard,
    Table,
    Topology,
    replica_name,
    row_shard_name,
    shard_name,
)

FORMAT: Literal["dreamshard-torchrec-plan"] = "dreamshard-torchrec-plan"
#: TorchRec compute kernels a file may name. "fused" (FBGEMM's table-batched kernel, optimizer fused into the
#: backward) and "dense" (plain parameters, a torch optimizer) run on CPU; the UVM and key-value kernels need CUDA.
ComputeKernel = Literal["fused", "dense", "fused_uvm", "fused_uvm_caching", "key_value"]
CPU_KERNELS: tuple[str, ...] = ("fused", "dense")
SHARDING_TYPES: tuple[str, ...] = ("table_wise", "column_wise", "row_wise", "table_row_wise", "data_parallel")
ROW_TYPES: tuple[str, ...] = ("row_wise", "table_row_wise")
_Range = tuple[Annotated[int, Field(ge=0, strict=True)], Annotated[int, Field(ge=0, strict=True)]]


def check_kernel(kernel: str, device_type: str) -> ComputeKernel:
    """`kernel` if TorchRec can run it on `device_type`; ConfigError naming the choices otherwise."""
    if kernel not in get_args(ComputeKernel):
        raise ConfigError(
            f"unknown TorchRec compute kernel '{kernel}'; choose from {', '.join(get_args(ComputeKernel))}"
        )
    if kernel not in CPU_KERNELS and device_type != "cuda":
        raise ConfigError(
            f"compute kernel '{kernel}' needs device type cuda; on {device_type} use {' or '.join(CPU_KERNELS)}"
        )
    return cast(ComputeKernel, kernel)


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class TableSharding(_Frozen):
    """How one table is sharded: whole on one rank, in column ranges (``column_ranges[i]`` on ``ranks[i]``), in
    row blocks (``row_ranges[i]`` on ``ranks[i]``), or replicated on every rank (data_parallel).

    The column ranges may be listed in any order; `column_shards` is THE reader of them (every consumer of a file's
    column shards goes through it: `units`, the import, the ShardingPlan export), so one file means one placement.
    `row_shards` is the same for row ranges (checked against TorchRec's row blocks by the file).

    The rest are TorchRec's ``ParameterSharding`` fields the export sets (dreamshard.integrations.torchrec_carried):
    a caching table's `cache_load_factor` (the plan's), and what the table's constraints carry (`cache_params`,
    `enforce_hbm`, `stochastic_rounding`, `bounds_check_mode`, `output_dtype`, `key_value_params`).
    """

    sharding_type: Literal["table_wise", "column_wise", "row_wise", "table_row_wise", "data_parallel"]
    compute_kernel: ComputeKernel = "fused"
    ranks: Annotated[tuple[Annotated[int, Field(ge=0, strict=True)], ...], Field(min_length=1)]
    column_ranges: tuple[_Range, ...] | None = None
    row_ranges: tuple[_Range, ...] | None = None
    num_embeddings: Annotated[int, Field(ge=1, strict=True)] | None = None
    embedding_dim: Annotated[int, Field(ge=1, strict=True)] | None = None
    cache_load_factor: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    cache_params: CacheParams | None = None
    enforce_hbm: bool | None = None
    stochastic_rounding: bool | None = None
    bounds_check_mode: BoundsCheckMode | None = None
    output_dtype: DataTypeName | None = None
    key_value_params: dict[str, int | float | str | bool | None] | None = None

    @model_validator(mode="before")
    @classmethod
    def _dense_for_data_parallel(cls, data: Any) -> Any:
        """A data_parallel table without a kernel gets 'dense' (the default 'fused' is no kernel of that type)."""
        if isinstance(data, Mapping) and data.get("sharding_type") == "data_parallel" and "compute_kernel" not in data:
            return {**data, "compute_kernel": "dense"}
        return data

    @model_validator(mode="after")
    def _check(self) -> TableSharding:
        if self.cache_load_factor is not None and self.compute_kernel != "fused_uvm_caching":
            raise ValueError(f"a cache_load_factor needs compute kernel fused_uvm_caching, not '{self.compute_kernel}'")
        if self.cache_params is not None and self.compute_kernel != "fused_uvm_caching":
            raise ValueError(f"cache_params need compute kernel fused_uvm_caching, not '{self.compute_kernel}'")
        kind = self.sharding_type
        if kind != "column_wise" and self.column_ranges is not None:
            raise ValueError(f"a {kind} table has no column_ranges")
        if kind not in ROW_TYPES and self.row_ranges is not None:
            raise ValueError(f"a {kind} table has no row_ranges")
        if kind == "table_wise":
            if len(self.ranks) != 1:
                raise ValueError(f"a table_wise table has exactly one rank, got {brief(self.ranks)}")
            return self
        if kind == "data_parallel":
            if self.compute_kernel != "dense":
                raise ValueError(f"a data_parallel table uses compute kernel 'dense', not '{self.compute_kernel}'")
            return self
        ranges = self.column_ranges if kind == "column_wise" else self.row_ranges
        what = "column" if kind == "column_wise" else "row"
        if ranges is None or len(ranges) != len(self.ranks):
            raise ValueError(f"a {kind} table lists one [start, end] {what} range per rank (range i on rank i)")
        if any(e <= s for s, e in ranges):
            raise ValueError(f"every {what} range [start, end] needs end > start")
        size = self.embedding_dim if kind == "column_wise" else self.num_embeddings
        if size is not None and max(e for _, e in ranges) != size:
            raise ValueError(f"{what} ranges end at {max(e for _, e in ranges)}, the table has {size} {what}s")
        return self

    def column_shards(self) -> tuple[ColumnShard, ...]:
        """THE parser of the file's column shards: range i paired with rank i as the file lists them, returned
        in column order (by start; empty for a table_wise table). Gaps and overlaps are `check_columns`'s."""
        if self.column_ranges is None:
            return ()
        paired = (
            ColumnShard(start=s, end=e, device=r) for (s, e), r in zip(self.column_ranges, self.ranks, strict=True)
        )
        return tuple(sorted(paired, key=lambda sh: (sh.start, sh.end)))

    def row_shards(self) -> tuple[RowShard, ...]:
        """THE parser of the file's row shards (range i on rank i), in row order; empty unless a row type."""
        if self.row_ranges is None:
            return ()
        paired = (RowShard(start=s, end=e, device=r) for (s, e), r in zip(self.row_ranges, self.ranks, strict=True))
        return tuple(sorted(paired, key=lambda rs: (rs.start, rs.end)))

    def check_columns(self, table: str, dim: int) -> None:
        """PlanError naming `table` unless the column ranges tile `dim` columns in multiples of 4."""
        if self.sharding_type == "column_wise":
            check_column_shards(
                Table(name=table, num_embeddings=1, embedding_dim=dim, pooling_factor=0.0), self.column_shards()
            )

    def check_rows(self, table: str, rows: int, world_size: int, local_world_size: int | None = None) -> None:
        """PlanError naming `table` unless its row ranges are TorchRec's row blocks of `rows` rows on the
        layout its type says (`dreamshard.placement.expand.check_row_shards`): every rank in order (row_wise) or every
        rank of one host in order (table_row_wise, `local_world_size` ranks per host)."""
        if self.sharding_type not in ROW_TYPES:
            return
        local = local_world_size or world_size
        if world_size % local:
            raise PlanError(f"table '{table}': {world_size} ranks do not make hosts of {local} ranks")
        topo = Topology(
            num_devices=world_size, memory_per_device_gb=1.0, devices_per_host=local if local != world_size else None
        )
        t = Table(name=table, num_embeddings=rows, embedding_dim=DIM_PLACEHOLDER, pooling_factor=0.0)
        kind = check_row_shards(t, self.row_shards(), topo)
        if kind != self.sharding_type:
            raise PlanError(
                f"table '{table}' is {self.sharding_type} in the plan, but its row ranges on ranks "
                f"{brief(self.ranks)} are {kind} ({world_size} ranks, {local} per host)"
            )

    def check_shape(self, table: str, rows: int, dim: int, world_size: int, local_world_size: int | None) -> None:
        """`check_columns` and `check_rows` for a table of `rows` x `dim`."""
        self.check_columns(table, dim)
        self.check_rows(table, rows, world_size, local_world_size)


#: the dim of the stand-in table `check_rows` checks row ranges on (the rule does not read it)
DIM_PLACEHOLDER = 4


class TorchRecPlanFile(_Frozen):
    """The TorchRec plan file (module docstring)."""

    format: Literal["dreamshard-torchrec-plan"] = FORMAT
    version: Literal[1] = 1
    plan_id: str | None = None
    sharder: str | None = None
    inventory_name: str | None = None
    inventory_fingerprint: str | None = None
    world_size: Annotated[int, Field(ge=1, le=4096, strict=True)]
    device_type: DeviceType = "cpu"
    #: ranks per host (TorchRec's local_world_size); None: one host of every rank. table_row_wise needs it.
    local_world_size: Annotated[int, Field(ge=1, le=4096, strict=True)] | None = None
    tables: Annotated[dict[Annotated[str, Field(min_length=1)], TableSharding], Field(min_length=1)]

    @model_validator(mode="after")
    def _check(self) -> TorchRecPlanFile:
        if self.local_world_size is not None and self.world_size % self.local_world_size:
            raise ValueError(
                f"world_size {self.world_size} is not a whole number of hosts of "
                f"local_world_size {self.local_world_size}"
            )
        for name, spec in self.tables.items():
            bad = [r for r in spec.ranks if r >= self.world_size]
            if bad:
                raise ValueError(f"table '{name}' is on rank {bad[0]}, but world_size is {self.world_size}")
            if spec.compute_kernel not in CPU_KERNELS and self.device_type != "cuda":
                raise ValueError(f"table '{name}': compute kernel '{spec.compute_kernel}' needs device_type cuda")
            if spec.sharding_type == "data_parallel" and list(spec.ranks) != list(range(self.world_size)):
                raise ValueError(
                    f"data_parallel table '{name}' is on ranks {brief(spec.ranks)}; it lists every rank "
                    f"0..{self.world_size - 1} in order"
                )
            dim = spec.embedding_dim or max((e for _, e in spec.column_ranges or ()), default=DIM_PLACEHOLDER)
            rows = spec.num_embeddings or max((e for _, e in spec.row_ranges or ()), default=1)
            try:
                spec.check_shape(name, rows, dim, self.world_size, self.local_world_size)
            except PlanError as e:
                raise ValueError(str(e)) from None
        return self

    def units(self) -> dict[str, int]:
        """{unit: rank}: whole tables by name, column ranges as ``table@start:end``, row ranges as
        ``table@r<start>:<end>``, replicas as ``table@dp<rank>`` (dreamshard.values.units)."""
        out: dict[str, int] = {}
        for name, spec in self.tables.items():
            if spec.sharding_type == "table_wise":
                out[name] = spec.ranks[0]
            elif spec.sharding_type == "column_wise":
                out.update({shard_name(name, sh.start, sh.end): sh.device for sh in spec.column_shards()})
            elif spec.sharding_type == "data_parallel":
                out.update({replica_name(name, r): r for r in spec.ranks})
            else:
                out.update({row_shard_name(name, rs.start, rs.end): rs.device for rs in spec.row_shards()})
        return out


def torchrec_document(
    plan: Plan, inventory: Inventory | None = None, compute_kernel: ComputeKernel | None = None
) -> TorchRecPlanFile:
    """The TorchRec plan file of `plan` (shapes added from `inventory`, which must be the plan's: the plan is
    checked against it with THE placement rule, `placement.validate.check_plan`: every table once, whole or as tiling
    column shards, none unknown, devices in range, memory recomputed within the limit and equal to the plan's).

    Each table's kernel is the plan's (`Plan.kernel`); `compute_kernel` replaces the default `fused` of the
    sharded tables the plan gives no other (a table's `compute_kernels` constraint must allow it). The constraints
    of the inventory's tables that TorchRec takes in its ``ParameterSharding`` are carried (`carried_fields`)."""
    shapes: dict[str, dict[str, object]] = {}
    if inventory is not None:
        if inventory.fingerprint() != plan.inventory_fingerprint:
            raise PlanError(
                f"plan {plan.plan_id} was made for other tables than inventory '{inventory.name}' "
                "(fingerprints differ); re-plan this inventory"
            )
        check_plan(inventory, plan)
        shapes = {
            t.name: {"num_embeddings": t.num_embeddings, "embedding_dim": t.embedding_dim, **carried_fields(t)}
            for t in inventory.tables
        }
    if compute_kernel is not None:
        check_kernel(compute_kernel, plan.topology.device_type)
    kernels = table_kernels(plan, inventory, compute_kernel)
    tables = {
        name: {**spec, "compute_kernel": kernels[name], **shapes.get(name, {})}
        for name, spec in plan.to_torchrec().items()
    }
    return validate_mapping(
        {
            "plan_id": plan.plan_id,
            "sharder": plan.sharder,
            "inventory_name": plan.inventory_name,
            "inventory_fingerprint": plan.inventory_fingerprint,
            "world_size": plan.topology.num_devices,
            "device_type": plan.topology.device_type,
            "local_world_size": plan.topology.devices_per_host,
            "tables": tables,
        },
        TorchRecPlanFile,
        PlanError,
        f"plan {plan.plan_id} in TorchRec form",
    )


def save_torchrec_plan(doc: TorchRecPlanFile, path: str | Path) -> Path:
    """Write the file atomically as JSON (fields without a value left out)."""
    return atomic_write_text(path, doc.model_dump_json(indent=2, exclude_none=True) + "\n")


def check_world_size(world_size: object, where: str = "") -> None:
    """PlanError unless `world_size` is a whole number of ranks >= 1 (never a suggestion to plan for 0)."""
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        prefix = f"{where}: " if where else ""
        raise PlanError(f"{prefix}world_size must be a whole number of ranks >= 1, got {world_size!r}")


def document_from_data(data: Any, world_size: int | None = None, where: str = "torchrec plan") -> TorchRecPlanFile:
    """A TorchRecPlanFile from parsed JSON: the full document, or a bare ``{table: {...}}`` map plus `world_size`.

    A `world_size` given for a full document must match the one it was planned for.
    """
    if not isinstance(data, Mapping):
        raise PlanError(f"{where}: expected a mapping")
    if world_size is not None:
        check_world_size(world_size, where)
    if "format" in data or "tables" in data:
        doc = validate_mapping(dict(data), TorchRecPlanFile, PlanError, where)
        if world_size is not None and world_size != doc.world_size:
            raise PlanError(
                f"{where} was made for {doc.world_size} ranks, not {world_size}; re-plan with --devices {world_size}"
            )
        return doc
    if world_size is None:
        raise PlanError(f"{where} is a bare table map without a world size; pass world_size (CLI: --devices)")
    return validate_mapping({"world_size": world_size, "tables": dict(data)}, TorchRecPlanFile, PlanError, where)


def read_torchrec_plan(path: str | Path, world_size: int | None = None) -> TorchRecPlanFile:
    """Read a TorchRec plan file (see `document_from_data`); one-line errors naming the file."""
    p = Path(path)
    data = read_structured(p)
    if not isinstance(data, Mapping):
        raise InputFileError(f"torchrec plan {p}: expected a JSON object")
    return document_from_data(data, world_size, f"torchrec plan {p}")


def plan_from_document(
    doc: TorchRecPlanFile, inventory: Inventory, topology: Topology, sharder: str | None = None
) -> Plan:
    """The dreamshard Plan a TorchRec plan file describes, over `inventory` on `topology` (memory checked).

    Raises PlanError if the file was planned for other tables (fingerprint or shapes) or another device count.
    """
    if topology.num_devices != doc.world_size:
        raise PlanError(
            f"the TorchRec plan has {doc.world_size} ranks but the topology has {topology.num_devices} devices"
        )
    if doc.inventory_fingerprint is not None and doc.inventory_fingerprint != inventory.fingerprint():
        raise PlanError(
            f"the TorchRec plan was made for other tables than inventory '{inventory.name}' (fingerprints differ); "
            "give the inventory it was planned for"
        )
    tables = inventory.by_name()
    for name, spec in doc.tables.items():
        t = tables.get(name)
        if t is None:
            raise PlanError(f"the TorchRec plan shards table '{name}', which is not in inventory '{inventory.name}'")
        if (spec.num_embeddings or t.num_embeddings, spec.embedding_dim or t.embedding_dim) != (
            t.num_embeddings,
            t.embedding_dim,
        ):
            raise PlanError(
                f"table '{name}' is {spec.num_embeddings}x{spec.embedding_dim} in the TorchRec plan but "
                f"{t.num_embeddings}x{t.embedding_dim} in inventory '{inventory.name}'"
            )
        if (
            spec.sharding_type == "table_row_wise"
            and (doc.local_world_size or doc.world_size) != topology.local_world_size
        ):
            raise PlanError(
                f"table '{name}' is table_row_wise over hosts of {doc.local_world_size or doc.world_size} "
                f"ranks, but the topology has {topology.local_world_size} devices per host"
            )
        spec.check_shape(name, t.num_embeddings, t.embedding_dim, doc.world_size, doc.local_world_size)
    folded = fold_units(inventory, doc.units())
    plan = make_plan(
        inventory,
        topology,
        folded.placement,
        sharder or doc.sharder or "torchrec",
        column_shards=folded.column_shards,
        row_shards=folded.row_shards,
        data_parallel=folded.data_parallel,
    )
    kernels, factors = document_kernels(doc.tables)
    if not kernels:
        return plan
    update = {"kernels": {**plan.kernels, **kernels}, "cache_load_factors": {**plan.cache_load_factors, **factors}}
    return validate_mapping({**plan.model_dump(), **update}, Plan, PlanError, "the TorchRec plan's kernels")
