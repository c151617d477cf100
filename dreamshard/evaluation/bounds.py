"""The reference lower bound of a comparison: every table (or its smallest share) measured alone, and an even
share of the inventory's compute and all-to-all (docs/architecture/measuring.md, "Measuring"). For reports only: the
gate decides on the plans and measures none."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

from dreamshard.placement.expand import shard_table
from dreamshard.profiling.comm import all_reduce_bytes, device_comm_bytes, host_comm_model
from dreamshard.values import DIM_ALIGN, MAX_DEVICE_GB, Inventory, Measurement, Table, Topology
from dreamshard.values.costs import Collective, CommModel

#: The collectives a unit's outputs or gradients can travel by, whichever sharding type it takes.
OTHER_COLLECTIVES: tuple[Collective, ...] = ("reduce_scatter", "all_reduce")
#: The empty step: the least a device's fused operator can be given (one row, the narrowest column width, no
#: lookups); its compute is the fixed cost every device that holds anything pays (dreamshard.evaluation.limit).
EMPTY_STEP = Table(name="empty-step", num_embeddings=1, embedding_dim=DIM_ALIGN, pooling_factor=0.0)

if TYPE_CHECKING:  # pragma: no cover
    from dreamshard.profiling import Oracle


class LowerBound(BaseModel):
    """The reference every plan is compared with ("x LB"): no placement of the inventory on the topology costs
    less (docs/architecture/measuring.md, "Evaluation").

    The bottleneck device costs at least the average over the devices that hold anything, so at least
    compute_ms + comm_ms: the all-to-all of an even 1/D share of every table's pooled output (alpha once per
    direction, as the oracle counts it), plus an even share of the compute. A backend that knows its cost terms
    (the simulator: `ComputeFloor`) gives the compute exactly: what a device pays once however many tables it
    holds (kernel launches), plus each table's least added cost / D. A measuring backend gives no such split:
    the compute is then the sum of single-table compute / D (fused kernels can beat that slightly). And the
    bottleneck costs at least the costliest table's smallest possible share alone: the columns some device must
    hold of it, dim / D rounded up to the column alignment (the whole table when it cannot be split), comm
    included.

    Every sharding type counts (`comm_bound`): a table may instead be row-sharded (its partial sums
    reduce-scattered) or replicated (no forward exchange, its gradient all-reduced), so with the other collectives'
    models each table adds the least of its three exchange volumes, and every device pays the least latency; on a
    topology with hosts each collective is costed as the oracle costs it there.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_single_ms: float  # the costliest table's smallest share alone on a device, its comm included
    sum_single_ms: float  # sum of single-table totals (alpha counted once per table: not a usable reference)
    compute_ms: float  # even share of compute (see above)
    comm_ms: float  # fwd + bwd all-to-all of an even 1/D share of every table's pooled output (alpha once each)
    total_ms: float  # max(max_single_ms, compute_ms + comm_ms)
    fixed_ms: float = 0.0  # the empty step's compute (`EMPTY_STEP`; 0: not measured): the limit's fixed cost
    variable_ms: float = 0.0  # sum over tables of compute alone above the fixed cost (the limit's fusion ratio)


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


def comm_bound(tables: Sequence[Table], topology: Topology, models: Mapping[Collective, CommModel]) -> float:
    """The least fwd + bwd exchange the average device that holds anything pays, over every sharding type of
    every table (`models`: the all-to-all's, and the reduce-scatter's and all-reduce's when row shards and
    replicas are in the plan space; each collective's cost per device on `topology`, hosts included).

    Summed over the devices, a table costs at least the least of: table- or column-wise, its outputs' all-to-all
    forward and back (``2 beta B``, B = `device_comm_bytes` of `Table.output_elements_per_sample`: a sequence
    table's grow with its lookups, and its row shards send the same B by the all-to-all); a pooled table row-wise
    over a group of g devices (g = the devices of a host, or all), every one of them reduce-scattering and
    all-gathering B (``2 g beta B``, g >= 1); data-parallel, every device all-reducing its gradient (``D beta G``, G =
    `all_reduce_bytes`). The average over D devices is that sum / D, plus the least latency any device that
    communicates pays (``2 alpha`` for an all-to-all or a reduce-scatter, ``alpha`` for an all-reduce)."""
    d, batch = topology.num_devices, topology.batch_size
    if d <= 1 or not tables:
        return 0.0
    costed = {c: host_comm_model(topology, m, c) for c, m in models.items()}
    beta = {c: m.beta_ms_per_mb / 1e6 for c, m in costed.items()}  # ms per byte
    group = topology.local_world_size if topology.hosts > 1 else d  # row-wise: all devices; table-row-wise: a host's
    total = 0.0
    for t in tables:
        b = device_comm_bytes(batch, [t.output_elements_per_sample], d)  # dim x features, or x lookups (sequence)
        options = [2.0 * beta["all_to_all"] * b]  # a sequence table's row shards send its rows by the all-to-all too
        if "reduce_scatter" in beta and t.pooled:
            options.append(2.0 * group * beta["reduce_scatter"] * b)
        if "all_reduce" in beta:
            options.append(d * beta["all_reduce"] * all_reduce_bytes([(t.num_embeddings, t.embedding_dim)], d))
        total += min(options)
    latency = min((1.0 if c == "all_reduce" else 2.0) * m.alpha_ms for c, m in costed.items())
    return latency + total / d


def _least_alone(
    tables: Mapping[str, Table],
    name: str,
    single: Measurement,
    share: Measurement,
    topology: Topology,
    exchange: Mapping[Collective, CommModel],
) -> float:
    """The least a device that holds any of table `name` (of `tables`, by name) pays for it: its smallest column
    share alone, comm included; with row shards and replicas in the plan space (`exchange` holds more than the
    all-to-all) also an even 1/D of its compute (D row shards, or D replicas at 1/D of the batch, split its
    lookups D ways) plus its least exchange."""
    alone = share.overall_ms
    if len(exchange) <= 1 or topology.num_devices <= 1:
        return alone
    c = single.costs.per_device[0]
    split = (c.fwd_compute + c.bwd_compute) / topology.num_devices + comm_bound([tables[name]], topology, exchange)
    return min(alone, split)


def lower_bound(
    inventory: Inventory,
    singles: Mapping[str, Measurement],
    topology: Topology,
    floor: ComputeFloor | None = None,
    shares: Mapping[str, Measurement] | None = None,
    collectives: Mapping[Collective, CommModel] | None = None,
    fixed_ms: float = 0.0,
) -> LowerBound:
    """The LowerBound of `inventory` on `topology` from each table's single-table measurement (kind="single"),
    the backend's `floor` when it has one, the single measurements of the tables' smallest shares
    (`smallest_share`, by table name; a table missing there counts with its whole-table single), and the
    reduce-scatter's and all-reduce's models (`collectives`; None: a plan space of table- and column-wise units,
    whose outputs all go by the all-to-all), and the empty step's compute (`fixed_ms`, kept for the limit)."""
    d = topology.num_devices
    totals = [m.overall_ms for m in singles.values()]
    compute = [m.costs.per_device[0].fwd_compute + m.costs.per_device[0].bwd_compute for m in singles.values()]
    comm_ms = 0.0
    models = [m.comm_model for m in singles.values() if m.comm_model is not None]
    # every collective a unit's exchange can take ({} without a measured all-to-all: no comm term at all)
    exchange: dict[Collective, CommModel] = {"all_to_all": models[0], **(collectives or {})} if models else {}
    if d > 1 and exchange and inventory.tables:
        comm_ms = comm_bound(inventory.tables, topology, exchange)
    if floor is not None and inventory.tables:
        compute_ms = (
            floor.shared_compute_ms() + sum(floor.table_floor_ms(t, topology.batch_size) for t in inventory.tables) / d
        )
    else:
        compute_ms = sum(compute) / d
    tables = inventory.by_name()
    mx = max(
        (_least_alone(tables, name, m, (shares or {}).get(name, m), topology, exchange) for name, m in singles.items()),
        default=0.0,
    )
    return LowerBound(
        max_single_ms=mx,
        sum_single_ms=sum(totals),
        compute_ms=compute_ms,
        comm_ms=comm_ms,
        total_ms=max(mx, compute_ms + comm_ms),
        fixed_ms=fixed_ms,
        variable_ms=sum(compute) - len(compute) * fixed_ms,
    )


def measure_lower_bound(inventory: Inventory, topology: Topology, oracle: Oracle) -> LowerBound:
    """Measure every table alone, its smallest share alone where that is less, and the empty step (`EMPTY_STEP`:
    the fixed cost), then `lower_bound`.

    Memory is not the question here: a table too big for one device is measured as it is (plans split it); nor are
    the tables' constraints (a pin, a sharding type): each is measured alone on device 0, whole or as its share."""
    free = inventory.model_copy(
        update={"tables": tuple(t.model_copy(update={"constraints": None}) for t in inventory.tables)}
    )
    roomy = topology.model_copy(
        update={
            "memory_per_device_gb": min(
                MAX_DEVICE_GB,
                max(topology.memory_per_device_gb, max((t.size_gb for t in inventory.tables), default=0.0) * 1.01),
            )
        }
    )
    singles = {t.name: oracle.measure(free, {t.name: 0}, roomy, kind="single") for t in free.tables}
    shares: dict[str, Measurement] = {}
    for t in free.tables:
        part = smallest_share(t, topology.num_devices)
        if part is not t:
            unit = Inventory(name=inventory.name, tables=(part,))
            shares[t.name] = oracle.measure(unit, {part.name: 0}, roomy, kind="single")
    empty = oracle.measure(
        Inventory(name=inventory.name, tables=(EMPTY_STEP,)), {EMPTY_STEP.name: 0}, roomy, kind="single"
    )
    fixed = empty.costs.per_device[0].fwd_compute + empty.costs.per_device[0].bwd_compute
    fitted = getattr(oracle, "collective_model", None)  # an oracle that fits no other collective: table/column-wise
    collectives = {c: fitted(topology, c) for c in OTHER_COLLECTIVES} if fitted and topology.num_devices > 1 else {}
    return lower_bound(inventory, singles, topology, compute_floor(oracle), shares, collectives, fixed)
