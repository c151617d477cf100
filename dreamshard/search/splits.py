"""Which tables the learned sharders cut, and how (docs/architecture.md, "Tables larger than a device").

A table that cannot stay whole (larger than one device, or constrained away from table-wise: a *forced* table,
dreamshard.placement.layout) gets the cheapest of its feasible shardings (dreamshard.placement.options: column
shards of any count the dim allows, row-wise over every device, table-row-wise over one host's devices,
data-parallel) under the planning cost: each option is scored by a quick LPT plan of all the units, the other
forced tables at their current choice, and packed in that order; when packing fails, more shards or another type
are tried before giving up (`choose_layout`). If nothing fits, the error names the table and the limit.

A table may also be split when that lowers the predicted cost: a table whose predicted cost alone exceeds a
device's fair share (the total predicted single-table cost / D) bounds every table-wise plan from below, and
cutting it lets its lookups and output bytes spread over devices. Such "dominant" tables (at most `beam` of them,
largest first) are tried with 2 and 4 column shards where their constraints allow, each choice scored by the
same quick LPT plan, and kept only if the predicted cost drops by at least `min_gain` -- a small beam over splits,
as NeuroShard searches them.
"""

from __future__ import annotations

import math

import torch

from dreamshard.errors import InfeasiblePlacementError
from dreamshard.learning.mdp import single_table_costs
from dreamshard.learning.planning_cost import PlanningCost
from dreamshard.placement.layout import Layout, choose_layout, layout_of
from dreamshard.placement.options import TableOption, table_options
from dreamshard.search.candidates import lpt_placement
from dreamshard.sharders import get_sharder
from dreamshard.sharders.base import TableWiseSharder
from dreamshard.values import Inventory, Table, Topology

#: how many dominant tables the split beam looks at, and the shard counts it tries
SPLIT_BEAM = 4
SPLIT_COUNTS = (2, 4)
MIN_GAIN = 0.02


#: heuristics that try to pack a layout LPT could not (the search's other sources may still place it)
FALLBACK_PACKERS = ("size_greedy", "round_robin")


def _lpt(layout: Layout, topology: Topology, cost: PlanningCost) -> dict[str, int]:
    return lpt_placement(layout.units, topology, cost, layout.fixed)


def _pack(layout: Layout, topology: Topology, cost: PlanningCost) -> dict[str, int]:
    """A placement of the layout: LPT's, else the first fallback heuristic's that packs (LPT's error if none)."""
    try:
        return _lpt(layout, topology, cost)
    except InfeasiblePlacementError as e:
        first = e
    for name in FALLBACK_PACKERS:
        sharder = get_sharder(name)
        assert isinstance(sharder, TableWiseSharder)
        try:
            return sharder.place_units(layout.units, topology, layout.fixed)
        except InfeasiblePlacementError:
            continue
    raise first


def _score(layout: Layout, placement: dict[str, int], cost: PlanningCost) -> float:
    with torch.no_grad():
        return float(cost.overall(cost.placement_states(list(layout.units.tables), placement)))


def _lpt_cost(layout: Layout, topology: Topology, cost: PlanningCost) -> float:
    """The planning cost of a quick LPT plan of the layout; inf when it does not pack."""
    try:
        return _score(layout, _lpt(layout, topology, cost), cost)
    except InfeasiblePlacementError:
        return math.inf


def forced_layout(inventory: Inventory, topology: Topology, cost: PlanningCost) -> tuple[Layout, dict[str, int]]:
    """The forced tables cut as the planning cost ranks their options (module docstring), and the quick LPT
    placement of the layout that packed."""

    def rank(table: Table, options: list[TableOption], layout: Layout) -> list[TableOption]:
        scored = [(_lpt_cost(layout.with_option(o), topology, cost), i, o) for i, o in enumerate(options)]
        return [o for _, _, o in sorted(scored, key=lambda s: (s[0], s[1]))]

    return choose_layout(inventory, topology, lambda lay: _pack(lay, topology, cost), rank)


def _dominant(inventory: Inventory, layout: Layout, topology: Topology, cost: PlanningCost, beam: int) -> list[Table]:
    """The tables left whole whose predicted cost alone is above a device's fair share, largest first."""
    single = single_table_costs(cost, cost.encode(list(inventory.tables)))
    share = float(single.sum()) / topology.num_devices
    ranked = sorted(
        ((float(c), t) for t, c in zip(inventory.tables, single, strict=True) if c > share),
        key=lambda ct: -ct[0],
    )
    return [t for _, t in ranked if t.name not in layout.choices][:beam]


def learned_layout(
    inventory: Inventory, topology: Topology, cost: PlanningCost, beam: int = SPLIT_BEAM, min_gain: float = MIN_GAIN
) -> Layout:
    """The forced tables cut, plus column splits of dominant tables that lower the predicted cost (module doc)."""
    layout, placement = forced_layout(inventory, topology, cost)
    if beam <= 0 or topology.num_devices < 2:
        return layout
    dominant = _dominant(inventory, layout, topology, cost, beam)
    if not dominant:
        return layout
    best = _score(layout, placement, cost)
    for t in dominant:
        splits = [o for o in table_options(t, topology) if o.kind == "column_wise" and o.shards in SPLIT_COUNTS]
        for option in splits:
            trial = layout.with_option(option)
            c = _lpt_cost(trial, topology, cost)
            if c < (1.0 - min_gain) * best:
                best, layout = c, trial
    return layout


def whole_layout(inventory: Inventory) -> Layout:
    """Every table whole (`column_splits="never"`)."""
    return layout_of(inventory, {})
