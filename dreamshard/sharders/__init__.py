"""Sharders behind one registry (dreamshard.sharders.registry): `get_sharder(name, **options).shard(...)`.

`HEURISTICS` (the built-in heuristics) is a constant; `LEARNED` (the learned sharders) and `ALL_SHARDERS` (every
contender: heuristics, TorchRec's planner, the learned sharders) are read from the registered sharders' families
when first asked for (`learned_names()`, `contender_names()`): the learned sharders register through entry
points and their module imports this package, so they are not loaded while it is imported.
"""

from dreamshard.sharders.base import FAMILIES, Sharder, TableWiseSharder, make_plan
from dreamshard.sharders.registry import (
    BASELINE_SHARDERS,
    ENTRY_POINT_GROUP,
    HEURISTICS,
    Registration,
    SharderFactory,
    accepted_options,
    contender_names,
    get_sharder,
    learned_names,
    learned_options,
    options_for,
    register_sharder,
    sharder_family,
    sharder_names,
)

_COMPUTED = {"LEARNED": learned_names, "ALL_SHARDERS": contender_names}


def __getattr__(name: str) -> tuple[str, ...]:
    if name in _COMPUTED:
        return _COMPUTED[name]()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ALL_SHARDERS",
    "BASELINE_SHARDERS",
    "ENTRY_POINT_GROUP",
    "FAMILIES",
    "HEURISTICS",
    "LEARNED",
    "Registration",
    "Sharder",
    "SharderFactory",
    "TableWiseSharder",
    "accepted_options",
    "contender_names",
    "get_sharder",
    "learned_names",
    "learned_options",
    "make_plan",
    "options_for",
    "register_sharder",
    "sharder_family",
    "sharder_names",
]
