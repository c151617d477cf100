"""Collective fits that describe the machine (docs/architecture/measuring.md, "Communication costs").

A benchmark (`dreamshard.profiling.comm.benchmark_collective`, injected as `run`) gives (MB, ms) points, one
held-out size and the per-peer points; here they become an alpha-beta fit judged by the quality bar
(`fit_quality`). A fit that fails is measured once more with more repeats and sizes; if it fails again, the
better of the two is used under a `fallback` label that says why. A world larger than the ranks the machine can
run is derived from the measured fit: the same cost per MB leaving a rank (the (N-1)/N byte share is in the
bytes, `comm.device_comm_bytes`) and the measured cost of each further peer's message. A cached fit is reused
only when it passed the bar, on this machine, recently (a labelled fallback: for an hour, then measured again).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import NamedTuple

import numpy as np

from dreamshard.profiling.fit_quality import QUALITY_BAR, assess, is_monotone, machine_id, score
from dreamshard.values import Collective, CommModel

log = logging.getLogger(__name__)

#: Bytes leaving one rank per all-to-all, benchmarked (16 KB ... 8 MB: a device's pooled outputs for
#: batch 2048 range from 128 KB (dim 16) to tens of MB; the held-out tasks' devices send 4-8 MB).
MESSAGE_BYTES: tuple[int, ...] = (16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 8 << 20)
#: ... per reduce-scatter: a device's partial pooled sums of its row-wise tables for the whole batch
#: (batch 2048 x dim 64 x 4 = 512 KB per table; several tables: MBs).
REDUCE_SCATTER_BYTES: tuple[int, ...] = (64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20)
#: ... per all-reduce: 2(n-1)/n of the dense gradients of small replicated tables (KBs to tens of MB).
ALL_REDUCE_BYTES: tuple[int, ...] = (64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 32 << 20)
COLLECTIVE_BYTES: dict[str, tuple[int, ...]] = {
    "all_to_all": MESSAGE_BYTES,
    "reduce_scatter": REDUCE_SCATTER_BYTES,
    "all_reduce": ALL_REDUCE_BYTES,
}
#: The size each collective's benchmark also measures but leaves out of the fit, to check the fit's prediction.
#: Measured in its place among the sizes (ascending), never last: a small exchange right after the largest ran up to
#: 4x slow (2026-12-04: 512 KB took 2.6 ms after 16 MB, 0.64 ms in order). Never a dense attempt's midpoint.
HELD_OUT_BYTES: dict[str, int] = {"all_to_all": 768 << 10, "reduce_scatter": 3 << 20, "all_reduce": 3 << 20}
#: How old a cached fit may be before it is measured again (days; env DREAMSHARD_COMM_MAX_AGE_DAYS).
MAX_AGE_DAYS = float(os.environ.get("DREAMSHARD_COMM_MAX_AGE_DAYS", "30"))
#: A fit that failed the bar twice is cached with its fallback label and reused (said so, in the log and in every
#: plan that records it) for this many minutes, then measured again: planning never re-runs a failing benchmark in
#: every process.
FALLBACK_REUSE_MINUTES = 60.0
#: How a benchmark times its calls; a cached fit of another protocol is measured again. 2 (2026-12-05): the
#: all-to-all times only the bytes that leave a rank, and the sizes are timed in interleaved passes (collectives.py);
#: 1 also timed the copy of the rank's own chunk, and timed each size's repeats back to back.
BENCHMARK_PROTOCOL = 2


class Benchmark(NamedTuple):
    """What one benchmark run returned: (MB sent per rank, ms) points, the op that ran (collectives.py), and
    (messages, ms) points of the same bytes cut into more messages (the per-peer cost)."""

    points: list[tuple[float, float]]
    method: str
    peer_points: list[tuple[float, float]] = []


#: run(world_size, backend, collective, sizes, warmup, repeats) -> Benchmark (comm.benchmark_collective)
Run = Callable[[int, str, Collective, Sequence[int], int, int], Benchmark]


@dataclass(frozen=True)
class Attempt:
    """One benchmark's settings: repeats and warm-ups per size, and whether to add the sizes between the usual."""

    repeats: int
    warmup: int
    dense: bool


#: The first benchmark, then the re-measurement of a fit that failed the bar: 3x the repeats and twice the sizes.
ATTEMPTS: tuple[Attempt, ...] = (Attempt(repeats=7, warmup=2, dense=False), Attempt(repeats=21, warmup=5, dense=True))


def fit_alpha_beta(points: Sequence[tuple[float, float]]) -> tuple[float, float, float]:
    """Least squares ``ms = alpha + beta * MB`` with alpha >= 0 and beta >= 0; returns (alpha, beta, r2)."""
    x = np.array([p[0] for p in points], dtype=np.float64)
    y = np.array([p[1] for p in points], dtype=np.float64)
    if x.size == 0:
        return 0.0, 0.0, 0.0
    candidates: list[tuple[float, float]] = []
    if x.size >= 2 and np.ptp(x) > 0:
        beta, alpha = np.polyfit(x, y, 1)
        if alpha >= 0 and beta >= 0:
            candidates.append((float(alpha), float(beta)))
    # Boundary solutions of the constrained problem (the optimum lies on one if OLS is infeasible).
    xx = float((x * x).sum())
    candidates.append((0.0, max(0.0, float((x * y).sum() / xx)) if xx > 0 else 0.0))
    candidates.append((max(0.0, float(y.mean())), 0.0))

    def sse(ab: tuple[float, float]) -> float:
        return float(((ab[0] + ab[1] * x - y) ** 2).sum())

    alpha, beta = min(candidates, key=sse)
    ss_tot = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - sse((alpha, beta)) / ss_tot if ss_tot > 0 else 1.0
    return alpha, beta, r2


def per_peer_ms(peer_points: Sequence[tuple[float, float]]) -> float:
    """The cost of one more message of the same total bytes: the non-negative slope of (messages, ms)."""
    if len(peer_points) < 2:
        return 0.0
    _, slope, _ = fit_alpha_beta(peer_points)
    return max(0.0, slope)


def fit_sizes(collective: Collective, dense: bool) -> list[int]:
    """The sizes one attempt fits: the collective's sizes, with their geometric midpoints when `dense`."""
    base = list(COLLECTIVE_BYTES[collective])
    if dense:
        base = sorted(base + [int((a * b) ** 0.5) for a, b in zip(base, base[1:], strict=False)])
    return base


def attempt_sizes(collective: Collective, dense: bool) -> list[int]:
    """The sizes one attempt measures, ascending: `fit_sizes` and the held-out size in its place."""
    return sorted([*fit_sizes(collective, dense), HELD_OUT_BYTES[collective]])


def collective_steps(collective: Collective, world: int) -> int:
    """Messages one rank sends per call: one per peer (all-to-all, reduce-scatter), twice that for a ring
    all-reduce (its reduce-scatter and its all-gather)."""
    return 2 * (world - 1) if collective == "all_reduce" else world - 1


def derive(model: CommModel, world_size: int) -> CommModel:
    """`model` (measured at ``model.world_size`` ranks) for a world of `world_size` devices: beta (ms per MB leaving
    a rank) as measured, alpha plus the measured per-peer cost of each further message (`collective_steps`)."""
    if world_size <= model.world_size or model.measured_ranks is None:  # a model set by hand is taken as given
        return model
    extra = collective_steps(model.collective, world_size) - collective_steps(model.collective, model.world_size)
    return model.model_copy(update={"alpha_ms": model.alpha_ms + model.per_peer_ms * extra, "world_size": world_size})


def _model_of(
    bench: Benchmark, procs: int, label: str, collective: Collective, attempt: Attempt, n: int, cores: int
) -> CommModel:
    """The fit of one benchmark and its quality (the held-out point is the one measured at HELD_OUT_BYTES, in its
    place among the sizes)."""
    i = attempt_sizes(collective, attempt.dense).index(HELD_OUT_BYTES[collective])
    held, points = bench.points[i], [p for j, p in enumerate(bench.points) if j != i]
    alpha, beta, r2 = fit_alpha_beta(points)
    quality = assess(points, alpha, beta, r2, held, ranks=procs, cores=cores, repeats=attempt.repeats, attempts=n)
    quality = quality.model_copy(update={"protocol": BENCHMARK_PROTOCOL})
    return CommModel(
        alpha_ms=alpha,
        beta_ms_per_mb=beta,
        backend=label,
        world_size=procs,
        collective=collective,
        points=tuple((round(a, 6), round(b, 6)) for a, b in points),
        r2=round(r2, 6),
        measured_ranks=procs,
        per_peer_ms=round(per_peer_ms(bench.peer_points), 6),
        quality=quality,
    )


def measure_fit(
    run: Run, procs: int, backend: str, collective: Collective, cores: int, label: Callable[[str], str]
) -> CommModel:
    """Benchmark `collective` on `procs` ranks until a fit passes the bar (`ATTEMPTS`); else the better fit, with
    `fallback` saying why. `label(method)` names the fit's backend (the op the process group ran)."""
    fits: list[CommModel] = []
    for n, attempt in enumerate(ATTEMPTS, start=1):
        bench = run(
            procs, backend, collective, attempt_sizes(collective, attempt.dense), attempt.warmup, attempt.repeats
        )
        model = _model_of(bench, procs, label(bench.method), collective, attempt, n, cores)
        assert model.quality is not None
        if model.quality.passed:
            return model
        log.warning("%s fit on %d ranks below the quality bar (%s)", collective, procs, model.quality.summary())
        fits.append(model)
    best = max(fits, key=lambda m: score(m.quality) if m.quality is not None else (-99, 0.0))
    assert best.quality is not None
    why = f"fit below the quality bar after {len(fits)} benchmarks: {'; '.join(best.quality.problems)}"
    return best.model_copy(update={"fallback": why})


def cached_fit(path: Path, collective: Collective, cores: int) -> tuple[CommModel | None, str]:
    """The fit cached at `path` if it may be reused (passed the bar, this machine, younger than MAX_AGE_DAYS);
    else None and why it is refitted ("" when there is no cache)."""
    if not path.exists():
        return None, ""
    try:
        model = CommModel.model_validate_json(path.read_text())
    except (OSError, ValueError):
        return None, "the cache is unreadable"
    if model.collective != collective:
        return None, f"the cache holds a {model.collective} fit"
    q = model.quality
    if q is None:
        return None, "the cached fit has no quality record (an older fit)"
    if q.protocol != BENCHMARK_PROTOCOL:
        return None, f"the cached fit was timed by benchmark protocol {q.protocol}, not {BENCHMARK_PROTOCOL}"
    if q.machine != machine_id(cores):
        return None, f"the cached fit was measured on another machine ({q.machine})"
    age = datetime.now(timezone.utc) - q.measured_at
    if age > timedelta(days=MAX_AGE_DAYS):
        return None, f"the cached fit is {age.days} days old (> {MAX_AGE_DAYS:g})"
    if not q.passed:
        if model.fallback and age <= timedelta(minutes=FALLBACK_REUSE_MINUTES):
            log.info(
                "reusing a labelled fallback fit of %s, %.0f min old: %s",
                collective,
                age.total_seconds() / 60,
                model.fallback,
            )
            return model, ""
        return None, f"the cached fit failed the quality bar ({'; '.join(q.problems)})"
    return model, ""


def distrust(model: CommModel) -> str:
    """Why a benchmarked fit must not be planned on ("" when it may): it failed the bar, stands in as a fallback,
    or (an older fit without a quality record) its own points fail r2 or monotonicity. Labelled models that are
    not benchmarks (simulated, default, fixed profiles) and models set by hand (no points) are what they say."""
    if model.backend.startswith(("simulated", "default", "profile:", "world:", "none")):
        return ""
    if model.fallback:
        return model.fallback
    if model.quality is not None:
        return "; ".join(model.quality.problems)
    if model.r2 is None or len(model.points) < 2:
        return ""  # set by hand (no points): taken as given
    problems = [f"r2 {model.r2:.2f} < {QUALITY_BAR.min_r2:.2f}"] if model.r2 < QUALITY_BAR.min_r2 else []
    monotone, why = is_monotone(model.points)
    return "; ".join(problems + ([] if monotone else [why]))
