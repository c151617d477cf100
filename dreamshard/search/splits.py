"""Which tables the learned sharders cut, and how (docs/architecture/data-model.md, "Tables larger than a device").

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
from collections.abc import Mapping

import torch

from dreamshard.errors import InfeasiblePlacementError
from dreamshard.learning.mdp import single_table_costs
from dreamshard.learning.planning_cost import PlanningCost
from dreamshard.placement.layout import Layout, choose_layout, forced_options, layout_of
from dreamshard.placement.options import TableOption, table_options
from dreamshard.search.layout_prior import LayoutPrior
from dreamshard.search.proposers import lpt_placement
from dreamshard.sharders import get_sharder
from dreamshard.sharders.base import TableWiseSharder
from dreamshard.values import Inventory, Table, Topology

#: how many dominant tables the split beam looks at, and the shard counts it tries
SPLIT_BEAM = 4
SPLIT_COUNTS = (2, 4)
MIN_GAIN = 0.02
#: the improvement of the forced tables' first fitting layout: passes, and at most this many forced tables /
#: options per table (each trial is one quick packing)
IMPROVE_PASSES = 2
MAX_IMPROVED = 16
MAX_OPTIONS = 12


#: no prior: the planning cost alone ranks a forced table's options
NO_PRIOR = LayoutPrior()
#: heuristics that try to pack a layout LPT could not (the search's other sources may still place it)
FALLBACK_PACKERS = ("size_greedy", "round_robin")


def _lpt(layout: Layout, topology: Topology, cost: PlanningCost) -> dict[str, int]:
    return lpt_placement(layout.units, topology, cost, layout.fixed)


def pack_units(units: Inventory, topology: Topology, cost: PlanningCost, fixed: Mapping[str, int]) -> dict[str, int]:
    """A placement of `units` around `fixed`: LPT's on the predicted costs, else the first fallback heuristic's
    that packs (LPT's error if none): a tight layout that only a round-robin packs is still placed."""
    try:
        return lpt_placement(units, topology, cost, fixed)
    except InfeasiblePlacementError as e:
        first = e
    for name in FALLBACK_PACKERS:
        sharder = get_sharder(name)
        assert isinstance(sharder, TableWiseSharder)
        try:
            return sharder.place_units(units, topology, fixed)
        except InfeasiblePlacementError:
            continue
    raise first


def _pack(layout: Layout, topology: Topology, cost: PlanningCost) -> dict[str, int]:
    return pack_units(layout.units, topology, cost, layout.fixed)


def _score(layout: Layout, placement: dict[str, int], cost: PlanningCost) -> float:
    with torch.no_grad():
        return float(cost.overall(cost.placement_states(list(layout.units.tables), placement)))


def _lpt_cost(layout: Layout, topology: Topology, cost: PlanningCost) -> float:
    """The planning cost of a quick LPT plan of the layout; inf when it does not pack."""
    try:
        return _score(layout, _lpt(layout, topology, cost), cost)
    except InfeasiblePlacementError:
        return math.inf


def forced_layout(
    inventory: Inventory, topology: Topology, cost: PlanningCost, prior: LayoutPrior = NO_PRIOR
) -> tuple[Layout, dict[str, int]]:
    """The forced tables cut as the planning cost ranks their options, the `prior`'s choice first where it has one
    (module docstring; dreamshard.search.layout_prior), and the quick LPT placement of the layout that packed."""

    def rank(table: Table, options: list[TableOption], layout: Layout) -> list[TableOption]:
        scored = [(_lpt_cost(layout.with_option(o), topology, cost), i, o) for i, o in enumerate(options)]
        return prior.prefer(table, [o for _, _, o in sorted(scored, key=lambda s: (s[0], s[1]))])

    layout, placement = choose_layout(inventory, topology, lambda lay: _pack(lay, topology, cost), rank)
    return improve_forced(inventory, topology, cost, layout, placement, prior)


def improve_forced(
    inventory: Inventory,
    topology: Topology,
    cost: PlanningCost,
    layout: Layout,
    placement: dict[str, int],
    prior: LayoutPrior = NO_PRIOR,
) -> tuple[Layout, dict[str, int]]:
    """The first layout that packed, improved: each forced table's other options are tried with the others at their
    current choice, packed (`_pack`) and scored, and a choice that lowers the predicted cost by `MIN_GAIN` is kept,
    for up to `IMPROVE_PASSES` passes. The ranking before packing scores an option against a base layout that
    may not pack at all (every option then ties), so the first layout that fits can cost several times the best
    one that does (two tables that must be split: a row-wise cut where a 4-way column split packs too). A table
    whose layout the `prior` chose keeps it: the cost that would move it does not know the device type."""
    forced = {n: o for n, o in forced_options(inventory, topology).items() if len(o) > 1 and not prior.decides(n, o)}
    if not forced or len(forced) > MAX_IMPROVED:
        return layout, placement
    best = _score(layout, placement, cost)
    for _ in range(IMPROVE_PASSES):
        moved = False
        for name, options in forced.items():
            tier = layout.choices[name].tier if name in layout.choices else 0
            for option in [o for o in options if o.tier == tier][:MAX_OPTIONS]:  # the cost knows no memory tier
                if layout.choices.get(name) == option:
                    continue
                trial = layout.with_option(option)
                try:
                    packed = _pack(trial, topology, cost)
                except InfeasiblePlacementError:
                    continue
                c = _score(trial, packed, cost)
                if c < (1.0 - MIN_GAIN) * best:
                    best, layout, placement, moved = c, trial, packed, True
        if not moved:
            break
    return layout, placement


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
    inventory: Inventory,
    topology: Topology,
    cost: PlanningCost,
    beam: int = SPLIT_BEAM,
    min_gain: float = MIN_GAIN,
    prior: LayoutPrior = NO_PRIOR,
) -> Layout:
    """The forced tables cut (the `prior`'s choice first), plus column splits of dominant tables that lower the
    predicted cost (module doc)."""
    layout, placement = forced_layout(inventory, topology, cost, prior)
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
