"""Read-only lookup of a current plan by what it was made for: the inventory's schema fingerprint.

A training job knows its model, not the name the platform team gave its inventory. `current_plan_for_schema`
walks the store's inventories (`list_inventories`) and reads each one's current plan (`get_current`,
checksum-verified); the plan whose `schema_fingerprint` (the tables' names, rows, dims, dtypes and features,
`Inventory.schema_fingerprint`) is the model's is the one to use. Nothing is written. Inventories whose pointer
is unreadable are skipped and reported; several matches are reported too (the most recently published plan wins:
the store's own pointer time, never a date a plan file states). A plan's schema is recomputed from the inventory
version it was published for when the store holds it (`inventories.schema_of`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from dreamshard.errors import DreamshardError, first_line
from dreamshard.store.base import PlanStore
from dreamshard.store.inventories import schema_of
from dreamshard.store.objects import list_inventories
from dreamshard.store.plans import get_current
from dreamshard.store.pointer import get_pointer
from dreamshard.values import Plan


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
    current: list[tuple[datetime, str | None, Plan]] = []
    skipped: list[str] = []
    for inventory in list_inventories(store):
        try:
            pointer = get_pointer(store, inventory)
            if pointer is None:
                continue  # plans stored, none current
            plan = get_current(store, inventory)
        except DreamshardError as e:
            skipped.append(f"{inventory}: {first_line(e)}")
            continue
        current.append((pointer.published_at, schema_of(store, plan), plan))
    found = next(([c for c in current if c[1] == fp] for fp in wanted if any(c[1] == fp for c in current)), [])
    found.sort(key=lambda c: (c[0], c[2].inventory_name))
    return SchemaMatch(
        plan=found[-1][2] if found else None, matches=tuple(c[2].inventory_name for c in found), skipped=tuple(skipped)
    )
