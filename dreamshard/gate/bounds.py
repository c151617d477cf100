"""The gate's statistics: a confidence interval on plan / baseline from interleaved, paired rounds.

Each round measures every contender once (shuffled order), so round i's plan and baseline samples saw the same
machine state: the per-round log ratio log(plan_i / base_i) cancels drift common to both. The interval is the
Student t interval of the mean log ratio, exponentiated: a geometric-mean ratio with bounds. A noisy machine
widens it, so the gate cannot approve or reject on one lucky or unlucky round. Samples that agree exactly (the
simulator) give a zero-width interval: the exact ratio.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Look:
    """One look of the gate's sequential rule (gate/sequential.py): the first `rounds` paired rounds, judged at
    `confidence`; `early` marks a look before publish.min_rounds."""

    rounds: int
    confidence: float
    early: bool = False


@dataclass(frozen=True)
class RatioBound:
    """plan / baseline: the geometric mean of the paired per-round ratios and its confidence bounds."""

    ratio: float
    low: float
    high: float
    rounds: int


def ratio_bound(plan_ms: Sequence[float], base_ms: Sequence[float], confidence: float) -> RatioBound:
    """Two-sided `confidence` interval of plan / baseline from samples paired by round (same length, all > 0).
    One round (exact figures) gives a zero-width interval; callers require enough rounds first."""
    if len(plan_ms) != len(base_ms) or not plan_ms:
        raise ValueError("paired samples need the same, non-zero number of rounds")
    logs = [math.log(p) - math.log(b) for p, b in zip(plan_ms, base_ms, strict=True)]
    n = len(logs)
    mean = statistics.fmean(logs)
    sd = statistics.stdev(logs) if n > 1 else 0.0
    half = t_quantile((1.0 + confidence) / 2.0, n - 1) * sd / math.sqrt(n) if sd > 0 else 0.0
    return RatioBound(ratio=math.exp(mean), low=math.exp(mean - half), high=math.exp(mean + half), rounds=n)


def window_spread(samples: Sequence[float], window: int) -> float:
    """(max - min) / median of the last `window` samples (the comparison's spread of a contender, over a window that
    moves on as rounds are added: a burst of interference that has passed stops counting); 0 for none."""
    last = list(samples[-window:]) if window > 0 else list(samples)
    if not last:
        return 0.0
    med = statistics.median(last)
    return (max(last) - min(last)) / med if med > 0 else 0.0


@functools.lru_cache(maxsize=256)
def t_quantile(p: float, df: int) -> float:
    """The p-quantile (p in (0.5, 1)) of Student's t with `df` >= 1 degrees of freedom (bisection on the CDF)."""
    lo, hi = 0.0, 1.0
    while _t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(100):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if _t_cdf(mid, df) < p else (lo, mid)
    return (lo + hi) / 2.0


def _t_cdf(t: float, df: int) -> float:
    x = df / (df + t * t)
    tail = 0.5 * _betainc(df / 2.0, 0.5, x)
    return 1.0 - tail if t >= 0 else tail


def _betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b) (continued fraction, Numerical Recipes' betacf)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def _betacf(a: float, b: float, x: float) -> float:
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for aa in (
            m * (b - m) * x / ((a + m2 - 1.0) * (a + m2)),
            -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1.0)),
        ):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-14:
            break
    return h
