"""The job's world: the interconnect its collectives run on (docs/architecture/data-model.md, "The job's world").

A world is declared (params `world`, the job an inventory records, `--world NAME`): a named profile with its source
(`fast`, `nvlink-ib`), a world of your own (alpha per collective, intra- and inter-host GB/s), or a measured one:
`host` (the collective fits measured on this host, gloo) or `measured` (measured on the job's pool: NCCL on a gpu
worker with at least 2 GPUs, gloo otherwise). `ChargedWorld` is what a plan was costed in, or what a comparison
charged, with the note that says when that is not the job's own world.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StringConstraints, model_validator

from dreamshard.values.base import Number, StrictModel

#: Worlds whose figures are measured, not declared: the host's own fits, and the fits of the job's pool.
HOST = "host"
MEASURED = "measured"
MEASURED_WORLDS: tuple[str, ...] = (HOST, MEASURED)
#: What a measured world measures with, by name.
MEASURED_SOURCES: dict[str, str] = {
    HOST: "the collectives measured on the host that plans (gloo)",
    MEASURED: "measured on the job's pool: NCCL on a gpu worker with >= 2 GPUs, gloo otherwise",
}

#: A world's name: lowercase letters, digits, `.`, `_`, `-`, at most 64 characters.
WORLD_NAME_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,63}$"
WorldName = Annotated[str, StringConstraints(pattern=WORLD_NAME_PATTERN)]
Gbps = Annotated[float, Number, Field(gt=0, le=1e6)]


def gib_per_s(gib: float) -> float:
    """GiB/s (TorchRec's unit: `x * 1024**3 / 1000` bytes per ms) in GB/s (1e9 bytes per second)."""
    return gib * 1024**3 / 1e9


class World(StrictModel):
    """The interconnect a job runs on: `alpha_ms` per collective, `intra_host_gbps` per device inside a host,
    `inter_host_gbps` across hosts (None: the topology's `inter_host_gbps` parameter), `devices_per_host` (None: the
    topology's), and where the figures come from. A measured world (`host`, `measured`) takes no alpha or intra-host
    bandwidth: a fit measures them."""

    name: WorldName
    alpha_ms: Annotated[float, Number, Field(ge=0, le=1000)] | None = None
    intra_host_gbps: Gbps | None = None
    inter_host_gbps: Gbps | None = None
    devices_per_host: Annotated[int, Number, Field(ge=1, le=4096)] | None = None
    source: Annotated[str, Field(max_length=400)] = ""

    @model_validator(mode="after")
    def _figures(self) -> World:
        declared = [f for f in ("alpha_ms", "intra_host_gbps") if getattr(self, f) is not None]
        if self.name in MEASURED_WORLDS and declared:
            raise ValueError(
                f"world '{self.name}' is measured ({MEASURED_SOURCES[self.name]}): it takes no {declared[0]}; "
                f"give your own world another name"
            )
        missing = [f for f in ("alpha_ms", "intra_host_gbps") if getattr(self, f) is None]
        if self.name not in MEASURED_WORLDS and missing:
            raise ValueError(
                f"world '{self.name}' needs {' and '.join(missing)} (or name a profile: {', '.join(PROFILE_NAMES)}, "
                f"or a measured world: {', '.join(MEASURED_WORLDS)})"
            )
        return self

    @property
    def measured(self) -> bool:
        """True when a fit gives the figures (`host`, `measured`), False when they are declared."""
        return self.name in MEASURED_WORLDS

    def describe(self) -> str:
        """One line: "nvlink-ib: 20 us + 644 GB/s intra-host, 13.4 GB/s inter-host (source)"."""
        if self.measured:
            head = f"{self.name}: {MEASURED_SOURCES[self.name]}"
        else:
            assert self.alpha_ms is not None and self.intra_host_gbps is not None
            head = f"{self.name}: {self.alpha_ms * 1000:g} us + {self.intra_host_gbps:.3g} GB/s intra-host"
        if self.inter_host_gbps is not None:
            head += f", {self.inter_host_gbps:.3g} GB/s inter-host"
        return head + (f" ({self.source})" if self.source else "")


#: The named profiles, each with its source.
FAST = World(
    name="fast",
    alpha_ms=0.02,
    intra_host_gbps=10.0,
    source="dreamshard's fast-interconnect profile: 20 us + 10 GB/s per device, NVLink-class latency",
)
NVLINK_IB = World(
    name="nvlink-ib",
    alpha_ms=0.02,
    intra_host_gbps=gib_per_s(600.0),
    inter_host_gbps=gib_per_s(12.5),
    source="TorchRec planner defaults: INTRA_NODE_BANDWIDTH 600 GiB/s, CROSS_NODE_BANDWIDTH 12.5 GiB/s "
    "(torchrec.distributed.planner.constants); alpha 20 us assumed (TorchRec charges no latency)",
)
PROFILES: dict[str, World] = {w.name: w for w in (FAST, NVLINK_IB)}
PROFILE_NAMES: tuple[str, ...] = tuple(PROFILES)
#: Every name `--world` takes without figures.
WORLD_NAMES: tuple[str, ...] = (*PROFILE_NAMES, *MEASURED_WORLDS)


def named_world(name: str, devices_per_host: int | None = None, inter_host_gbps: float | None = None) -> World:
    """The world a name alone declares: a profile, or a measured world; ValueError naming the choices otherwise.
    `devices_per_host` and `inter_host_gbps` (the job's layout, a network one machine cannot measure) are kept; a
    profile's own inter-host bandwidth is replaced only when one is given."""
    if name in PROFILES:
        base = PROFILES[name]
        update = {k: v for k, v in (("devices_per_host", devices_per_host), ("inter_host_gbps", inter_host_gbps)) if v}
        return base.model_copy(update=update) if update else base
    if name in MEASURED_WORLDS:
        return World(
            name=name,
            devices_per_host=devices_per_host,
            inter_host_gbps=inter_host_gbps,
            source=MEASURED_SOURCES[name],
        )
    raise ValueError(f"unknown world '{name}': choose {', '.join(WORLD_NAMES)}, or declare its alpha_ms and GB/s")


class ChargedWorld(StrictModel):
    """The world a plan was costed in, or a comparison charged: the all-to-all's alpha and bandwidths as charged
    (None: nothing was charged, a sharder that costs no exchange), the comm model's `backend` ("world:fast",
    "gloo", "nccl", "simulated", "default"), where the figures come from, and `note`: one line when this is not
    the job's own world (a cuda job planned on the host's gloo fit), else empty."""

    name: str
    declared: bool  # the job declared this world (False: none was, the host's fits stood in)
    alpha_ms: Annotated[float, Field(ge=0)] | None = None
    intra_host_gbps: Annotated[float, Field(gt=0)] | None = None
    inter_host_gbps: Annotated[float, Field(gt=0)] | None = None
    backend: str = ""
    source: str = ""
    note: str = ""

    def describe(self, with_source: bool = True) -> str:
        """One line: "world fast: 0.020 ms + 10 GB/s intra-host (source)"."""
        head = f"world {self.name}" + ("" if self.declared else " (none declared)")
        if self.alpha_ms is not None:
            rate = f"{self.intra_host_gbps:.3g} GB/s" if self.intra_host_gbps is not None else "no bytes charged"
            head += f": {self.alpha_ms:.3f} ms + {rate} intra-host"
        if self.inter_host_gbps is not None:
            head += f", {self.inter_host_gbps:.3g} GB/s inter-host"
        return head + (f" ({self.source})" if self.source and with_source else "")

    def same_figures(self, other: ChargedWorld) -> bool:
        """Whether `other` charges the same alpha and bandwidths (to 0.1%)."""

        def close(a: float | None, b: float | None) -> bool:
            return (a is None) == (b is None) and (a is None or b is None or abs(a - b) <= 1e-3 * max(abs(a), 1e-9))

        return all(
            close(getattr(self, f), getattr(other, f)) for f in ("alpha_ms", "intra_host_gbps", "inter_host_gbps")
        )
