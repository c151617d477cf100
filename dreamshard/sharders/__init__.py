"""Sharders: heuristics, TorchRec's planner and the learned DreamShard policy, behind one registry."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dreamshard.errors import UnknownSharderError
from dreamshard.sharders.base import Sharder, make_plan
from dreamshard.sharders.heuristics import GREEDY_COSTS, GreedySharder, RandomSharder, RoundRobinSharder

HEURISTICS: tuple[str, ...] = ("random", "round_robin", *GREEDY_COSTS)
#: Sharders backed by a trained DreamShard model (they take model_dir / samples / seed options).
LEARNED: tuple[str, ...] = ("dreamshard", "dreamshard_lpt")
#: Every contender: the heuristics, TorchRec's planner and the learned sharders.
ALL_SHARDERS: tuple[str, ...] = (*HEURISTICS, "torchrec", *LEARNED)


def learned_options(**options: Any) -> dict[str, dict[str, Any]]:
    """The same options for every learned sharder, in compare_sharders' per-sharder form."""
    return {name: dict(options) for name in LEARNED}


def _torchrec(**kw: Any) -> Sharder:
    from dreamshard.sharders.torchrec_sharder import TorchRecSharder

    return TorchRecSharder(**kw)


def _dreamshard(**kw: Any) -> Sharder:
    from dreamshard.learning.sharder import DreamShardSharder

    return DreamShardSharder(**kw)


def _learned_greedy(**kw: Any) -> Sharder:
    from dreamshard.learning.sharder import LearnedGreedySharder

    return LearnedGreedySharder(**kw)


_FACTORIES: dict[str, Callable[..., Sharder]] = {
    "random": lambda seed=0, **_: RandomSharder(seed=seed),
    "round_robin": lambda **_: RoundRobinSharder(),
    **{name: (lambda n=name, **_: GreedySharder(n, GREEDY_COSTS[n])) for name in GREEDY_COSTS},
    "torchrec": _torchrec,
    "dreamshard": _dreamshard,
    "dreamshard_lpt": lambda **kw: _learned_greedy(**kw),
}


def sharder_names() -> list[str]:
    return list(_FACTORIES)


def get_sharder(name: str, **options: Any) -> Sharder:
    """Build a sharder by name. Options a sharder does not use are ignored (seed, model_dir, ...)."""
    try:
        factory = _FACTORIES[name]
    except KeyError:
        raise UnknownSharderError(f"unknown sharder '{name}'; choose from {', '.join(_FACTORIES)}") from None
    return factory(**options)


__all__ = ["ALL_SHARDERS", "HEURISTICS", "LEARNED", "learned_options", "Sharder", "get_sharder", "make_plan", "sharder_names"]
