"""Section `world`: the interconnect the job runs on (docs/user-guide/params.md, "world"; the values:
dreamshard.values.world). A name alone is a profile (`fast`, `nvlink-ib`) or a measured world (`host`, `measured`);
any other name declares the job's own world with its figures. No name: none declared (the host's fits, and a note
on every cuda job planned so)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import ConfigDict, Field, model_validator

from dreamshard.errors import ConfigError
from dreamshard.values import World, named_world
from dreamshard.values.base import Number, StrictNumbers, located
from dreamshard.values.world import (
    HOST,
    MEASURED_WORLDS,
    PROFILES,
    WORLD_NAME_PATTERN,
    WORLD_NAMES,
    Gbps,
    WorldName,
)

#: The figures a world of your own declares (a profile or a measured world takes none of them).
FIGURES: tuple[str, ...] = ("alpha_ms", "intra_host_gbps")


class WorldConfig(StrictNumbers):
    """Section `world`: a world's name and, for a world of your own, its figures and their source."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    name: WorldName | None = None
    alpha_ms: Annotated[float, Number, Field(ge=0, le=1000)] | None = None  # ms per collective
    intra_host_gbps: Gbps | None = None  # GB/s leaving one device inside a host
    inter_host_gbps: Gbps | None = None  # GB/s across hosts (None: topology.inter_host_gbps)
    devices_per_host: Annotated[int, Number, Field(ge=1, le=4096)] | None = None  # None: topology.devices_per_host
    source: Annotated[str, Field(max_length=400)] | None = None  # where the figures come from

    @model_validator(mode="before")
    @classmethod
    def _figures(cls, data: Any) -> Any:
        """Figures with no name, or with a profile's or a measured world's name: an error at the figure."""
        if not isinstance(data, dict):
            return data
        name = data.get("name")
        if name is not None and not (isinstance(name, str) and re.fullmatch(WORLD_NAME_PATTERN, name)):
            return data  # the name's own check says what is wrong with it
        given = [f for f in (*FIGURES, "inter_host_gbps", "source") if data.get(f) is not None]
        if name is None and given:
            raise located("WorldConfig", given[0], data[given[0]], "a world's figures need its name (world.name)")
        taken = [f for f in (*FIGURES, "source") if data.get(f) is not None]
        if isinstance(name, str) and taken and (name in PROFILES or name in MEASURED_WORLDS):
            what = "a named profile" if name in PROFILES else "measured"
            raise located(
                "WorldConfig",
                taken[0],
                data[taken[0]],
                f"world '{name}' is {what}: it takes no {taken[0]}; give your own world another name",
            )
        missing = [f for f in FIGURES if data.get(f) is None]
        if isinstance(name, str) and missing and name not in PROFILES and name not in MEASURED_WORLDS:
            raise located(
                "WorldConfig",
                missing[0],
                None,
                f"world '{name}' needs {' and '.join(missing)} (or name a profile: {', '.join(PROFILES)}, or a "
                f"measured world: {', '.join(MEASURED_WORLDS)})",
            )
        return data

    def world(self) -> World | None:
        """The world declared (None: none). ValueError naming what is missing."""
        if self.name is None:
            return None
        if self.name in PROFILES or self.name in MEASURED_WORLDS:
            return named_world(self.name, self.devices_per_host, self.inter_host_gbps)
        return World(
            name=self.name,
            alpha_ms=self.alpha_ms,
            intra_host_gbps=self.intra_host_gbps,
            inter_host_gbps=self.inter_host_gbps,
            devices_per_host=self.devices_per_host,
            source=self.source or "declared in params world",
        )


#: The former `--interconnect` values, as the worlds they name.
INTERCONNECT_ALIASES: dict[str, str] = {"fast": "fast", "measured": HOST}
#: The help of `--world NAME` and its alias `--interconnect`, the same on every command that takes them.
WORLD_HELP = (
    "The job's world, its interconnect: fast (20 us + 10 GB/s), nvlink-ib (TorchRec's defaults), host (this host's "
    "fits) or measured (the job's pool); replaces the params' (world.name; default: the job's recorded world, else "
    "params world, else none declared)."
)
INTERCONNECT_HELP = "Alias of --world: fast (--world fast) or measured (--world host)."


def shown(name: str, keep: int = 40) -> str:
    """A name as an error line shows it: quoted with its control characters escaped, at most `keep` characters of it
    (a name is data: a 5,000-character one stays a short line)."""
    more = f"... ({len(name)} characters)" if len(name) > keep else ""
    return repr(name[:keep]) + more


def world_name(world: str | None, interconnect: str | None = None) -> str | None:
    """The world `--world NAME` names, with `--interconnect` (fast, measured) as its alias. ConfigError naming the
    option when they disagree, and naming the known worlds for a name that is none of them (a world of your own is
    declared in params `world`, with its figures)."""
    if interconnect is not None:
        alias = INTERCONNECT_ALIASES.get(interconnect)
        if alias is None:
            raise ConfigError(
                f"--interconnect {shown(interconnect)}: fast or measured (it is an alias of --world NAME)"
            )
        if world is not None and world != alias:
            named = world if world in WORLD_NAMES else shown(world)
            raise ConfigError(f"--interconnect {interconnect} is --world {alias}, not --world {named}: give one")
        world = alias
    if world is not None and world not in WORLD_NAMES:
        raise ConfigError(
            f"unknown world {shown(world)} (world.name): choose {', '.join(WORLD_NAMES)}; a world of your own is "
            f"declared in params world, with its figures"
        )
    return world


def world_overrides(world: str | None, interconnect: str | None = None) -> dict[str, object]:
    """The params key `--world NAME` sets (`world_name`; a world named so replaces the params' world:
    `settings.apply_overrides`)."""
    return {"world.name": world_name(world, interconnect)}


def replaced_world(section: Mapping[str, Any] | None, name: str | None) -> str | None:
    """One line when a world named by the caller (`name`, `--world NAME`) replaces a params `world` section that
    says more than a name (its figures are dropped with it), else None."""
    section = section or {}
    dropped = [str(k) for k, v in section.items() if k != "name" and v is not None]
    if name is None or not dropped:
        return None
    was = f" '{section['name']}'" if section.get("name") else ""
    return f"world {name} replaces the params' world{was} whole: its {', '.join(dropped)} dropped"
