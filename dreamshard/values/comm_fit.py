"""How far a collective's alpha-beta fit can be trusted (docs/architecture/measuring.md, "Communication costs"): the
quality record every fit carries, so that a fit from oversubscribed ranks or noisy points is refused instead of planned
on.

Built on `dreamshard.values.tables`; `dreamshard.values` re-exports it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import Field

from dreamshard.values.tables import StrictModel


class HeldOutPoint(StrictModel):
    """A benchmarked size the fit did not see: its measured time beside the fit's prediction."""

    megabytes: Annotated[float, Field(ge=0)]
    measured_ms: Annotated[float, Field(ge=0)]
    predicted_ms: Annotated[float, Field(ge=0)]

    @property
    def error(self) -> float:
        """|predicted - measured| / measured (0 when both are 0)."""
        if self.measured_ms <= 0:
            return 0.0 if self.predicted_ms <= 0 else float("inf")
        return abs(self.predicted_ms - self.measured_ms) / self.measured_ms


class FitQuality(StrictModel):
    """One benchmark's fit judged against the quality bar (`dreamshard.profiling.fit_quality.QUALITY_BAR`).

    `problems` is empty when the fit passed; otherwise each entry names one failed check ("r2 0.28 < 0.90",
    "not monotone: 64 KB 3.10 ms > 256 KB 1.29 ms", "held-out 512 KB off by 31% > 15%")."""

    r2: float
    monotone: bool
    held_out: HeldOutPoint | None = None
    ranks: Annotated[int, Field(ge=1)]  # processes the benchmark started
    cores: Annotated[int, Field(ge=1)]  # cores (or GPUs) the benchmark could use
    repeats: Annotated[int, Field(ge=1)]
    attempts: Annotated[int, Field(ge=1)] = 1  # benchmarks run for this fit (a failed bar re-measures once)
    machine: str  # hostname / cpu model / cores / torch: a cache from another machine is refitted
    measured_at: datetime
    problems: tuple[str, ...] = ()
    #: how the benchmark timed its calls (`dreamshard.profiling.comm_fit.BENCHMARK_PROTOCOL`); 1: before 2026-12-05
    protocol: Annotated[int, Field(ge=1)] = 1

    @property
    def passed(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        """One line: r2, monotonicity, held-out error, ranks, and the verdict."""
        held = f", held-out {self.held_out.error:.0%}" if self.held_out is not None else ""
        verdict = "passed" if self.passed else "FAILED: " + "; ".join(self.problems)
        mono = "monotone" if self.monotone else "not monotone"
        return f"r2 {self.r2:.3f}, {mono}{held}, {self.ranks} ranks on {self.cores} cores, {verdict}"
