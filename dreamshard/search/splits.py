"""Column splits for the learned sharders: which tables to cut into column shards, and into how many
(docs/architecture.md, "Learning").

A table that fits on no device *must* be split: into the fewest equal shards (multiples of 4 columns,
dreamshard.placement.expand.split_counts) that each fit one device; if even the finest split does not fit, planning
fails with InfeasiblePlacementError naming the table and the limit. A table may also be split when that lowers
the predicted cost: a table whose predicted cost alone exceeds a device's fair share (the total predicted
single-table cost / D) bounds every table-wise plan from below, and cutting it lets its lookups and output
bytes spread over devices. Such "dominant" tables (at most `beam` of them, largest first) are tried with 2 and
4 shards, each choice scored by a quick LPT plan of the units under the planning cost, and kept only if the
predicted cost drops by at least `min_gain` -- a small beam over splits, as NeuroShard searches them.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from dreamshard.errors import InfeasiblePlacementError
from dreamshard.learning.mdp import single_table_costs
from dreamshard.learning.planning_cost import PlanningCost
from dreamshard.placement.expand import split_counts, split_inventory
from dreamshard.placement.validate import footprint
from dreamshard.search.candidates import lpt_placement
from dreamshard.values import Inventory, Topology

#: how many dominant tables the split beam looks at, and the shard counts it tries
SPLIT_BEAM = 4
SPLIT_COUNTS = (2, 4)
MIN_GAIN = 0.02


def mandatory_splits(inventory: Inventory, topology: Topology) -> dict[str, int]:
    """{table: k} for every table larger than one device: the fewest equal column shards that each fit."""
    cap = topology.usable_memory_bytes
    out: dict[str, int] = {}
    for t in inventory.tables:
        if footprint(t, topology) <= cap:
            continue
        ks = [
            k
            for k in split_counts(t.embedding_dim)
            if footprint(t.model_copy(update={"embedding_dim": t.embedding_dim // k}), topology) <= cap
        ]
        if not ks:
            finest = max(split_counts(t.embedding_dim), default=1)
            raise InfeasiblePlacementError(
                t.name,
                t.size_gb,
                topology.memory_per_device_gb,
                f"larger than one device even split into {finest} column shards of "
                f"{t.embedding_dim // finest} columns ({t.size_gb / finest:.3f} GB each); add memory per device "
                f"or shrink the table",
            )
        out[t.name] = min(ks)
    return out


def _lpt_cost(units: Inventory, topology: Topology, cost: PlanningCost) -> float:
    placement = lpt_placement(units, topology, cost)
    with torch.no_grad():
        return float(cost.overall(cost.placement_states(list(units.tables), placement)))


def choose_splits(
    inventory: Inventory, topology: Topology, cost: PlanningCost, beam: int = SPLIT_BEAM, min_gain: float = MIN_GAIN
) -> dict[str, int]:
    """Mandatory splits, plus optional ones for dominant tables that lower the predicted cost (see module doc)."""
    splits = mandatory_splits(inventory, topology)
    if beam <= 0 or topology.num_devices < 2:
        return splits
    single = single_table_costs(cost, cost.encode(list(inventory.tables)))
    share = float(single.sum()) / topology.num_devices
    dominant = [
        t
        for c, t in sorted(
            (
                (float(c), t)
                for t, c in zip(inventory.tables, single, strict=True)
                if c > share and t.name not in splits
            ),
            key=lambda ct: -ct[0],
        )
    ][:beam]
    if not dominant:
        return splits
    try:
        best = _lpt_cost(split_inventory(inventory, splits), topology, cost)
    except InfeasiblePlacementError:
        return splits
    for t in dominant:
        options = [k for k in SPLIT_COUNTS if k in split_counts(t.embedding_dim) and k <= topology.num_devices]
        for k in options:
            trial: Mapping[str, int] = {**splits, t.name: k}
            try:
                c = _lpt_cost(split_inventory(inventory, trial), topology, cost)
            except InfeasiblePlacementError:
                continue
            if c < (1.0 - min_gain) * best:
                best, splits = c, dict(trial)
    return splits
