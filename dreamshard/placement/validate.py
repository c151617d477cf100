"""THE placement validator and the memory accounting the sharders share (docs/architecture/rules.md, "Where each rule
lives").

`check_placement` is the one check that a placement is legal for an inventory on a topology: every table placed
exactly once in one sharding type (dreamshard.placement.expand checks the shards), no unknown table, every device
in range and within its memory (device and host tiers), every table's constraints honoured
(dreamshard.placement.constraint_check). The sharders, the oracle, evaluation, the gate and the export call it;
memory is always recomputed from the inventory, never read from a plan.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from dreamshard.errors import InfeasiblePlacementError, PlanError
from dreamshard.placement.constraint_check import check_constraints_honoured
from dreamshard.placement.device_memory import MemoryBreakdown, device_memory, unit_memory
from dreamshard.placement.expand import expand
from dreamshard.values import GB, ColumnShard, Inventory, Plan, RowShard, Table, Topology

#: Tolerance when comparing a plan's stated memory with the recomputed figure (GB; JSON round-trips floats).
MEMORY_TOLERANCE_GB = 1e-9


def footprint(unit: Table, topology: Topology) -> int:
    """Bytes one unit needs on its device under the topology's memory model and optimizer
    (dreamshard.placement.device_memory; the unit counted as placed whole: what sharders and search check a
    device's room with). The defaults (sgd, weights) give `Table.size_bytes`."""
    return unit_memory(unit, topology).total


def device_memory_bytes(
    inventory: Inventory, placement: Mapping[str, int], num_devices: int, topology: Topology | None = None
) -> list[int]:
    """Bytes on each device: `placement` is over units of `inventory` (whole tables, or the units of an expanded
    inventory). With `topology`: weights, optimizer state and io as its memory model counts them
    (dreamshard.placement.device_memory.device_memory); without: table weights only."""
    if topology is not None:
        return [b.total for b in device_memory(inventory, placement, topology)]
    tables = inventory.by_name()
    used = [0] * num_devices
    for name, d in placement.items():
        used[d] += tables[name].size_bytes
    return used


def device_memory_gb(
    inventory: Inventory, placement: Mapping[str, int], num_devices: int, topology: Topology | None = None
) -> list[float]:
    return [b / GB for b in device_memory_bytes(inventory, placement, num_devices, topology)]


def check_placement(
    inventory: Inventory,
    placement: Mapping[str, int],
    topology: Topology,
    column_shards: Mapping[str, Sequence[ColumnShard]] | None = None,
    *,
    partial: bool = False,
    row_shards: Mapping[str, Sequence[RowShard]] | None = None,
    data_parallel: Sequence[str] = (),
    kernels: Mapping[str, str] | None = None,
    cache_load_factors: Mapping[str, float] | None = None,
) -> list[int]:
    """Raise a one-line PlanError unless the placement is legal; return the device bytes on each device.

    Legal: every table of `inventory` is placed exactly once, whole in `placement` or split into
    `column_shards` that tile its columns (`partial=True` allows tables to be left out: single-table
    measurements and tasks over a subset); no table outside the inventory; devices in [0, num_devices);
    no device over `topology.memory_per_device_gb` (nor its host memory); every table's constraints honoured.
    `kernels` / `cache_load_factors`: the plan's (dreamshard.values.Plan), for memory and the kernel constraints.
    """
    shards = column_shards or {}
    rows = row_shards or {}
    _check_once(inventory, placement, shards, rows, data_parallel, partial)
    _check_devices(placement, shards, rows, topology.num_devices)
    # checks that shards tile their table (row shards: TorchRec's blocks on every device or one host's)
    units, unit_placement = expand(inventory, placement, shards, rows, data_parallel, topology)
    check_constraints_honoured(inventory, topology, placement, shards, rows, data_parallel, kernels, cache_load_factors)
    used = device_memory(units, unit_placement, topology, kernels=kernels, load_factors=cache_load_factors)
    _check_memory(used, topology)
    return [m.total for m in used]


def _check_once(
    inventory: Inventory,
    placement: Mapping[str, int],
    shards: Mapping[str, Sequence[ColumnShard]],
    rows: Mapping[str, Sequence[RowShard]],
    data_parallel: Sequence[str],
    partial: bool,
) -> None:
    """Every table placed once in one sharding type, none unknown (and, unless `partial`, none missing)."""
    seen: dict[str, str] = {}
    for label, group in (
        ("placed whole", placement),
        ("split into column shards", shards),
        ("split into row shards", rows),
        ("data-parallel", data_parallel),
    ):
        for t in group:
            if t in seen:
                raise PlanError(f"table '{t}' is both {seen[t]} and {label}; keep one")
            seen[t] = label
    names = set(inventory.table_names)
    unknown = [n for n in seen if n not in names]
    if unknown:
        raise PlanError(f"plan places table '{unknown[0]}', which is not in inventory '{inventory.name}'")
    if not partial:
        missing = [n for n in inventory.table_names if n not in seen]
        if missing:
            raise PlanError(
                f"table '{missing[0]}' has no device in the plan ({len(missing)} unplaced); re-plan the inventory"
            )


def _check_devices(
    placement: Mapping[str, int],
    shards: Mapping[str, Sequence[ColumnShard]],
    rows: Mapping[str, Sequence[RowShard]],
    n: int,
) -> None:
    """Every device in [0, n); no empty list of shards."""
    for name, d in placement.items():
        if isinstance(d, bool) or not 0 <= d < n:
            raise PlanError(f"table '{name}' placed on device {d}; topology has {n} devices")
    for what, group in (("column", shards), ("row", rows)):
        for name, table_shards in group.items():
            if not table_shards:
                raise PlanError(f"table '{name}' has an empty list of {what} shards")
            for sh in table_shards:
                if not 0 <= sh.device < n:
                    raise PlanError(
                        f"{what} shard {sh.start}:{sh.end} of table '{name}' placed on device {sh.device}; "
                        f"topology has {n} devices"
                    )


def _check_memory(used: Sequence[MemoryBreakdown], topology: Topology) -> None:
    """Every device within its usable memory and its host memory."""
    cap = topology.usable_memory_bytes
    host_cap = topology.host_memory_per_device_gb * GB
    for d, m in enumerate(used):
        if m.total > cap:
            reserve = f" less its {topology.memory_reserve:.0%} reserve" if topology.memory_reserve else ""
            raise PlanError(
                f"device {d} holds {m.total / GB:.3f} GB, over its {topology.memory_per_device_gb:g} GB memory "
                f"limit{reserve}; add devices, raise --memory-gb or re-plan"
            )
        if m.host > host_cap:
            raise PlanError(
                f"device {d} keeps {m.host / GB:.3f} GB in host memory, over its "
                f"{topology.host_memory_per_device_gb:g} GB; add devices or re-plan"
            )


def check_plan(inventory: Inventory, plan: Plan) -> list[float]:
    """`check_placement` for a plan (every sharding type), plus its stated memory figures checked
    against the recomputed ones. Returns the recomputed GB per device."""
    used = check_placement(
        inventory,
        plan.placement,
        plan.topology,
        plan.column_shards,
        row_shards=plan.row_shards,
        data_parallel=plan.data_parallel,
        kernels=plan.kernels,
        cache_load_factors=plan.cache_load_factors,
    )
    gb = [u / GB for u in used]
    for d, (stated, real) in enumerate(zip(plan.memory_per_device_gb, gb, strict=True)):
        if abs(stated - real) > MEMORY_TOLERANCE_GB * max(1.0, real):
            raise PlanError(
                f"plan {plan.plan_id} states {stated:.6g} GB on device {d}, but its tables need {real:.6g} GB; "
                f"the plan was edited or made for other tables: re-plan"
            )
    return gb


def check_each_table_fits(inventory: Inventory, topology: Topology) -> None:
    """Fail early with the first table that is larger than a whole device."""
    cap = topology.usable_memory_bytes
    for t in inventory.tables:
        if (need := footprint(t, topology)) > cap:
            reserve = (
                f"; {topology.memory_reserve:.0%} of each device is reserved (--memory-reserve)"
                if topology.memory_reserve
                else ""
            )
            raise InfeasiblePlacementError(t.name, need / GB, cap / GB, "larger than one device" + reserve)


class MemoryTracker:
    """Free memory per device while tables are placed one by one."""

    def __init__(self, topology: Topology) -> None:
        self.capacity = topology.usable_memory_bytes
        self.used = [0] * topology.num_devices

    def fits(self, device: int, nbytes: int) -> bool:
        return self.used[device] + nbytes <= self.capacity

    def legal_devices(self, nbytes: int) -> list[int]:
        return [d for d in range(len(self.used)) if self.fits(d, nbytes)]

    def add(self, device: int, nbytes: int) -> None:
        self.used[device] += nbytes

    def largest_free_gb(self) -> float:
        return (self.capacity - min(self.used)) / GB
