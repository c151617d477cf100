"""The current plan extended to a new inventory version (docs/architecture/gate.md, "The incumbent"): the tables it
places stay where they are, the version's new tables are placed around them by a heuristic, and a table the old
layout can no longer hold (it grew past its device, or breaks a constraint of the new version) is placed again
with the new ones. What a training job can move to with the fewest moves when a table is added or removed.
"""

from __future__ import annotations

from dreamshard.errors import DreamshardError, PlanError
from dreamshard.placement.constraint_check import broken_constraint
from dreamshard.placement.expand import fold_units, with_units
from dreamshard.placement.layout import forced_options, layout_of
from dreamshard.placement.make_plan import make_plan
from dreamshard.sharders.base import TableWiseSharder
from dreamshard.sharders.registry import get_sharder
from dreamshard.values import Inventory, Plan, Topology, parse_unit

#: The heuristic that places the new tables (and those placed again) around the kept ones: the least-loaded device
#: by bytes looked up per sample, which balances the kept load the way the greedy baselines balance a fresh one.
EXTEND_WITH = "lookup_greedy"
#: The sharder label of an extended plan.
EXTENDED = "current+new"


def _kept_units(current: Plan, inventory: Inventory, topology: Topology) -> dict[str, int]:
    """The current plan's units of the tables the new version still has, less every table whose old layout breaks
    one of its (new) constraints."""
    names = set(inventory.table_names)
    kept = {u: d for u, d in current.units().items() if parse_unit(u).table in names}
    for _ in range(len(names) + 1):
        tables = {parse_unit(u).table for u in kept}
        broken = broken_constraint(
            inventory,
            topology,
            {t: d for t, d in current.placement.items() if t in tables},
            {t: s for t, s in current.column_shards.items() if t in tables},
            {t: s for t, s in current.row_shards.items() if t in tables},
            [t for t in current.data_parallel if t in tables],
        )
        if broken is None:
            return kept
        kept = {u: d for u, d in kept.items() if parse_unit(u).table != broken[0]}
    return kept


def extended_plan(current: Plan, inventory: Inventory, topology: Topology) -> Plan:
    """`current` extended to `inventory` on `topology` (module docstring), labelled `EXTENDED`. PlanError (one
    line) when it cannot be: another world size, no table in common, or no room for the tables to place."""
    if current.topology.num_devices != topology.num_devices:
        raise PlanError(
            f"the current plan {current.plan_id} is for {current.topology.num_devices} devices, "
            f"this job {topology.num_devices}: it cannot be extended"
        )
    kept = _kept_units(current, inventory, topology)
    if not kept:
        raise PlanError(f"the current plan {current.plan_id} shares no table with this version")
    tables = {parse_unit(u).table for u in kept}
    fresh = [t for t in inventory.tables if t.name not in tables]
    units = with_units(inventory, kept)
    try:
        forced = forced_options(Inventory(name=inventory.name, tables=tuple(fresh)), topology) if fresh else {}
        lay = layout_of(units, {name: options[0] for name, options in forced.items()})
        sharder = get_sharder(EXTEND_WITH)
        assert isinstance(sharder, TableWiseSharder)  # a heuristic: it places units around fixed ones
        folded = fold_units(inventory, sharder.place_units(lay.units, topology, {**lay.fixed, **kept}))
        return make_plan(  # the kept tables run their kernels as the current plan runs them
            inventory,
            topology,
            folded.placement,
            EXTENDED,
            column_shards=folded.column_shards,
            row_shards=folded.row_shards,
            data_parallel=folded.data_parallel,
            kernels={t: k for t, k in current.kernels.items() if t in tables},
            cache_load_factors={t: f for t, f in current.cache_load_factors.items() if t in tables},
        )
    except (DreamshardError, ValueError) as e:
        raise PlanError(f"the current plan {current.plan_id} cannot be extended to this version: {e}") from None
