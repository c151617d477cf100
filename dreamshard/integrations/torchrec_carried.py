"""What a TorchRec plan file carries beyond the placement: each table's compute kernel and the constraints TorchRec
takes in its ``ParameterSharding`` (docs/torchrec.md, "Constraints"). No torch needed.

`table_kernels` decides each table's kernel in the file: the plan's (`Plan.kernel`: its constraints' or the
default), or a kernel asked for the tables at the default (``--torchrec-kernel``), which a table's
``compute_kernels`` constraint must allow. `carried_fields` are a table's constraints that the ``ParameterSharding``
holds (`CARRIED`): planned on or not, TorchRec applies them in training (its fused params).

`not_planned_on` / `carried_report` / `carried_lines` name the constraints no planner here plans on (their kind is
"carried" in dreamshard.values.constraints, and a cache's fields besides its load factor): what the plan's report
lists per table, "carried, not planned on", saying which of them the export cannot hold (TorchRec's
``ParameterSharding`` has no field for them: they stay in the inventory).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from dreamshard.errors import PlanError
from dreamshard.values import DEFAULT_CACHE_LOAD_FACTOR, Inventory, Plan, Table
from dreamshard.values.constraints import CONSTRAINT_KIND, DATA_TYPES

#: TorchRec's ``DataType`` names, lower-cased (an output dtype, a cache precision).
DataTypeName = DATA_TYPES
#: FBGEMM's ``BoundsCheckMode`` names, lower-cased.
BoundsCheckMode = Literal["fatal", "warning", "ignore", "none", "v2_fatal", "v2_warning", "v2_ignore"]
#: The constraint fields TorchRec's ``ParameterSharding`` holds (and hands to FBGEMM as fused params).
CARRIED: tuple[str, ...] = (
    "cache_params",
    "enforce_hbm",
    "stochastic_rounding",
    "bounds_check_mode",
    "output_dtype",
    "key_value_params",
)


def carried_fields(table: Table) -> dict[str, object]:
    """The table's constraints that go into its ``ParameterSharding`` (`CARRIED`), as written; empty without any."""
    if table.constraints is None:
        return {}
    given = table.constraints.given()
    return {k: given[k] for k in CARRIED if k in given}


def not_planned_on(table: Table) -> list[str]:
    """The table's constraints carried without being planned on (module docstring): the fields of kind "carried"
    it sets, then its cache's fields besides the load factor as ``cache_params.<field>``; empty without any."""
    if table.constraints is None:
        return []
    given = table.constraints.given()
    out = [k for k, kind in CONSTRAINT_KIND.items() if kind == "carried" and k in given]
    cache = given.get("cache_params")
    if isinstance(cache, dict):
        out += [f"cache_params.{k}" for k in cache if k != "load_factor"]
    return out


def carried_report(inventory: Inventory) -> dict[str, list[str]]:
    """{table: `not_planned_on`} of the inventory's tables that carry any, in inventory order."""
    return {t.name: fields for t in inventory.tables if (fields := not_planned_on(t))}


def in_export(field: str) -> bool:
    """Whether a carried field (`not_planned_on`'s name) is written into the TorchRec export (`CARRIED`)."""
    return field.split(".")[0] in CARRIED


def carried_lines(report: Mapping[str, Sequence[str]]) -> list[str]:
    """One line per table of a `carried_report`: ``table 'x': carried, not planned on: output_dtype,
    num_poolings``, and which of them only the inventory keeps (the export has no field for them)."""
    lines: list[str] = []
    for table, fields in report.items():
        line = f"table '{table}': carried, not planned on: {', '.join(fields)}"
        kept = [f for f in fields if not in_export(f)]
        if kept:
            them = "them" if len(kept) > 1 else "it"
            line += f" ({', '.join(kept)}: in the inventory only, TorchRec's ParameterSharding has no field for {them})"
        lines.append(line)
    return lines


def table_kernels(plan: Plan, inventory: Inventory | None, override: str | None = None) -> dict[str, str]:
    """{table: compute kernel} for the file of `plan`: the plan's own where it sets one (`Plan.kernels`) and for
    data-parallel tables (`dense`); `override` (else `fused`) for the others. PlanError naming the table when its
    ``compute_kernels`` constraint (in `inventory`) does not allow `override`."""
    tables = inventory.by_name() if inventory is not None else {}
    names = [*plan.placement, *plan.column_shards, *plan.row_shards, *plan.data_parallel]
    out: dict[str, str] = {}
    for name in names:
        if name in plan.kernels or name in plan.data_parallel or override is None:
            out[name] = plan.kernel(name)
            continue
        table = tables.get(name)
        if table is not None and table.constraints is not None and not table.constraints.allows_kernel(override):
            allowed = ", ".join(table.constraints.compute_kernels or ())
            raise PlanError(
                f"table '{name}': compute kernel '{override}' breaks its constraint compute_kernels ({allowed})"
            )
        out[name] = override
    return out


#: The kernels a plan records per table (dreamshard.values.Kernel) besides the defaults (`fused`, `dense` for
#: data-parallel): what a TorchRec plan's tables bring into a dreamshard Plan.
PLANNED_KERNELS: tuple[str, ...] = ("fused_uvm", "fused_uvm_caching", "key_value")


def document_kernels(tables: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, float]]:
    """(kernels, cache load factors) a dreamshard Plan records for a TorchRec plan file's `tables` ({name:
    TableSharding}): the kernels other than the defaults that a plan holds (`PLANNED_KERNELS`, and `dense` on a
    sharded table, as TorchRec runs it table-, column- and row-wise), and each caching table's load factor
    (TorchRec's default when the file names none)."""
    kernels = {
        n: str(s.compute_kernel)
        for n, s in tables.items()
        if s.compute_kernel in PLANNED_KERNELS or (s.compute_kernel == "dense" and s.sharding_type != "data_parallel")
    }
    factors = {
        n: float(tables[n].cache_load_factor or DEFAULT_CACHE_LOAD_FACTOR)
        for n, k in kernels.items()
        if k == "fused_uvm_caching"
    }
    return kernels, factors


def parameter_sharding_fields(spec: Any) -> dict[str, Any]:
    """The ``ParameterSharding`` attributes a file entry (`TableSharding`) sets besides the placement, as TorchRec's
    types: ``cache_params`` (its carried fields, with the plan's `cache_load_factor` as its load factor),
    ``enforce_hbm``, ``stochastic_rounding``, ``bounds_check_mode``, ``output_dtype``, ``key_value_params``."""
    # optional dependency: torchrec (its types; fbgemm_gpu's enums through it)
    from torchrec.distributed.types import BoundsCheckMode as TorchRecBoundsCheck
    from torchrec.distributed.types import CacheAlgorithm, CacheParams, KeyValueParams
    from torchrec.types import DataType

    out: dict[str, Any] = {}
    cache = spec.cache_params.model_dump(exclude_none=True) if spec.cache_params is not None else {}
    if spec.cache_load_factor is not None:
        cache["load_factor"] = spec.cache_load_factor
    if cache:
        if "algorithm" in cache:
            cache["algorithm"] = CacheAlgorithm[cache["algorithm"].upper()]
        if "precision" in cache:
            cache["precision"] = DataType[cache["precision"].upper()]
        out["cache_params"] = CacheParams(**cache)
    for name in ("enforce_hbm", "stochastic_rounding"):
        if getattr(spec, name) is not None:
            out[name] = getattr(spec, name)
    if spec.bounds_check_mode is not None:
        out["bounds_check_mode"] = TorchRecBoundsCheck[spec.bounds_check_mode.upper()]
    if spec.output_dtype is not None:
        out["output_dtype"] = DataType[spec.output_dtype.upper()]
    if spec.key_value_params is not None:
        out["key_value_params"] = KeyValueParams(**spec.key_value_params)
    return out
