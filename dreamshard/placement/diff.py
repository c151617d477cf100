"""What changes between two plans of one model: which tables move, and how many bytes of them
(docs/architecture/pipeline.md, "The production loop").

Publishing a new plan reshards the training job's embedding state: every table whose placement changed (another
device, another sharding type, other shards) is sent to its new ranks. A table's placement is its sharding type and
the devices of each of its units; a table in only one of the two plans is added or removed, not moved. A moved
table sends its weights and its optimizer state (as the table-wise state of the new plan's optimizer) once, at the
new plan's recorded all-to-all rate: the move's time.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict

from dreamshard.placement.device_memory import optimizer_bytes
from dreamshard.values import GB, Inventory, Plan
from dreamshard.values.topology import DEFAULT_BETA_MS_PER_MB
from dreamshard.values.units import parse_unit


class TableMove(BaseModel):
    """One moved table: where it was and where it goes (its sharding type and devices), and what it sends (GiB)."""

    model_config = ConfigDict(frozen=True)
    table: str
    before: str  # "device 1", "column_wise on devices 0, 1"
    after: str
    weights_gib: float
    state_gib: float = 0.0  # its optimizer state under the new plan's optimizer
    why: str = ""  # from -> to with each side's measured step, when the publish knows them

    @property
    def line(self) -> str:
        state = f" + {self.state_gib:.4f} GiB optimizer state" if self.state_gib > 0 else ""
        return f"{self.table}: {self.before} -> {self.after} ({self.weights_gib:.4f} GiB weights{state})"


class PlanDiff(BaseModel):
    """What publishing one plan in place of another changes (module docstring); sizes in GiB (2**30 bytes)."""

    model_config = ConfigDict(frozen=True)
    old_plan_id: str
    new_plan_id: str
    moved: tuple[str, ...]  # tables in both plans placed differently (devices, type or shards)
    added: tuple[str, ...]  # tables only the new plan places
    removed: tuple[str, ...]  # tables only the old plan placed
    kept: int  # tables placed exactly as before
    moved_gb: float  # weights of the moved tables (the new inventory's sizes): what resharding sends
    moved_state_gb: float = 0.0  # their optimizer state under the new plan's optimizer (sgd: none), sent too
    move_ms: float = 0.0  # weights and state sent once at `ms_per_mb`
    ms_per_mb: float = 0.0  # the new plan's recorded all-to-all rate (its comm fit), else its interconnect's
    tables: tuple[TableMove, ...] = ()  # each moved table, from -> to, in `moved` order

    @property
    def summary(self) -> str:
        total = len(self.moved) + self.kept
        extra = "".join(f", {len(x)} {what}" for x, what in ((self.added, "added"), (self.removed, "removed")) if x)
        state = f" + {self.moved_state_gb:.3f} GiB optimizer state" if self.moved_state_gb > 0 else ""
        took = f", about {self.move_ms:.0f} ms to send at {self.ms_per_mb:.3f} ms/MB" if self.moved else ""
        return (
            f"{len(self.moved)} of {total} tables move ({self.moved_gb:.3f} GiB weights{state}{took}) from plan "
            f"{self.old_plan_id}{extra}"
        )


def move_rate_ms_per_mb(plan: Plan) -> float:
    """What sending one MB off a device costs under `plan`: its recorded all-to-all fit's beta, else its world's
    declared intra-host bandwidth, else the labelled default (dreamshard.profiling.comm)."""
    fits = [f for f in plan.comm_fits if f.collective == "all_to_all"]
    if fits:
        return fits[0].beta_ms_per_mb
    world = plan.topology.world
    if world is not None and world.intra_host_gbps is not None:
        return 1.0 / world.intra_host_gbps
    return DEFAULT_BETA_MS_PER_MB


def _said(where: tuple[str, tuple[tuple[str, int], ...]]) -> str:
    """A table's placement in words: "device 3" (table-wise), "column_wise on devices 0, 1"."""
    kind, units = where
    devices = sorted({d for _, d in units})
    if kind == "table_wise" and len(devices) == 1:
        return f"device {devices[0]}"
    if kind == "data_parallel":
        return f"data_parallel on {len(devices)} devices"
    return f"{kind} on device{'s' if len(devices) > 1 else ''} {', '.join(map(str, devices))}"


def _where(plan: Plan) -> dict[str, tuple[str, tuple[tuple[str, int], ...]]]:
    """Per table: its sharding type and its units' devices (sorted)."""
    units: dict[str, list[tuple[str, int]]] = {}
    for unit, device in plan.units().items():
        units.setdefault(parse_unit(unit).table, []).append((unit, device))
    return {t: (plan.sharding_type(t), tuple(sorted(u))) for t, u in units.items()}


def plan_diff(old: Plan, new: Plan, inventory: Inventory) -> PlanDiff:
    """What publishing `new` (a plan of `inventory`) in place of `old` changes."""
    before, after = _where(old), _where(new)
    sizes: Mapping[str, float] = {t.name: t.size_bytes / GB for t in inventory.tables}
    both = [t for t in after if t in before]
    moved = tuple(t for t in both if before[t] != after[t])
    by = inventory.by_name()
    state = {t: optimizer_bytes(by[t], new.topology.optimizer) / GB if t in by else 0.0 for t in moved}
    state_gb = sum(state.values())
    weights_gb = sum(sizes.get(t, 0.0) for t in moved)
    rate = move_rate_ms_per_mb(new)
    tables = tuple(
        TableMove(
            table=t, before=_said(before[t]), after=_said(after[t]), weights_gib=sizes.get(t, 0.0), state_gib=state[t]
        )
        for t in moved
    )
    return PlanDiff(
        old_plan_id=old.plan_id,
        new_plan_id=new.plan_id,
        moved=moved,
        added=tuple(t for t in after if t not in before),
        removed=tuple(t for t in before if t not in after),
        kept=len(both) - len(moved),
        moved_gb=weights_gb,
        moved_state_gb=state_gb,
        move_ms=(weights_gb + state_gb) * GB / 1e6 * rate,
        ms_per_mb=rate,
        tables=tables,
    )
