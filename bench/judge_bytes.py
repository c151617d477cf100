"""The judge's byte accounting: what each device of a plan sends in each collective, by hand-checkable formulas.

Written here, not imported from the library (`dreamshard.profiling.comm` is the planner's; a test cross-checks the
two). For a plan over N devices at global batch B, one device d sends, with fp32 outputs (4 bytes):

* forward all-to-all: ``B x sum(output elements per sample of d's all-to-all units) x 4 x (N - 1) / N``. The
  all-to-all units are whole tables, column shards and a sequence table's row shards; a pooled unit outputs
  ``dim x features`` per sample, a sequence unit ``dim x lookups per sample`` (`Table.output_elements_per_sample`).
* forward reduce-scatter of a pooled table's row shards (partial sums over the whole batch):
  ``B x output_dim x 4 x (n - 1) / n`` per table, n = the devices holding its rows.
* backward: the same two exchanges again (gradients of the outputs; the reduce-scatter's backward is an
  all-gather of the same bytes), plus the all-reduce of data-parallel replicas' gradients,
  ``rows x dim x 4 x 2 (N - 1) / N`` per replicated table.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dreamshard.placement.expand import expand_plan
from dreamshard.values import Inventory, Plan, Table, parse_unit

#: Bytes per output element and per gradient element: the judge, like TorchRec's default, exchanges fp32.
ELEMENT_BYTES = 4


@dataclass(frozen=True)
class DeviceBytes:
    """Bytes one device sends in each collective of one iteration (forward; backward repeats the first two)."""

    all_to_all: float  # forward all-to-all of outputs (backward: the same again)
    reduce_scatter: float  # forward reduce-scatter of row shards' partial sums (backward: an all-gather)
    all_reduce: float  # backward all-reduce of data-parallel gradients

    @property
    def forward(self) -> float:
        return self.all_to_all + self.reduce_scatter

    @property
    def backward(self) -> float:
        return self.all_to_all + self.reduce_scatter + self.all_reduce


def all_to_all_bytes(batch: int, output_elements: Sequence[float], devices: int) -> float:
    """``batch x sum(output_elements) x 4 x (N - 1) / N``: the share of a device's outputs that leaves it."""
    if devices <= 1:
        return 0.0
    return batch * sum(output_elements) * ELEMENT_BYTES * (devices - 1) / devices


def reduce_scatter_bytes(batch: int, output_dim: int, group: int) -> float:
    """``batch x output_dim x 4 x (n - 1) / n`` for one row-sharded pooled table over `group` devices."""
    if group <= 1:
        return 0.0
    return batch * output_dim * ELEMENT_BYTES * (group - 1) / group


def all_reduce_bytes(rows: int, dim: int, devices: int) -> float:
    """``rows x dim x 4 x 2 (N - 1) / N``: a ring all-reduce of one replicated table's dense gradient."""
    if devices <= 1:
        return 0.0
    return rows * dim * ELEMENT_BYTES * 2 * (devices - 1) / devices


def unit_bytes(units: Sequence[Table], batch: int, devices: int, groups: dict[str, int]) -> DeviceBytes:
    """The bytes of one device holding `units` (unit tables of `dreamshard.placement.expand`); `groups`: devices
    holding each row-sharded table's rows, by table name."""
    a2a: list[float] = []
    rs = ar = 0.0
    for t in units:
        ref = parse_unit(t.name)
        if ref.kind == "replica":
            ar += all_reduce_bytes(t.num_embeddings, t.embedding_dim, devices)
        elif ref.kind == "row" and t.pooled:
            rs += reduce_scatter_bytes(batch, t.output_dim, groups.get(ref.table, devices))
        else:  # whole tables, column shards, sequence row shards: the all-to-all
            a2a.append(t.output_elements_per_sample)
    return DeviceBytes(all_to_all=all_to_all_bytes(batch, a2a, devices), reduce_scatter=rs, all_reduce=ar)


def device_units(inventory: Inventory, plan: Plan) -> list[list[Table]]:
    """The unit tables on each device of `plan` (`dreamshard.placement.expand.expand_plan`), in inventory order."""
    units, placement = expand_plan(inventory, plan)
    out: list[list[Table]] = [[] for _ in range(plan.topology.num_devices)]
    for t in units.tables:
        if t.name in placement:
            out[placement[t.name]].append(t)
    return out


def plan_bytes(inventory: Inventory, plan: Plan) -> list[DeviceBytes]:
    """What each device of `plan` sends, device by device."""
    n, batch = plan.topology.num_devices, plan.topology.batch_size
    groups = {name: len(shards) for name, shards in plan.row_shards.items()}
    return [unit_bytes(units, batch, n, groups) for units in device_units(inventory, plan)]
