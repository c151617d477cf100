"""What the judge returns, and how the oracle's figure for a plan compares with it.

A plan's figure per round is the max over its devices of [fwd_compute, fwd_comm, bwd_comm, bwd_compute] summed
(docs/architecture/data-model.md, "Data model"; DESIGN.md section 1); its figure is the median over rounds, its
per-device figures the component-wise medians over rounds, its spread (max - min) / median of the rounds' figures;
by per-device medians (`device_median_ms`), the slowest device's median over the rounds; by per-device minima
(`device_min_ms`), its fastest round.
"""

from __future__ import annotations

import statistics
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from dreamshard.values import Costs, DeviceCost


class JudgeSettings(BaseModel):
    """How the judge measured: everything a reader needs to repeat it."""

    model_config = ConfigDict(frozen=True)

    rounds: Annotated[int, Field(ge=1)]
    warmup: Annotated[int, Field(ge=0)]
    repeats: Annotated[int, Field(ge=1)]  # timed iterations of a device's fused operators
    comm_repeats: Annotated[int, Field(ge=1)]  # timed repeats of one exchange
    ranks: int  # real ranks the collectives run on (N devices emulated: judge_comm)
    seed: int
    table_cap_mb: float
    device_cap_mb: float
    ids: str = "access_histogram when declared, else Zipf(1.05) over the kept rows (assumed)"
    # how the collectives are charged: timed on real ranks (the host's world), or a declared world's alpha + bytes /
    # bandwidth per exchange ("declared: 0.02 ms + bytes at 10 GB/s"), for plans judged for a world this host is not
    comm: str = "timed on real ranks"


class PlanRound(BaseModel):
    """One plan measured in one round: its place in the round's order and its four costs per device."""

    model_config = ConfigDict(frozen=True)

    round: int
    position: int
    costs: Costs


class PlanJudgement(BaseModel):
    """One plan's figures over the rounds."""

    model_config = ConfigDict(frozen=True)

    plan_id: str
    sharder: str
    rounds: tuple[PlanRound, ...]

    @property
    def samples_ms(self) -> list[float]:
        """Each round's overall figure (max over devices), in round order."""
        return [r.costs.overall_ms for r in sorted(self.rounds, key=lambda r: r.round)]

    @property
    def overall_ms(self) -> float:
        return statistics.median(self.samples_ms)

    @property
    def device_samples_ms(self) -> list[list[float]]:
        """Each device's total (its four costs summed) per round, in round order."""
        ordered = sorted(self.rounds, key=lambda r: r.round)
        devices = len(ordered[0].costs.per_device)
        return [[sum(r.costs.per_device[d].as_list()) for r in ordered] for d in range(devices)]

    @property
    def device_median_ms(self) -> float:
        """The plan's figure by per-device medians: the slowest device's median over the rounds. A round's figure is
        the max over its devices, so one device's noisy round moves it; a device's median over rounds does not."""
        return max(statistics.median(xs) for xs in self.device_samples_ms)

    @property
    def device_min_ms(self) -> float:
        """The plan's figure by per-device minima: the slowest device's fastest round. Interference on a shared
        machine only adds time (a round of one plan read 21 ms, the next 30 ms), so a device's fastest round is its
        undisturbed cost: the statistic the planner's own oracle takes over repeats (BackendInfo.statistic)."""
        return max(min(xs) for xs in self.device_samples_ms)

    @property
    def spread(self) -> float:
        xs = self.samples_ms
        return (max(xs) - min(xs)) / self.overall_ms if self.overall_ms > 0 else 0.0

    @property
    def costs(self) -> Costs:
        """Per-device component-wise medians over the rounds, with the median overall."""
        devices = len(self.rounds[0].costs.per_device)
        per_device = [
            DeviceCost.from_list(
                [statistics.median(r.costs.per_device[d].as_list()[c] for r in self.rounds) for c in range(4)]
            )
            for d in range(devices)
        ]
        return Costs.from_devices(per_device, self.overall_ms)


class JudgeResult(BaseModel):
    """The judge's figures for a set of plans measured interleaved; `order`: plan ids in measuring order per round."""

    model_config = ConfigDict(frozen=True)

    inventory: str
    settings: JudgeSettings
    plans: tuple[PlanJudgement, ...]
    order: tuple[tuple[str, ...], ...]
    seconds: float

    def by_id(self) -> dict[str, PlanJudgement]:
        return {p.plan_id: p for p in self.plans}


class PredictionError(BaseModel):
    """The oracle's figure against the judge's, (oracle - judge) / judge, signed: per component on the judge's
    bottleneck device (compute: forward + backward; comm: forward + backward collectives) and overall."""

    model_config = ConfigDict(frozen=True)

    device: int
    compute: float
    comm: float
    overall: float


def _rel(oracle: float, judge: float) -> float:
    if judge <= 0:
        return 0.0 if oracle <= 0 else float("inf")
    return (oracle - judge) / judge


def prediction_error(judged: PlanJudgement, oracle: Costs) -> PredictionError:
    """How far `oracle` (a plan's `measured` or `predicted` costs, the same plan) is from the judge's figures."""
    mine = judged.costs
    if len(oracle.per_device) != len(mine.per_device):
        raise ValueError(f"the oracle has {len(oracle.per_device)} devices, the judge {len(mine.per_device)}")
    d = mine.bottleneck_device
    j, o = mine.per_device[d], oracle.per_device[d]
    return PredictionError(
        device=d,
        compute=_rel(o.fwd_compute + o.bwd_compute, j.fwd_compute + j.bwd_compute),
        comm=_rel(o.fwd_comm + o.bwd_comm, j.fwd_comm + j.bwd_comm),
        overall=_rel(oracle.overall_ms, judged.overall_ms),
    )
