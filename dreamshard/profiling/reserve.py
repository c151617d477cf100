"""What a batch of measurements prepares before its first one (docs/architecture/measuring.md, "Measuring").

Interleaved measurement times many placements of one inventory in turn; a backend that keeps reused buffers
(the CPU TBE's weight arena, dreamshard.profiling.buffers) would otherwise grow them device by device as larger
ones come. `reserve_for` hands the backend every device it is about to time, grouped as the oracle times them
(`fused_operators`), so it can size its buffers once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from dreamshard.placement.expand import with_units
from dreamshard.profiling.corpus import fused_operators
from dreamshard.profiling.oracle import Oracle
from dreamshard.values import Inventory, Table, Topology


def device_groups(inventory: Inventory, placement: Mapping[str, int], topology: Topology) -> list[list[Table]]:
    """The tables of each device timing a measurement of `placement` makes (as `Oracle.measure` groups them)."""
    units = with_units(inventory, placement)
    devices: list[list[Table]] = [[] for _ in range(topology.num_devices)]
    for t in units.tables:
        if t.name in placement:
            devices[int(placement[t.name])].append(t)
    return [group for tables in devices if tables for group, _ in fused_operators(tables, topology)]


def reserve_for(oracle: object, placements: Sequence[tuple[Inventory, Mapping[str, int], Topology]]) -> None:
    """Let `oracle`'s backend prepare for measuring each of `placements` (nothing for a simulated backend, where the
    oracle's corpus may answer instead of timing, or for an oracle of another kind: a test's scripted one has no
    backend)."""
    if not isinstance(oracle, Oracle) or oracle.backend.is_simulated or oracle.corpus is not None:
        return
    oracle.backend.reserve([g for inv, placement, topo in placements for g in device_groups(inv, placement, topo)])
