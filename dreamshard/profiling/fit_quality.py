"""The quality bar a collective's fit must pass before anything plans on it (docs/architecture/measuring.md,
"Communication costs"): r2, monotone points, a held-out size predicted within tolerance, and ranks that each had a core.

Pure functions over (megabytes, ms) points; `dreamshard.profiling.comm` runs the benchmarks and decides what to
do with a fit that fails.
"""

from __future__ import annotations

import os
import platform
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

from dreamshard.values import FitQuality, HeldOutPoint


@dataclass(frozen=True)
class QualityBar:
    """What a fit must show. `monotone_slack`: a larger message may take up to this fraction less time than a
    smaller one (two sizes within the latency floor differ by timing noise alone)."""

    min_r2: float = 0.9
    max_held_out_error: float = 0.15
    monotone_slack: float = 0.10


QUALITY_BAR = QualityBar()


def usable_cores() -> int:
    """Cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not on Linux
        return max(1, os.cpu_count() or 1)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_id(cores: int | None = None) -> str:
    """Who measured: host, cpu model, usable cores and torch version. A cached fit from another machine (or the
    same host with another core count or torch) is refitted."""
    import torch  # loads torch: here, so that importing this module does not

    n = usable_cores() if cores is None else cores
    return f"{socket.gethostname()} / {_cpu_model()} / {n} cores / torch {torch.__version__}"


def is_monotone(points: Sequence[tuple[float, float]], slack: float = QUALITY_BAR.monotone_slack) -> tuple[bool, str]:
    """Whether time never drops by more than `slack` as the message grows; the first violation, named."""
    ordered = sorted(points)
    for (mb0, ms0), (mb1, ms1) in zip(ordered, ordered[1:], strict=False):
        if mb1 > mb0 and ms1 < ms0 * (1.0 - slack):
            return False, f"not monotone: {_size(mb0)} {ms0:.2f} ms > {_size(mb1)} {ms1:.2f} ms"
    return True, ""


def _size(mb: float) -> str:
    return f"{mb * 1e3:.0f} KB" if mb < 1.0 else f"{mb:.1f} MB"


def assess(
    points: Sequence[tuple[float, float]],
    alpha: float,
    beta: float,
    r2: float,
    held_out: tuple[float, float] | None,
    *,
    ranks: int,
    cores: int,
    repeats: int,
    attempts: int = 1,
    bar: QualityBar = QUALITY_BAR,
    machine: str | None = None,
) -> FitQuality:
    """Judge the fit ``alpha + beta * MB`` of `points` (r2 given) against `bar`, with `held_out` = (MB, ms) a
    benchmarked size left out of the fit, and the ranks the benchmark started against the cores it had."""
    problems: list[str] = []
    if ranks > cores:
        problems.append(f"{ranks} ranks on {cores} cores: the timings measure the scheduler")
    if r2 < bar.min_r2:
        problems.append(f"r2 {r2:.2f} < {bar.min_r2:.2f}")
    monotone, why = is_monotone(points, bar.monotone_slack)
    if not monotone:
        problems.append(why)
    held = None
    if held_out is not None:
        held = HeldOutPoint(megabytes=held_out[0], measured_ms=held_out[1], predicted_ms=alpha + beta * held_out[0])
        if held.error > bar.max_held_out_error:
            problems.append(f"held-out {_size(held.megabytes)} off by {held.error:.0%} > {bar.max_held_out_error:.0%}")
    return FitQuality(
        r2=round(r2, 6),
        monotone=monotone,
        held_out=held,
        ranks=ranks,
        cores=cores,
        repeats=repeats,
        attempts=attempts,
        machine=machine if machine is not None else machine_id(cores),
        measured_at=datetime.now(timezone.utc),
        problems=tuple(problems),
    )


def score(quality: FitQuality) -> tuple[int, float]:
    """Order of preference between two failing fits: fewer failed checks, then the higher r2."""
    return (-len(quality.problems), quality.r2)
