"""Names users give inventories and tables: a safe character set, checked where an inventory enters.

Letters, digits, '_', '-' and '.', starting with a letter or digit, without '..', at most 200 characters: the
rule of a storage key segment too (`check_key_part`), so an inventory name is always a usable key and a table
name never holds the '@' or '/' of unit names (dreamshard.values.units) and keys. The check runs where an
inventory enters (load, validate, synth, trace, push), not in `Table`: internal units are Tables named
`table@start:end` (docs/architecture/stores.md, "Trust boundary").
"""

from __future__ import annotations

import re

from dreamshard.errors import InventoryError, StoreError
from dreamshard.values.tables import Inventory

MAX_NAME_LENGTH = 200
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
ALLOWED = "letters, digits, '_', '-' and '.' (starting with a letter or digit, no '..', at most 200 characters)"


class InventoryNameError(InventoryError):
    """An inventory or table name outside the safe character set."""


def name_problem(name: str) -> str | None:
    """Why `name` is not a safe inventory/table name, or None if it is."""
    if not name:
        return "is empty"
    if len(name) > MAX_NAME_LENGTH:
        return f"is {len(name)} characters long"
    if ".." in name or not _NAME.match(name):
        return "has characters outside the allowed set"
    return None


def check_key_part(value: str, what: str) -> str:
    """Validate one path segment of a storage key (inventory name, fingerprint, plan id): the safe-name rule,
    StoreError otherwise (dreamshard.store.base re-exports this)."""
    problem = name_problem(value) if isinstance(value, str) else "is not a string"
    if problem:
        shown = value if not isinstance(value, str) or len(value) <= 80 else f"{value[:60]}...({len(value)} characters)"
        raise StoreError(f"{what} {shown!r} cannot be used in a storage key: it {problem}; use {ALLOWED}")
    return value


def check_name(name: str, what: str) -> str:
    """Return `name`, or raise InventoryNameError naming it and the allowed set."""
    problem = name_problem(name)
    if problem:
        shown = name if len(name) <= 80 else f"{name[:60]}...({len(name)} characters)"
        raise InventoryNameError(f"{what} {shown!r} {problem}: use {ALLOWED}")
    return name


def check_inventory_names(inventory: Inventory, where: str = "") -> Inventory:
    """The inventory itself, once its name and every table name are in the safe set."""
    prefix = f"{where}: " if where else ""
    problem = name_problem(inventory.name)
    if problem:
        raise InventoryNameError(f"{prefix}inventory name {inventory.name!r} {problem}: use {ALLOWED}")
    for i, t in enumerate(inventory.tables):
        problem = name_problem(t.name)
        if problem:
            raise InventoryNameError(f"{prefix}tables[{i}] name {t.name!r} {problem}: use {ALLOWED}")
    return inventory
