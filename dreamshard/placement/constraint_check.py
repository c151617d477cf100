"""Whether a placement honours its tables' constraints: the part of THE placement validator
(dreamshard.placement.validate.check_placement) that reads them (docs/architecture/data-model.md, "Constraints").

Per table with constraints: the devices its units occupy (`devices`), its sharding type (`sharding_types`; a
sequence table is never table-row-wise), its shard count (`max_shards`: its shards; `min_shards`: the distinct
devices its shards are on, since a team asking for 2 shards wants the table on 2 devices), its column shards'
widths (`min_partition`), its kernel (`compute_kernels`), a caching table's load factor (`cache_params`) and the
device group. A unit of a cut table checked alone (a measurement of units) answers for its devices and kernel:
its type and count are its plan's. A plan that breaks one is refused in one line naming the table and the
constraint.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from dreamshard.errors import PlanError
from dreamshard.placement.kernels import cache_load_factor, valid_kernels
from dreamshard.values import ColumnShard, Inventory, RowShard, Table, Topology, parse_unit


def placed_type(table: str, devices: Sequence[int], kind: str, topology: Topology) -> str:
    """The sharding type of a table's units (`kind`: placed whole, column, row or replica units)."""
    if kind == "row":
        hosts = {topology.host_of(d) for d in devices}
        return "table_row_wise" if topology.hosts > 1 and len(hosts) == 1 else "row_wise"
    return {"whole": "table_wise", "column": "column_wise", "replica": "data_parallel"}[kind]


def _layouts(
    placement: Mapping[str, int],
    column_shards: Mapping[str, Sequence[ColumnShard]],
    row_shards: Mapping[str, Sequence[RowShard]],
    data_parallel: Sequence[str],
    topology: Topology,
) -> dict[str, tuple[str, list[int], list[int]]]:
    """{table: (sharding type, its units' devices, its column widths)}."""
    out: dict[str, tuple[str, list[int], list[int]]] = {}
    for t, d in placement.items():
        out[t] = ("table_wise", [int(d)], [])
    for t, shards in column_shards.items():
        out[t] = ("column_wise", [sh.device for sh in shards], [sh.width for sh in shards])
    for t, rows in row_shards.items():
        devices = [rs.device for rs in sorted(rows, key=lambda rs: rs.start)]
        out[t] = (placed_type(t, devices, "row", topology), devices, [])
    for t in data_parallel:
        out[t] = ("data_parallel", list(range(topology.num_devices)), [])
    return out


#: The sharding type a unit of a cut table runs as (dreamshard.values.units kinds).
_UNIT_TYPES = {"column": "column_wise", "row": "row_wise", "replica": "data_parallel"}


def _device_broken(table: Table, devices: list[int], topology: Topology) -> str | None:
    """The device constraints (`device_group`, `devices`) the devices of `table` (or of one of its units) break."""
    c = table.constraints
    if c is None:
        return None
    if c.device_group is not None and c.device_group != topology.device_type:
        return f"device_group '{c.device_group}': the topology's devices are {topology.device_type}"
    if c.devices is not None and (outside := sorted(set(devices) - set(c.devices))):
        return f"devices {list(c.devices)}: the plan puts it on device {outside[0]}"
    return None


def _broken(table: Table, kind: str, devices: list[int], widths: list[int], topology: Topology) -> str | None:
    """The first constraint of `table` the layout breaks, as `<constraint>: <what the plan does>`."""
    c = table.constraints
    if c is None:
        return None
    if (problem := _device_broken(table, devices, topology)) is not None:
        return problem
    if not c.allows_type(kind):
        return f"sharding_types {list(c.sharding_types or ())}: the plan makes it {kind}"
    cut = kind in ("column_wise", "row_wise", "table_row_wise")
    pieces, spread = (len(devices), len(set(devices))) if cut else (1, 1)
    if c.max_shards is not None and pieces > c.max_shards:
        return f"max_shards {c.max_shards}: the plan cuts it into {pieces} shards"
    if c.min_shards is not None and spread < c.min_shards:  # shards count on distinct devices (docs: Constraints)
        where = f" on {spread} device{'s' if spread > 1 else ''}" if pieces != spread else ""
        return f"min_shards {c.min_shards}: the plan cuts it into {pieces} shard{'s' if pieces > 1 else ''}{where}"
    if c.min_partition is not None and widths and min(widths) < c.min_partition:
        return f"min_partition {c.min_partition}: the plan has a column shard {min(widths)} columns wide"
    return None


def _kernel_broken(
    table: Table, kind: str, kernel: str | None, factor: float | None, device_type: str = "cuda"
) -> str | None:
    """The kernel constraints the plan's kernel (None: the default for its type) and load factor break, and a
    kernel that does not run on the topology's devices."""
    used = kernel or ("dense" if kind == "data_parallel" else "fused")
    if used not in valid_kernels(device_type):
        return f"compute_kernels: the plan runs it with '{used}', which does not run on {device_type} devices"
    c = table.constraints
    if c is None:
        return None
    if not c.allows_kernel(used):
        return f"compute_kernels {list(c.compute_kernels or ())}: the plan runs it with '{used}'"
    want = cache_load_factor(table, used) if c.cache_load_factor is not None else None
    if want is not None and factor is not None and abs(factor - want) > 1e-9:
        return f"cache_params load_factor {want:g}: the plan caches {factor:g} of it"
    return None


def broken_constraint(
    inventory: Inventory,
    topology: Topology,
    placement: Mapping[str, int],
    column_shards: Mapping[str, Sequence[ColumnShard]],
    row_shards: Mapping[str, Sequence[RowShard]],
    data_parallel: Sequence[str],
    kernels: Mapping[str, str] | None = None,
    cache_load_factors: Mapping[str, float] | None = None,
) -> tuple[str, str] | None:
    """(table, `<constraint>: <what the plan does>`) of the first table whose placement breaks one of its
    constraints (module docstring), None when every one is honoured; a sequence table made table_row_wise is a
    PlanError. `kernels` / `cache_load_factors`: the plan's (a table left out runs its type's default kernel); None:
    the kernels are not checked (a measurement of units, timed with the backend's own operator)."""
    tables = inventory.by_name()
    for name, (kind, devices, widths) in _layouts(
        placement, column_shards, row_shards, data_parallel, topology
    ).items():
        table = tables.get(name)
        base = parse_unit(name).table  # a unit runs its table's kernel
        if table is None or (table.constraints is None and table.pooled and base not in (kernels or {})):
            continue
        if not table.pooled and kind == "table_row_wise":
            raise PlanError(
                f"table '{name}' is a sequence table: TorchRec's EmbeddingCollection cannot shard it table_row_wise"
            )
        kernel = (kernels or {}).get(base)
        unit = parse_unit(name).kind
        if unit != "table":  # one unit of a cut table (a measurement's units): its type and count are the plan's
            kind = _UNIT_TYPES[unit]
            problem = _device_broken(table, devices, topology)
        else:
            problem = _broken(table, kind, devices, widths, topology)
        if kernels is not None:  # None: a measurement's units, timed with the backend's own operator
            factor = (cache_load_factors or {}).get(base)
            problem = problem or _kernel_broken(table, kind, kernel, factor, topology.device_type)
        if problem is not None:
            return name, problem
    return None


def check_constraints_honoured(
    inventory: Inventory,
    topology: Topology,
    placement: Mapping[str, int],
    column_shards: Mapping[str, Sequence[ColumnShard]],
    row_shards: Mapping[str, Sequence[RowShard]],
    data_parallel: Sequence[str],
    kernels: Mapping[str, str] | None = None,
    cache_load_factors: Mapping[str, float] | None = None,
) -> None:
    """A one-line PlanError naming the first table whose placement breaks one of its constraints
    (`broken_constraint`)."""
    broken = broken_constraint(
        inventory, topology, placement, column_shards, row_shards, data_parallel, kernels, cache_load_factors
    )
    if broken is not None:
        raise PlanError(f"table '{broken[0]}' breaks its constraint {broken[1]}")


__all__ = ["broken_constraint", "check_constraints_honoured", "placed_type"]
