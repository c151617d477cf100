"""How a table that cannot stay whole gets its sharding, and why (docs/architecture/data-model.md, "Tables larger than a
device").

The learned sharders rank a forced table's options (dreamshard.placement.options) by the planning cost. That cost
knows the device type only when the model learned from it or was calibrated on it for this inventory. Where it
does not (a model trained on cpu planning for cuda, no calibration on cuda), the ranking follows TorchRec's choice
for that table: a labelled prior (`torchrec_prior`). On a GPU a row-wise cut and a column cut cost what TorchRec's
own model says far better than a cpu-trained cost does. The prior only reorders what the cost ranks: an option
TorchRec did not choose is still tried when the preferred one does not pack.

`layout_reasons` writes one line per table the plan cuts: its layout, why it is not whole, which options it had
and what chose among them. The plan keeps them (`Plan.layouts`), and `plan` prints them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from dreamshard.errors import DreamshardError
from dreamshard.placement.constraint_check import placed_type
from dreamshard.placement.layout import Layout, forced_options
from dreamshard.placement.options import TableOption, column_split_counts, min_column_width
from dreamshard.sharders import get_sharder
from dreamshard.values import DEFAULT_CACHE_LOAD_FACTOR, GB, CalibrationReport, Inventory, Plan, Table, Topology

#: What ranks the options when no prior does.
COST_BASIS = "the predicted cost"


@dataclass(frozen=True)
class LayoutPrior:
    """TorchRec's choice per table, as (sharding type, shard count), and the label every reason carries."""

    choices: Mapping[str, tuple[str, int]] = field(default_factory=dict)
    basis: str = COST_BASIS

    def prefer(self, table: Table, ranked: Sequence[TableOption]) -> list[TableOption]:
        """`ranked` (by the cost) with the option TorchRec chose for `table` first, when it chose one of them."""
        want = self.choices.get(table.name)
        if want is None:
            return list(ranked)
        first = [o for o in ranked if (o.kind, o.shards) == want][:1]
        return first + [o for o in ranked if o not in first]

    def decides(self, table: str, options: Sequence[TableOption]) -> bool:
        """Whether TorchRec's choice for `table` is one of `options` (it may cut more shards than devices)."""
        return self.choices.get(table) in {(o.kind, o.shards) for o in options}

    def chose(self, option: TableOption) -> str:
        """What chose `option` for its table, when the cost ranked more than one (the reason's last words)."""
        want = self.choices.get(option.table.name)
        if want == (option.kind, option.shards):
            return self.basis
        if want is None:
            return COST_BASIS
        return f"{COST_BASIS} (TorchRec's choice, {want[0]} x{want[1]}, is not among the options)"


def prior_reason(device_types: Sequence[str], topology: Topology, calibration: CalibrationReport | None) -> str:
    """Why the cost cannot rank the layouts on `topology` ("" when it can): the model learned from other device
    types (`device_types`, none recorded: a simulated model, taken as it is) and no calibration ran on this one."""
    device = topology.device_type
    if not device_types or device in device_types:
        return ""
    if calibration is not None and calibration.backend == device:
        return ""
    return f"the model learned on {' and '.join(device_types)}, with no calibration on {device}"


def torchrec_prior(inventory: Inventory, topology: Topology, reason: str) -> LayoutPrior:
    """TorchRec's planner asked for `inventory` on `topology`; its choice for each table it did not keep whole, under
    the label "TorchRec's choice (prior: <reason>)". Without TorchRec's plan (not installed, no plan): the cost,
    labelled with why."""
    try:
        plan = get_sharder("torchrec").shard(inventory, topology)
    except DreamshardError as e:
        return LayoutPrior(basis=f"{COST_BASIS} ({reason}; TorchRec's choice unavailable: {str(e)[:120]})")
    return LayoutPrior(choices=cut_types(plan), basis=f"TorchRec's choice (prior: {reason})")


def cut_types(plan: Plan) -> dict[str, tuple[str, int]]:
    """(sharding type, shard count) of every table `plan` does not keep whole, shard counts as constraints count."""
    out: dict[str, tuple[str, int]] = {t: ("column_wise", len(s)) for t, s in plan.column_shards.items()}
    for t, rows in plan.row_shards.items():
        out[t] = (placed_type(t, [r.device for r in rows], "row", plan.topology), len(rows))
    out.update({t: ("data_parallel", 1) for t in plan.data_parallel})
    return out


def prior_for(
    inventory: Inventory, topology: Topology, device_types: Sequence[str], calibration: CalibrationReport | None
) -> LayoutPrior:
    """The prior a learned sharder ranks forced tables' options with: TorchRec's choice where the cost does not
    know the device type (`prior_reason`) and a table cannot stay whole; else the cost alone."""
    reason = prior_reason(device_types, topology, calibration)
    if not reason or not forced_options(inventory, topology):
        return LayoutPrior()
    return torchrec_prior(inventory, topology, reason)


def layout_reasons(layout: Layout, topology: Topology, prior: LayoutPrior) -> dict[str, str]:
    """One line per table `layout` cuts: its layout, why it is not whole, its options and what chose."""
    forced = forced_options(layout.inventory, topology) if layout.choices else {}
    out: dict[str, str] = {}
    for name, option in layout.choices.items():
        table = option.table
        if name in forced:
            why = _why_forced(table, topology, forced[name])
            only = len({_label(o) for o in forced[name]}) == 1
            chose = "elimination (its only option)" if only else prior.chose(option)
        else:
            why, chose = "it fits whole, but the cut is predicted cheaper", COST_BASIS
        tier = _tier(option, forced.get(name, [option]))
        out[name] = f"{_label(option)}: {why}{tier}; chosen by {chose}{_no_columns(table)}"
    return out


def _label(option: TableOption) -> str:
    if option.kind != "row_wise":
        return option.label
    return f"row_wise x{option.shards}" + (f" with {option.kernel}" if option.tier else "")


def _tier(option: TableOption, options: Sequence[TableOption]) -> str:
    """Why a table is cached from host memory ("" when it is in device memory): no layout in HBM packed."""
    if not option.tier:
        return ""
    factor = option.units()[0].constraints
    load = factor.cache_load_factor if factor is not None and factor.cache_load_factor else DEFAULT_CACHE_LOAD_FACTOR
    where = "no layout in device memory fits" if all(o.tier for o in options) else "no layout in device memory packs"
    return (
        f"; {where}, so it is cached from host memory, the cheapest that does (weights and optimizer state in "
        f"host memory, a device cache of {load:g} of its rows: TorchRec's fused_uvm_caching)"
    )


def _why_forced(table: Table, topology: Topology, options: Sequence[TableOption]) -> str:
    labels = ", ".join(dict.fromkeys(_label(o) for o in options))
    usable = topology.usable_memory_bytes / GB
    if table.constraints is not None and not table.constraints.allows_type("table_wise"):
        return f"its constraints allow no table-wise; options {labels}"
    return f"{table.size_gb:.1f} GB of weights, larger than a device ({usable:.1f} GB usable); options {labels}"


def _no_columns(table: Table) -> str:
    """Why a table has no column-wise option, when the minimum width is the reason ("" otherwise)."""
    if column_split_counts(table):
        return ""
    return f"; no column shards: dim {table.embedding_dim} < 2 x min width {min_column_width(table)}"
