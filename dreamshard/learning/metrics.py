"""Error metrics of cost predictions: MAPE and Spearman rank correlation (numpy only)."""

from __future__ import annotations

import numpy as np


def mape(pred: np.ndarray, true: np.ndarray, eps: float = 1e-9) -> float:
    """Mean absolute percentage error (a fraction: 0.1 = 10%) over entries with |true| > eps."""
    pred = np.asarray(pred, dtype=float).ravel()
    true = np.asarray(true, dtype=float).ravel()
    keep = np.abs(true) > eps
    if not keep.any():
        return float("nan")
    return float(np.mean(np.abs(pred[keep] - true[keep]) / np.abs(true[keep])))


def rankdata(x: np.ndarray) -> np.ndarray:
    """Ranks 1..n with ties given their average rank."""
    x = np.asarray(x, dtype=float).ravel()
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x), dtype=float)
    sx = x[order]
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and sx[j + 1] == sx[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return ranks


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman rank correlation; nan with fewer than 2 points or a constant input."""
    ra, rb = rankdata(a), rankdata(b)
    if len(ra) < 2 or ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])
