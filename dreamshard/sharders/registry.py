"""Sharders by name: the heuristics built in, every other sharder registered (docs/architecture/rules.md, "Where each
rule lives").

TorchRec's planner and the learned sharders come through the `dreamshard.sharders` entry-point group
(pyproject.toml) or `register_sharder`, never imported by name: a sharder's module loads when it, or its family,
is asked for. Each sharder class says its `family` and the `options` it takes; `get_sharder(name, **options)`
rejects an option it does not take, and `options_for(name, shared)` hands a sharder its share of a shared dict.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cache, partial
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from dreamshard.errors import ConfigError, UnknownSharderError
from dreamshard.sharders.base import FAMILIES, Sharder
from dreamshard.sharders.heuristics import GREEDY_COSTS, GreedySharder, RandomSharder, RoundRobinSharder

ENTRY_POINT_GROUP = "dreamshard.sharders"

SharderFactory = Callable[..., Sharder]


@dataclass(frozen=True)
class Registration:
    """How the registry builds one sharder: `factory(**options)`, with `options` the names it accepts."""

    factory: SharderFactory
    family: str
    options: frozenset[str]

    @classmethod
    def of(
        cls, factory: SharderFactory, family: str | None = None, options: Iterable[str] | None = None
    ) -> Registration:
        """A Sharder subclass brings its own `family` and `options`; a plain callable defaults to other / none."""
        fam = family if family is not None else getattr(factory, "family", "other")
        if fam not in FAMILIES:
            raise ConfigError(f"sharder family '{fam}' is not one of {', '.join(FAMILIES)}")
        return cls(factory, fam, frozenset(options if options is not None else getattr(factory, "options", ())))


#: Sharders this package names as entry points of its own (loaded on demand like any entry point, so torchrec
#: stays optional): TorchRec's restricted planner, beside ``torchrec`` (pyproject.toml).
_BUILTIN_ENTRY_POINTS: tuple[EntryPoint, ...] = (
    EntryPoint(
        name="torchrec_tw_cw", value="dreamshard.sharders.torchrec_sharder:TorchRecTwCwSharder", group=ENTRY_POINT_GROUP
    ),
)

#: Registered variants that are not contenders of their own (`contender_names` leaves them out): the restricted
#: TorchRec planner is available by name, ``torchrec`` (unrestricted) is the TorchRec baseline.
VARIANTS: frozenset[str] = frozenset({"torchrec_tw_cw"})

_BUILTIN: dict[str, Registration] = {
    "random": Registration.of(RandomSharder),
    "round_robin": Registration.of(RoundRobinSharder),
    **{
        name: Registration.of(partial(GreedySharder, name, cost), "heuristic", ())
        for name, cost in GREEDY_COSTS.items()
    },
}
_REGISTERED: dict[str, Registration] = {}

#: The built-in heuristics, the baselines users run today.
HEURISTICS: tuple[str, ...] = tuple(n for n, r in _BUILTIN.items() if r.family == "heuristic")
#: The baselines a plan is judged against: the heuristics and TorchRec's planner (the gate's `publish.baselines`
#: choose among them; a comparison's best baseline is the fastest of them).
BASELINE_SHARDERS: tuple[str, ...] = (*HEURISTICS, "torchrec")


def register_sharder(
    name: str, factory: SharderFactory, *, family: str | None = None, options: Iterable[str] | None = None
) -> None:
    """Make `factory(**options)` available as sharder `name` (overrides an entry point of that name).

    A Sharder subclass brings its `family` and `options`; for another callable say them here (default: family
    "other", no options)."""
    _REGISTERED[name] = Registration.of(factory, family, options)


@cache
def _entry_points() -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in (*entry_points(group=ENTRY_POINT_GROUP), *_BUILTIN_ENTRY_POINTS)}


@cache
def _entry_point_registration(name: str) -> Registration:
    return Registration.of(_entry_points()[name].load())


def sharder_names(kind: str | None = None) -> list[str]:
    """Every sharder's name, or those of one family (`kind`: heuristic, torchrec, learned, other).

    Without `kind` nothing is loaded; with it, the entry-point sharders' classes are (to read their family)."""
    names = list(dict.fromkeys([*_BUILTIN, *_REGISTERED, *_entry_points()]))
    if kind is None:
        return names
    if kind not in FAMILIES:
        raise ConfigError(f"unknown sharder family '{kind}'; choose from {', '.join(FAMILIES)}")
    return [n for n in names if _registration(n).family == kind]


def learned_names() -> tuple[str, ...]:
    """The learned sharders registered (dreamshard ships `dreamshard`, `dreamshard_lpt`, `dreamshard_rl`)."""
    return tuple(sharder_names(kind="learned"))


def contender_names() -> tuple[str, ...]:
    """Every contender: the heuristics, TorchRec's planner and the learned sharders, in that order (`VARIANTS`
    left out)."""
    return tuple(
        n for family in ("heuristic", "torchrec", "learned") for n in sharder_names(kind=family) if n not in VARIANTS
    )


def _registration(name: str) -> Registration:
    reg = _BUILTIN.get(name) or _REGISTERED.get(name)
    if reg is not None:
        return reg
    if name not in _entry_points():
        raise UnknownSharderError(f"unknown sharder '{name}'; choose from {', '.join(sharder_names())}")
    return _entry_point_registration(name)


def sharder_family(name: str) -> str:
    """The family of sharder `name` (heuristic, torchrec, learned, other)."""
    return _registration(name).family


def accepted_options(name: str) -> frozenset[str]:
    """The options sharder `name` takes (`get_sharder` rejects any other)."""
    return _registration(name).options


def options_for(name: str, shared: Mapping[str, Any]) -> dict[str, Any]:
    """The part of an options dict shared by many sharders that sharder `name` takes; the rest is dropped.

    Only for callers that hold one dict for several sharders (see the module docstring); an option meant for
    one sharder goes to `get_sharder` directly, where a typo is an error."""
    takes = accepted_options(name)
    return {k: v for k, v in shared.items() if k in takes}


def learned_options(**options: Any) -> dict[str, dict[str, Any]]:
    """The same options for every learned sharder, in compare_sharders' per-sharder form: each gets those it
    takes (`verify` only `dreamshard`); an option no learned sharder takes is a ConfigError."""
    names = learned_names()
    taken = frozenset().union(*(accepted_options(n) for n in names))
    unknown = sorted(set(options) - taken)
    if unknown:
        raise ConfigError(
            f"no learned sharder ({', '.join(names)}) has option '{unknown[0]}'; "
            f"their options: {', '.join(sorted(taken))}"
        )
    return {name: options_for(name, options) for name in names}


def get_sharder(name: str, **options: Any) -> Sharder:
    """Build a sharder by name; an option it does not take is a ConfigError naming the sharder and the option."""
    reg = _registration(name)
    unknown = sorted(set(options) - reg.options)
    if unknown:
        takes = ", ".join(sorted(reg.options)) or "none"
        raise ConfigError(f"sharder '{name}' has no option '{unknown[0]}' (its options: {takes})")
    return reg.factory(**options)
