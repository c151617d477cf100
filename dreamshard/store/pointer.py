"""The `current.json` pointer of an inventory's plans: reading it, and its two rules.

* advance (`advanced`): `target` becomes current (a publish, or `rollback --to`); the old current version goes on
  top of the history; the target leaves the history and the rolled-back list wherever it was, so neither
  ever lists a version twice.
* step back (`stepped_back`): a plain rollback; the first history entry becomes current and the version it
  replaces goes on top of `rolled_back` (it was current once: fsck does not call it an interrupted publish).

Every write is a compare-and-swap (`update_pointer` over dreamshard.store.base.cas_update), so concurrent
publishers and rollbacks never lose or corrupt an update.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from pydantic import ValidationError

from dreamshard.documents import describe_validation_error
from dreamshard.errors import StoreError, StorePathError
from dreamshard.store.base import PlanStore, cas_update
from dreamshard.store.keys import PlanKey, current_key, parse_key
from dreamshard.values.records import CurrentPointer, PointerEntry
from dreamshard.values.review import Review

#: How many earlier (and rolled-back) versions the pointer remembers.
HISTORY_LIMIT = 100

Action = Literal["publish", "rollback"]


def _pointer(
    inventory: str,
    target: PointerEntry,
    action: Action,
    history: tuple[PointerEntry, ...],
    rolled_back: tuple[PointerEntry, ...],
    review: Review | None = None,
) -> CurrentPointer:
    return CurrentPointer(
        inventory=inventory,
        **target.model_dump(),
        action=action,
        review=review,
        previous=history[0] if history else None,
        history=history[:HISTORY_LIMIT],
        rolled_back=rolled_back[:HISTORY_LIMIT],
    )


def advanced(
    inventory: str, target: PointerEntry, old: CurrentPointer | None, action: Action, review: Review | None = None
) -> CurrentPointer:
    """The advance rule: the pointer once `target` is current (publish, `rollback --to`)."""
    earlier = ((old.entry(),) + old.history) if old else ()
    history = tuple(e for e in earlier if e.plan_id != target.plan_id)
    undone = tuple(e for e in (old.rolled_back if old else ()) if e.plan_id != target.plan_id)
    return _pointer(inventory, target, action, history, undone, review)


def stepped_back(inventory: str, old: CurrentPointer, review: Review | None = None) -> CurrentPointer:
    """The rollback rule: the pointer once the version before `old`'s current one is current again."""
    if not old.history:
        raise StoreError(
            f"current plan '{old.plan_id}' of inventory '{inventory}' has no previous version to roll back to"
        )
    target, rest = old.history[0], old.history[1:]
    undone = (old.entry(),) + tuple(e for e in old.rolled_back if e.plan_id != target.plan_id)
    return _pointer(inventory, target, "rollback", rest, undone, review)


def _entry_problem(inventory: str, e: PointerEntry) -> str:
    parsed = parse_key(e.key)
    if parsed is None or parsed.kind != "plan" or parsed.status != "approved" or parsed.inventory != inventory:
        return f"entry {e.plan_id!r} names {e.key!r}, which is not an approved plan of inventory '{inventory}'"
    if (parsed.plan_id, parsed.fingerprint) != (e.plan_id, e.fingerprint):
        return f"entry {e.plan_id!r} names {e.key!r}, which is another plan's key"
    return ""


def entry_key(e: PointerEntry) -> PlanKey:
    """The approved plan a pointer entry names (`parse_pointer` already refused a pointer whose entries name
    anything else)."""
    parsed = parse_key(e.key)
    if parsed is None or parsed.kind != "plan" or parsed.status != "approved":
        raise StoreError(f"pointer entry {e.plan_id!r} names {e.key!r}, which is not an approved plan")
    return parsed


def parse_pointer(store: PlanStore, inventory: str, data: bytes) -> CurrentPointer:
    """The pointer in `data`; StoreError (naming the repair) when it is not a valid pointer of `inventory`."""
    repair = (
        f"repair it with `dreamshard plans rollback --inventory {inventory} --to PLAN_ID` "
        f"(ids: `dreamshard plans list --inventory {inventory}`)"
    )
    try:
        pointer = CurrentPointer.model_validate_json(data)
    except ValidationError as e:
        raise StoreError(
            f"{current_key(inventory)} in {store.location} is not a valid pointer "
            f"({describe_validation_error(e)}); {repair}"
        ) from None
    if pointer.inventory != inventory:
        raise StoreError(
            f"{current_key(inventory)} in {store.location} points into inventory '{pointer.inventory}'; repair it "
            f"with `dreamshard plans rollback --inventory {inventory} --to PLAN_ID`"
        )
    for entry in pointer.entries():
        problem = _entry_problem(inventory, entry)
        if problem:
            raise StoreError(
                f"{current_key(inventory)} in {store.location} is not a valid pointer ({problem}); {repair}"
            )
    return pointer


def get_pointer(store: PlanStore, inventory: str) -> CurrentPointer | None:
    """The current pointer of `inventory`, or None if nothing was published yet."""
    got = store.get_versioned(current_key(inventory))
    return None if got is None else parse_pointer(store, inventory, got[0])


def pointer_or_problem(store: PlanStore, inventory: str) -> tuple[CurrentPointer | None, str]:
    """The pointer (None if there is none) and "", or None and why it cannot be read. A pointer the store cannot
    hold (a folder, a link out of a local store: StorePathError) is no corrupt pointer to repair: that raises."""
    try:
        return get_pointer(store, inventory), ""
    except StorePathError:
        raise
    except StoreError as e:
        return None, str(e)


def update_pointer(
    store: PlanStore,
    inventory: str,
    make: Callable[[CurrentPointer | None], CurrentPointer | None],
    *,
    repair: bool = False,
) -> CurrentPointer:
    """Compare-and-swap loop on the pointer of `inventory`: `make` maps the pointer read to the new one
    (None: keep it as it is). With `repair`, a corrupt pointer is read as None (and so replaced)."""
    written: list[CurrentPointer] = []

    def step(raw: bytes | None) -> bytes | None:
        old = None
        if raw is not None:
            try:
                old = parse_pointer(store, inventory, raw)
            except StoreError:
                if not repair:
                    raise
        new = make(old)
        if new is None:
            assert old is not None
            written[:] = [old]
            return None
        written[:] = [new]
        return (new.model_dump_json(indent=2) + "\n").encode()

    cas_update(store, current_key(inventory), step)
    return written[0]
