"""What a batch of measurements prepares before its first one (docs/architecture/measuring.md, "Measuring").

Interleaved measurement times many placements of one inventory in turn; a backend that keeps reused buffers
(the CPU TBE's weight arena, dreamshard.profiling.buffers) would otherwise grow them device by device as larger
ones come. `reserve_for` hands the backend every device it is about to time, grouped as the oracle times them
(`fused_operators`), so it can size its buffers once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from dreamshard.placement.expand import expand_plan
from dreamshard.profiling.corpus import fused_operators
from dreamshard.profiling.oracle import Oracle
from dreamshard.values import Inventory, Plan, Table, Topology


def device_groups(units: Inventory, placement: Mapping[str, int], topology: Topology) -> list[list[Table]]:
    """The tables of each device timing a measurement of `placement` makes (as `Oracle.measure` groups them), `units`
    the plan's expanded inventory (`expand_plan`)."""
    devices: list[list[Table]] = [[] for _ in range(topology.num_devices)]
    for t in units.tables:
        if t.name in placement:
            devices[int(placement[t.name])].append(t)
    return [group for tables in devices if tables for group, _ in fused_operators(tables, topology)]


def reserve_for(oracle: object, plans: Sequence[tuple[Inventory, Plan]]) -> None:
    """Let `oracle`'s backend prepare for measuring each of `plans` (each with the inventory it is measured on);
    nothing for a simulated backend, where the oracle's corpus may answer instead of timing, or for an oracle of
    another kind (a test's scripted one has no backend): the plans are expanded only past that check."""
    if not isinstance(oracle, Oracle) or oracle.backend.is_simulated or oracle.corpus is not None:
        return
    groups: list[list[Table]] = []
    for inventory, plan in plans:
        units, placement = expand_plan(inventory, plan)
        groups += device_groups(units, placement, plan.topology)
    oracle.backend.reserve(groups)
