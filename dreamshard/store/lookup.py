"""Read-only lookup of a current plan by what it was made for: the inventory's schema fingerprint.

A training job knows its model, not the name the platform team gave its inventory. `current_plan_for_schema`
walks the store's inventories (`list_inventories`) and reads each one's current plan (`get_current`,
checksum-verified); the plan whose `schema_fingerprint` (the tables' names, rows, dims, dtypes and features,
`Inventory.schema_fingerprint`) is the model's is the one to use. Nothing is written. Inventories whose pointer
is unreadable are skipped and reported; several matches are reported too (the most recently created plan wins).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from dreamshard.errors import DreamshardError, first_line
from dreamshard.store.base import PlanStore
from dreamshard.store.objects import list_inventories
from dreamshard.store.plans import get_current
from dreamshard.store.pointer import get_pointer
from dreamshard.types import Plan


@dataclass(frozen=True)
class SchemaMatch:
    """What the lookup found: the plan (None when no current plan has the schema), the inventories whose current
    plan matched, and the inventories that could not be read (one line each)."""

    plan: Plan | None
    matches: tuple[str, ...] = ()
    skipped: tuple[str, ...] = field(default=())


def current_plan_for_schema(store: PlanStore, schema_fingerprint: str | Sequence[str]) -> SchemaMatch:
    """The current plan, over every inventory of `store`, whose `schema_fingerprint` is the given one (or, given
    several, the first of them that any current plan has)."""
    wanted = [schema_fingerprint] if isinstance(schema_fingerprint, str) else list(schema_fingerprint)
    current: list[Plan] = []
    skipped: list[str] = []
    for inventory in list_inventories(store):
        try:
            if get_pointer(store, inventory) is None:
                continue  # plans stored, none current
            plan = get_current(store, inventory)
        except DreamshardError as e:
            skipped.append(f"{inventory}: {first_line(e)}")
            continue
        current.append(plan)
    found: list[Plan] = next(([p for p in current if p.schema_fingerprint == fp] for fp in wanted
                              if any(p.schema_fingerprint == fp for p in current)), [])
    found.sort(key=lambda p: p.created_at)
    return SchemaMatch(plan=found[-1] if found else None, matches=tuple(p.inventory_name for p in found),
                       skipped=tuple(skipped))
