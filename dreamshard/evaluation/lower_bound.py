"""The reference lower bound of a comparison: every table (or its smallest share) measured alone, and an even
share of the inventory's compute and all-to-all (docs/architecture.md, "Measuring"). For reports only: the
gate decides on the plans and measures none."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

from dreamshard.profiling.comm import device_comm_bytes
from dreamshard.shards import shard_table
from dreamshard.types import DIM_ALIGN, MAX_DEVICE_GB, Inventory, Measurement, Table, Topology

if TYPE_CHECKING:  # pragma: no cover
    from dreamshard.profiling import Oracle


class LowerBound(BaseModel):
    """The reference every plan is compared with ("x LB"): no placement of the inventory on the topology costs
    less (docs/architecture.md, "Evaluation").

    The bottleneck device costs at least the average over the devices that hold anything, so at least
    compute_ms + comm_ms: the all-to-all of an even 1/D share of every table's pooled output (alpha once per
    direction, as the oracle counts it), plus an even share of the compute. A backend that knows its cost terms
    (the simulator: `ComputeFloor`) gives the compute exactly: what a device pays once however many tables it
    holds (kernel launches), plus each table's least added cost / D. A measuring backend gives no such split:
    the compute is then the sum of single-table compute / D (fused kernels can beat that slightly). And the
    bottleneck costs at least the costliest table's smallest possible share alone: the columns some device must
    hold of it, dim / D rounded up to the column alignment (the whole table when it cannot be split), comm
    included.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_single_ms: float  # the costliest table's smallest share alone on a device, its comm included
    sum_single_ms: float  # sum of single-table totals (alpha counted once per table: not a usable reference)
    compute_ms: float  # even share of compute (see above)
    comm_ms: float  # fwd + bwd all-to-all of an even 1/D share of every table's pooled output (alpha once each)
    total_ms: float  # max(max_single_ms, compute_ms + comm_ms)


@runtime_checkable
class ComputeFloor(Protocol):
    """A backend that can bound placements' compute from below by its own cost terms (SimulatorBackend)."""

    def shared_compute_ms(self) -> float: ...

    def table_floor_ms(self, table: Table, batch_size: int) -> float: ...


def compute_floor(oracle: object) -> ComputeFloor | None:
    """The oracle's backend when it offers a ComputeFloor (the simulator), else None (a measuring backend)."""
    backend = getattr(oracle, "backend", None)
    return backend if isinstance(backend, ComputeFloor) else None


def smallest_share(table: Table, num_devices: int) -> Table:
    """The fewest columns of `table` some device holds in any plan: dim / D rounded up to DIM_ALIGN (column
    shards are multiples of it), the whole table when that is all of it or it cannot be split."""
    if table.embedding_dim % DIM_ALIGN:
        return table
    width = DIM_ALIGN * math.ceil(table.embedding_dim / (DIM_ALIGN * max(1, num_devices)))
    return table if width >= table.embedding_dim else shard_table(table, 0, width)


def lower_bound(inventory: Inventory, singles: Mapping[str, Measurement], topology: Topology,
                floor: ComputeFloor | None = None, shares: Mapping[str, Measurement] | None = None) -> LowerBound:
    """The LowerBound of `inventory` on `topology` from each table's single-table measurement (kind="single"),
    the backend's `floor` when it has one, and the single measurements of the tables' smallest shares
    (`smallest_share`, by table name; a table missing there counts with its whole-table single)."""
    d = topology.num_devices
    totals = [m.overall_ms for m in singles.values()]
    compute = [m.costs.per_device[0].fwd_compute + m.costs.per_device[0].bwd_compute for m in singles.values()]
    comm_ms = 0.0
    models = [m.comm_model for m in singles.values() if m.comm_model is not None]
    if d > 1 and models:
        dims = [t.output_dim for t in inventory.tables]  # a shared table: dim x its features
        share = device_comm_bytes(topology.batch_size, dims, d) / d
        comm_ms = 2.0 * models[0].cost_ms(share)
    if floor is not None and inventory.tables:
        compute_ms = floor.shared_compute_ms() + sum(floor.table_floor_ms(t, topology.batch_size)
                                                     for t in inventory.tables) / d
    else:
        compute_ms = sum(compute) / d
    mx = max(((shares or {}).get(name, m).overall_ms for name, m in singles.items()), default=0.0)
    return LowerBound(max_single_ms=mx, sum_single_ms=sum(totals), compute_ms=compute_ms, comm_ms=comm_ms,
                      total_ms=max(mx, compute_ms + comm_ms))


def measure_lower_bound(inventory: Inventory, topology: Topology, oracle: Oracle) -> LowerBound:
    """Measure every table alone, and its smallest share alone where that is less, then `lower_bound`.

    Memory is not the question here: a table too big for one device is measured as it is (plans split it)."""
    roomy = topology.model_copy(update={"memory_per_device_gb": min(MAX_DEVICE_GB, max(
        topology.memory_per_device_gb, max((t.size_gb for t in inventory.tables), default=0.0) * 1.01))})
    singles = {t.name: oracle.measure(inventory, {t.name: 0}, roomy, kind="single") for t in inventory.tables}
    shares: dict[str, Measurement] = {}
    for t in inventory.tables:
        part = smallest_share(t, topology.num_devices)
        if part is not t:
            unit = Inventory(name=inventory.name, tables=(part,))
            shares[t.name] = oracle.measure(unit, {part.name: 0}, roomy, kind="single")
    return lower_bound(inventory, singles, topology, compute_floor(oracle), shares)
