"""Read-only lookups of approved plans by what they were made for: a model's table schema and a job's world size
(docs/architecture/stores.md, "Stores").

A training job knows its model and its world size, not the name the platform team gave its inventory nor which
version of it is current. The store keeps one current plan per inventory, and every plan that was current before
in the pointer's history; so the latest approved plan for a (schema, world size) is found in three tiers:

1. the current plan of every inventory (its pointer);
2. the plans each pointer's history says were current before (not the versions a rollback undid);
3. any other approved plan (the history is bounded), by its record.

The first tier that holds a plan of the schema for the world size answers; inside a tier the store's own latest
write wins (the pointer's `published_at`, the record's `stored_at`; never a date a plan file states). Every plan is
read checksum-verified against what the pointer (or its record) recorded, and its schema is recomputed from the
stored inventory version (`inventories.schema_of`): a plan file's own `schema_fingerprint` decides nothing when the
store holds its inventory. When no plan is for the world size, the nearest one refused is named. Nothing is
written; unreadable pointers and plans are skipped and reported (one line each).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from dreamshard.errors import DreamshardError, first_line
from dreamshard.store.base import PlanStore
from dreamshard.store.inventories import VersionSchemas
from dreamshard.store.keys import PlanKey
from dreamshard.store.objects import list_inventories, load_verified, plan_keys, read_record
from dreamshard.store.pointer import entry_key, get_pointer
from dreamshard.values import Plan
from dreamshard.values.records import CurrentPointer, PointerEntry

Tier = Literal["current", "history", "approved"]
TIERS: tuple[Tier, ...] = ("current", "history", "approved")


@dataclass(frozen=True)
class Stored:
    """One approved plan as a lookup sees it: the plan, its schema (recomputed), when the store wrote it (its
    pointer entry's `published_at`, else its record's `stored_at`) and the tier it was found in."""

    plan: Plan
    schema: str | None
    at: datetime
    tier: Tier

    @property
    def world_size(self) -> int:
        return self.plan.topology.num_devices


@dataclass(frozen=True)
class SchemaMatch:
    """What a lookup found: the plan (None when none matched), the inventories whose plans matched in the tier that
    answered (the winner last), the nearest plan of the schema refused for its world size, and what could not be
    read (one line each)."""

    plan: Plan | None
    matches: tuple[str, ...] = ()
    skipped: tuple[str, ...] = field(default=())
    tier: Tier | None = None
    refused: Plan | None = None


class _Scan:
    """The store read tier by tier: the pointers (read once), the schemas of stored inventory versions (each
    recomputed once), what was skipped."""

    def __init__(self, store: PlanStore, inventory: str | None) -> None:
        self.store = store
        self.skipped: list[str] = []
        self.schemas = VersionSchemas(store)
        self.pointers: dict[str, CurrentPointer | None] = {}
        for name in [inventory] if inventory is not None else list_inventories(store):
            try:
                self.pointers[name] = get_pointer(store, name)
            except DreamshardError as e:
                self.skipped.append(f"{name}: {first_line(e)}")

    def read(self, pk: PlanKey, sha256: str, at: datetime, tier: Tier, wanted: Sequence[str] | None) -> Stored | None:
        """The plan under `pk`, verified against `sha256`, when its schema is one of `wanted` (None: any)."""
        known = self.schemas.version(pk.inventory, pk.fingerprint)
        if wanted is not None and known is not None and known not in wanted:
            return None  # the stored inventory version says: another schema (the plan is not even read)
        try:
            plan = load_verified(self.store, pk, sha256)
        except DreamshardError as e:
            self.skipped.append(f"{pk.key}: {first_line(e)}")
            return None
        schema = known if known is not None else plan.schema_fingerprint
        return None if wanted is not None and schema not in wanted else Stored(plan, schema, at, tier)

    def _entry(self, e: PointerEntry, tier: Tier, wanted: Sequence[str] | None) -> Stored | None:
        try:
            pk = entry_key(e)
        except DreamshardError as err:
            self.skipped.append(first_line(err))
            return None
        return self.read(pk, e.sha256, e.published_at, tier, wanted)

    def tier(self, tier: Tier, wanted: Sequence[str] | None) -> list[Stored]:
        """Every plan of `tier` whose schema is wanted."""
        found: list[Stored | None] = []
        for name, pointer in self.pointers.items():
            if tier == "current" and pointer is not None:
                found.append(self._entry(pointer.entry(), tier, wanted))
            elif tier == "history" and pointer is not None:
                found.extend(self._entry(e, tier, wanted) for e in pointer.history if e.plan_id != pointer.plan_id)
            elif tier == "approved":
                found.extend(self._unpointed(name, pointer, wanted))
        return [f for f in found if f is not None]

    def _unpointed(self, name: str, pointer: CurrentPointer | None, wanted: Sequence[str] | None) -> list[Stored]:
        """The approved plans of `name` its pointer does not name (past its history's bound), by their records; the
        versions a rollback undid stay undone."""
        named = {e.plan_id for e in pointer.entries()} if pointer is not None else set()
        out: list[Stored] = []
        for pk in plan_keys(self.store, name):
            if pk.status != "approved" or pk.plan_id in named:
                continue
            known = self.schemas.version(pk.inventory, pk.fingerprint)
            if wanted is not None and known is not None and known not in wanted:
                continue
            record = read_record(self.store, pk)
            if record is None:
                self.skipped.append(f"{pk.key}: no readable record (see `dreamshard plans fsck`)")
                continue
            found = self.read(pk, record.sha256, record.stored_at, "approved", wanted)
            if found is not None:
                out.append(found)
        return out


def _best(found: list[Stored], wanted: Sequence[str] | None, world_size: int | None) -> list[Stored]:
    """The plans of the first wanted schema that any plan of `found` has (for `world_size`, when given), oldest
    write first: the last one is the answer."""
    fitting = [f for f in found if world_size is None or f.world_size == world_size]
    for schema in wanted if wanted is not None else [None]:
        hits = [f for f in fitting if schema is None or f.schema == schema]
        if hits:
            return sorted(hits, key=lambda f: (f.at, f.plan.inventory_name))
    return []


def approved_plan_for(
    store: PlanStore,
    schema_fingerprint: str | Sequence[str] | None,
    world_size: int | None,
    *,
    inventory: str | None = None,
    tiers: Sequence[Tier] = TIERS,
) -> SchemaMatch:
    """The latest approved plan whose schema is `schema_fingerprint` (or, given several, the first of them found;
    None: any schema) for `world_size` ranks (None: any), over every inventory of `store` or only `inventory`,
    the tiers in order (module docstring). None found: `refused` is the plan that would have answered but for its
    world size."""
    if schema_fingerprint is None:
        wanted: list[str] | None = None
    else:
        wanted = [schema_fingerprint] if isinstance(schema_fingerprint, str) else list(schema_fingerprint)
    scan = _Scan(store, inventory)
    refused: Plan | None = None
    for tier in tiers:
        found = scan.tier(tier, wanted)
        hits = _best(found, wanted, world_size)
        if hits:
            matches = tuple(h.plan.inventory_name for h in hits)
            return SchemaMatch(hits[-1].plan, matches, tuple(scan.skipped), tier, refused)
        nearest = _best(found, wanted, None)
        refused = refused or (nearest[-1].plan if nearest else None)
    return SchemaMatch(None, (), tuple(scan.skipped), None, refused)


def current_plan_for_schema(store: PlanStore, schema_fingerprint: str | Sequence[str]) -> SchemaMatch:
    """The current plan, over every inventory of `store`, whose schema is the given one (or, given several, the
    first of them that any current plan has), whatever its world size; the most recently published wins."""
    return approved_plan_for(store, schema_fingerprint, None, tiers=("current",))
