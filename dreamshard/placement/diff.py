"""What changes between two plans of one model: which tables move, and how many bytes of them (docs/architecture.md,
"The production loop").

Publishing a new plan reshards the training job's embedding state: every table whose placement changed (another
device, another sharding type, other shards) is sent to its new ranks. A table's placement is its sharding type and
the devices of each of its units; a table in only one of the two plans is added or removed, not moved.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict

from dreamshard.values import GB, Inventory, Plan
from dreamshard.values.units import parse_unit


class PlanDiff(BaseModel):
    model_config = ConfigDict(frozen=True)
    old_plan_id: str
    new_plan_id: str
    moved: tuple[str, ...]  # tables in both plans placed differently (devices, type or shards)
    added: tuple[str, ...]  # tables only the new plan places
    removed: tuple[str, ...]  # tables only the old plan placed
    kept: int  # tables placed exactly as before
    moved_gb: float  # weights of the moved tables (the new inventory's sizes): what resharding sends

    @property
    def summary(self) -> str:
        total = len(self.moved) + self.kept
        extra = "".join(f", {len(x)} {what}" for x, what in ((self.added, "added"), (self.removed, "removed")) if x)
        return f"{len(self.moved)} of {total} tables move ({self.moved_gb:.3f} GB) from plan {self.old_plan_id}{extra}"


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
    return PlanDiff(
        old_plan_id=old.plan_id,
        new_plan_id=new.plan_id,
        moved=moved,
        added=tuple(t for t in after if t not in before),
        removed=tuple(t for t in before if t not in after),
        kept=len(both) - len(moved),
        moved_gb=sum(sizes.get(t, 0.0) for t in moved),
    )
