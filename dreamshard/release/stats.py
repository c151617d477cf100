"""The paired bootstrap of a geomean ratio: how much faster one planner's plans measure than another's over a set
of tasks, with a confidence interval that resamples tasks, then rounds within each task.

Samples are paired by round (the plans of one task were measured interleaved, round r of each in the same
shuffled pass), so the ratio of a round is what is resampled; tasks weigh equally whatever their round count.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict


class RatioInterval(BaseModel):
    """A geomean ratio (< 1: the first planner is faster) and its bootstrap interval at `confidence`."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    estimate: float
    low: float
    high: float
    confidence: float
    tasks: int

    def __str__(self) -> str:
        return f"{self.estimate:.3f}x [{self.low:.3f}, {self.high:.3f}]"


def round_log_ratios(mine: Sequence[float], theirs: Sequence[float]) -> np.ndarray:
    """log(mine / theirs) per round (paired: the same round of one interleaved measurement)."""
    if len(mine) != len(theirs) or not mine:
        raise ValueError(f"paired samples need equal, non-zero round counts (got {len(mine)} and {len(theirs)})")
    a, b = np.asarray(mine, dtype=float), np.asarray(theirs, dtype=float)
    if not (np.all(a > 0) and np.all(b > 0)):
        raise ValueError("measured costs must be > 0 ms")
    return np.log(a / b)


def geomean_interval(per_task: Sequence[np.ndarray], confidence: float, samples: int, seed: int = 0) -> RatioInterval:
    """The geomean over tasks of each task's geomean round ratio, and its two-sided bootstrap interval:
    resample the tasks with replacement, then each drawn task's rounds with replacement."""
    if not per_task:
        raise ValueError("no tasks to bootstrap")
    rng = np.random.default_rng(seed)
    point = float(np.mean([r.mean() for r in per_task]))
    n = len(per_task)
    stats = np.empty(samples)
    for i in range(samples):
        drawn = rng.integers(0, n, size=n)
        stats[i] = np.mean(
            [per_task[t][rng.integers(0, len(per_task[t]), size=len(per_task[t]))].mean() for t in drawn]
        )
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(stats, [tail, 1.0 - tail])
    return RatioInterval(
        estimate=math.exp(point), low=math.exp(float(low)), high=math.exp(float(high)), confidence=confidence, tasks=n
    )
