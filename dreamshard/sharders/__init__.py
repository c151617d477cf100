"""Sharders behind one registry: the heuristics built in, everything else registered.

The registry knows the heuristics itself and finds the other sharders through the ``dreamshard.sharders``
entry-point group (pyproject.toml: TorchRec's planner and the learned sharders of dreamshard.learning), or
through `register_sharder` for code that builds its own. It never imports those modules itself: a sharder's
module is loaded only when that sharder is asked for, so this package has no dependency on the learning code.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Any

from dreamshard.errors import UnknownSharderError
from dreamshard.sharders.base import Sharder, make_plan
from dreamshard.sharders.heuristics import GREEDY_COSTS, GreedySharder, RandomSharder, RoundRobinSharder

ENTRY_POINT_GROUP = "dreamshard.sharders"

HEURISTICS: tuple[str, ...] = ("random", "round_robin", *GREEDY_COSTS)
#: The model-backed sharders dreamshard ships (registered by dreamshard.learning through entry points):
#: `dreamshard` (search on the learned cost), `dreamshard_lpt` (LPT on predicted costs), `dreamshard_rl`
#: (the RL policy alone).
LEARNED: tuple[str, ...] = ("dreamshard", "dreamshard_lpt", "dreamshard_rl")
#: Every contender: the heuristics, TorchRec's planner and the learned sharders.
ALL_SHARDERS: tuple[str, ...] = (*HEURISTICS, "torchrec", *LEARNED)

SharderFactory = Callable[..., Sharder]

_BUILTIN: dict[str, SharderFactory] = {
    "random": lambda seed=0, **_: RandomSharder(seed=seed),
    "round_robin": lambda **_: RoundRobinSharder(),
    **{name: (lambda n=name, **_: GreedySharder(n, GREEDY_COSTS[n])) for name in GREEDY_COSTS},
}
_REGISTERED: dict[str, SharderFactory] = {}


def register_sharder(name: str, factory: SharderFactory) -> None:
    """Make `factory(**options)` available as sharder `name` (overrides an entry point of that name)."""
    _REGISTERED[name] = factory


@lru_cache(maxsize=1)
def _entry_points() -> dict[str, Any]:
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def learned_options(**options: Any) -> dict[str, dict[str, Any]]:
    """The same options for every learned sharder, in compare_sharders' per-sharder form."""
    return {name: dict(options) for name in LEARNED}


def sharder_names() -> list[str]:
    names = [*_BUILTIN, *_REGISTERED, *_entry_points()]
    return list(dict.fromkeys(names))


def get_sharder(name: str, **options: Any) -> Sharder:
    """Build a sharder by name. Options a sharder does not use are ignored (seed, model_dir, ...)."""
    factory = _BUILTIN.get(name) or _REGISTERED.get(name)
    if factory is None:
        ep = _entry_points().get(name)
        if ep is None:
            raise UnknownSharderError(f"unknown sharder '{name}'; choose from {', '.join(sharder_names())}")
        factory = ep.load()
    return factory(**options)


__all__ = [
    "ALL_SHARDERS", "ENTRY_POINT_GROUP", "HEURISTICS", "LEARNED", "Sharder", "get_sharder", "learned_options",
    "make_plan", "register_sharder", "sharder_names",
]
