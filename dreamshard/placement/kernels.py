"""Each unit's compute kernel and cache load factor, as a table's constraints decide them
(docs/architecture/data-model.md, "Constraints").

The planners run what they have measured: `fused` for sharded tables and `dense` for data-parallel ones, whenever a
table's `compute_kernels` allow them (or say nothing). A table whose constraints allow neither gets the first kernel
they name that a plan of its type can carry on its devices (`fused_uvm`, `fused_uvm_caching`, `key_value` on cuda;
`dense` for a sharded table, as TorchRec runs dense table-, column- and row-wise): carried into the plan's
`kernels`, its memory counted per tier (dreamshard.placement.device_memory), its cost an extrapolation. On cpu
devices only `fused` and `dense` run (TorchRec's CPU sharders offer no other): a table allowing no kernel valid for
the devices is refused at plan time, naming it (`device_kernel_problem`).
"""

from __future__ import annotations

from collections.abc import Mapping

from dreamshard.values import DEFAULT_CACHE_LOAD_FACTOR, Kernel, Table

#: The kernels a plan unit may carry (dreamshard.values.Kernel): `dense` for data-parallel tables, the others for
#: sharded ones, in the order the planners prefer them.
SHARDED_KERNELS: dict[str, Kernel] = {
    "fused": "fused",
    "fused_uvm": "fused_uvm",
    "fused_uvm_caching": "fused_uvm_caching",
    "key_value": "key_value",
    "dense": "dense",
}
DP_KERNEL: Kernel = "dense"
#: The kernels the planners run and have measured on this machine (CPU): they choose no other by themselves.
MEASURED_KERNELS: tuple[str, ...] = ("fused", "dense")
#: The kernels TorchRec's sharders run on each device type (cpu: fused and dense; cuda: every kernel a plan carries).
DEVICE_KERNELS: dict[str, tuple[str, ...]] = {"cpu": ("fused", "dense"), "cuda": tuple(SHARDED_KERNELS)}


def valid_kernels(device_type: str | None) -> tuple[str, ...]:
    """The kernels that run on `device_type` devices (None: any, as on cuda)."""
    return DEVICE_KERNELS.get(device_type or "cuda", DEVICE_KERNELS["cuda"])


def kernel_for(table: Table, sharding: str, device_type: str | None = None) -> Kernel | None:
    """The compute kernel of `table` under `sharding` on `device_type` devices (None: any; module docstring), or
    None when its `compute_kernels` allow no kernel a plan of that type can carry there."""
    allowed = table.constraints.compute_kernels if table.constraints is not None else None
    valid = valid_kernels(device_type)
    if sharding == "data_parallel":
        return DP_KERNEL if allowed is None or DP_KERNEL in allowed else None
    if allowed is None or "fused" in allowed:
        return "fused"
    return next((SHARDED_KERNELS[k] for k in allowed if k in SHARDED_KERNELS and k in valid), None)


def device_kernel_problem(table: Table, device_type: str) -> str:
    """Why none of the table's `compute_kernels` runs on `device_type` devices ("" when one does)."""
    allowed = table.constraints.compute_kernels if table.constraints is not None else None
    valid = valid_kernels(device_type)
    if allowed is None or any(k in valid for k in allowed):
        return ""
    return (
        f"table '{table.name}': constraint compute_kernels {list(allowed)}: none runs on {device_type} devices "
        f"(TorchRec runs {', '.join(valid)} there)"
    )


def cache_load_factor(table: Table, kernel: str) -> float | None:
    """The share of a `fused_uvm_caching` table's rows its device cache holds (the constraint's `cache_params`,
    else TorchRec's default); None for any other kernel."""
    if kernel != "fused_uvm_caching":
        return None
    given = table.constraints.cache_load_factor if table.constraints is not None else None
    return given if given is not None else DEFAULT_CACHE_LOAD_FACTOR


def enforce_hbm(table: Table) -> bool:
    """Whether the table's constraints keep all of it in device memory (TorchRec's `enforce_hbm`)."""
    return bool(table.constraints is not None and table.constraints.enforce_hbm)


def plan_kernels(
    tables: Mapping[str, Table], types: Mapping[str, str], device_type: str | None = None
) -> tuple[dict[str, Kernel], dict[str, float]]:
    """(kernels, cache load factors) a plan records for `tables` sharded as `types` ({table: sharding type}): only
    the kernels that are not the default (`fused`, `dense` for data-parallel) and the caching tables' factors.
    A table whose constraints allow no kernel for its type is left at the default: the validator names it."""
    kernels: dict[str, Kernel] = {}
    factors: dict[str, float] = {}
    for name, sharding in types.items():
        table = tables.get(name)
        if table is None:
            continue
        kernel = kernel_for(table, sharding, device_type)
        if kernel is None or kernel == ("dense" if sharding == "data_parallel" else "fused"):
            continue
        kernels[name] = kernel
        factor = cache_load_factor(table, kernel)
        if factor is not None:
            factors[name] = factor
    return kernels, factors
