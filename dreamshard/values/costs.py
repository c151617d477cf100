"""Costs and what measured them (docs/architecture/data-model.md, "Data model" and "Measuring").

The four per-device cost components (`COST_COMPONENTS`, in milliseconds), a placement's per-device and overall
costs, where a plan's costs come from (`CostBasis`), the alpha-beta all-to-all model and the backend that
measured a record. Built on `dreamshard.values.tables`; `dreamshard.values` re-exports all of it.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from dreamshard.values.comm_fit import FitQuality
from dreamshard.values.tables import StrictModel

#: Where a plan's costs come from: a real measurement, the analytic simulator backend, or the cost model.
CostBasis = Literal["measured", "simulated", "predicted"]

#: The four per-device cost components, in the order of DeviceCost's fields, as_list() and every table/plot.
COST_COMPONENTS: tuple[str, ...] = ("fwd_compute", "fwd_comm", "bwd_comm", "bwd_compute")


class DeviceCost(StrictModel):
    """The four cost components of one device, in milliseconds (names: COST_COMPONENTS)."""

    fwd_compute: Annotated[float, Field(ge=0)]
    fwd_comm: Annotated[float, Field(ge=0)]
    bwd_comm: Annotated[float, Field(ge=0)]
    bwd_compute: Annotated[float, Field(ge=0)]

    @property
    def total(self) -> float:
        return self.fwd_compute + self.fwd_comm + self.bwd_comm + self.bwd_compute

    def as_list(self) -> list[float]:
        return [self.fwd_compute, self.fwd_comm, self.bwd_comm, self.bwd_compute]

    @classmethod
    def from_list(cls, v: list[float] | tuple[float, ...]) -> DeviceCost:
        a, b, c, d = (max(0.0, float(x)) for x in v)
        return cls(fwd_compute=a, fwd_comm=b, bwd_comm=c, bwd_compute=d)

    @classmethod
    def zero(cls) -> DeviceCost:
        return cls(fwd_compute=0.0, fwd_comm=0.0, bwd_comm=0.0, bwd_compute=0.0)


#: A measured overall is the median over rounds of each round's max over devices; per-device figures are
#: component-wise medians. On a noisy machine the two differ a little, never by this much: an overall below
#: (1 - OVERALL_LOW) x or above OVERALL_HIGH x the largest per-device total is an edited figure.
OVERALL_LOW, OVERALL_HIGH = 0.05, 1.5
#: Largest cost figure (ms) a measurement, a corpus timing or a training record may hold: a forged 1e308 would
#: overflow the float32 training targets into NaN weights (one bound for every file that carries timings).
MAX_RECORD_MS = 1e9


class Costs(StrictModel):
    """Per-device costs of a placement and its overall cost (max over devices of the totals)."""

    per_device: tuple[DeviceCost, ...]
    overall_ms: Annotated[float, Field(ge=0)]

    @classmethod
    def from_devices(cls, per_device: list[DeviceCost], overall_ms: float | None = None) -> Costs:
        overall = max((d.total for d in per_device), default=0.0) if overall_ms is None else overall_ms
        return cls(per_device=tuple(per_device), overall_ms=overall)

    @property
    def top_total(self) -> float:
        """The largest per-device total (what the overall cost is, up to the median's noise)."""
        return max((d.total for d in self.per_device), default=0.0)

    def overall_agrees(self) -> bool:
        """Whether the overall is the bottleneck device's total within [1 - OVERALL_LOW, OVERALL_HIGH] x it."""
        return self.top_total * (1 - OVERALL_LOW) <= self.overall_ms <= self.top_total * OVERALL_HIGH

    @property
    def bottleneck_device(self) -> int:
        totals = [d.total for d in self.per_device]
        return int(max(range(len(totals)), key=totals.__getitem__)) if totals else 0


#: The collectives a plan's units need: table- and column-wise outputs go by all-to-all, row-wise partial sums
#: by reduce-scatter, data-parallel gradients by all-reduce (dreamshard.profiling.comm fits each).
Collective = Literal["all_to_all", "reduce_scatter", "all_reduce"]


class CommModel(StrictModel):
    """Alpha-beta model of one collective: t_ms = alpha_ms + beta_ms_per_mb * megabytes (leaving one rank).

    A benchmarked fit carries its `quality` (dreamshard.values.comm_fit); a world larger than the ranks the machine
    could run is derived from the fit at `measured_ranks` with the measured `per_peer_ms`
    (docs/architecture/measuring.md, "Communication costs"); `fallback` says why a labelled fallback stands in for a fit
    that failed the bar."""

    alpha_ms: Annotated[float, Field(ge=0)]
    beta_ms_per_mb: Annotated[float, Field(ge=0)]
    backend: str
    world_size: int
    collective: Collective = "all_to_all"
    points: tuple[tuple[float, float], ...] = ()  # (megabytes, ms) used for the fit
    r2: float | None = None
    measured_ranks: Annotated[int, Field(ge=1)] | None = None  # ranks benchmarked (None: not a benchmark)
    per_peer_ms: Annotated[float, Field(ge=0)] = 0.0  # measured latency of one more peer's message
    quality: FitQuality | None = None
    fallback: str | None = None  # why a labelled fallback was used instead of a fit that passed the bar

    @property
    def derived(self) -> bool:
        """True when the world is larger than the ranks benchmarked (alpha derived per peer)."""
        return self.measured_ranks is not None and self.world_size > self.measured_ranks

    def describe(self) -> str:
        """One line: label, alpha, beta, world, and the fit's quality or the fallback's reason."""
        ranks = f", {self.measured_ranks} ranks measured" if self.derived else ""
        head = (
            f"{self.collective} {self.backend}: {self.alpha_ms:.3f} ms + {self.beta_ms_per_mb:.3f} ms/MB "
            f"(world {self.world_size}{ranks})"
        )
        if self.fallback:
            return f"{head}; fallback: {self.fallback}"
        if self.quality is not None:
            return f"{head}; {self.quality.summary()}"
        return head + (f"; r2 {self.r2:.3f}, no quality record" if self.r2 is not None else "")

    def cost_ms(self, nbytes: float) -> float:
        if nbytes <= 0:
            return 0.0
        return self.alpha_ms + self.beta_ms_per_mb * nbytes / 1e6


#: How a device's `repeats` timed iterations become one figure (forward and backward apart): `min` (interference
#: only ever adds time, and on a shared CPU it comes in bursts that can hold most repeats, which a median takes
#: in) or `median`.
Statistic = Literal["median", "min"]


class BackendInfo(StrictModel):
    """What measured a record and with which settings."""

    name: str  # cpu | cuda | simulator
    operator: str  # fbgemm_tbe | embedding_bag | analytic
    device: str
    num_threads: int
    batch_size: int
    warmup: int
    repeats: int
    row_cap: int | None = None  # rows scaled down above this (CPU profiling rule)
    is_simulated: bool = False
    # how a device's timed repeats became its figure (profile.statistic); a record that does not say took the median
    statistic: Statistic = "median"
