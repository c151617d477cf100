"""How accurate a cost ensemble is on held-out records (docs/architecture/learning.md, "Learning"): MAPE overall, per
device and per cost component, Spearman of the overall costs, and the error and ensemble spread per regime (tables per
device, pooling range).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict

from dreamshard.learning.cost_model import COMM, COMPUTE, NUM_DEVICE_COSTS, CostEnsemble
from dreamshard.learning.cost_samples import Batch, collate, to_samples
from dreamshard.learning.metrics import mape, spearman
from dreamshard.learning.threads import single_threaded
from dreamshard.values import Inventory, Measurement


class RegimeError(BaseModel):
    """Held-out error of the ensemble mean on the devices of one regime."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    regime: str
    devices: int
    mape_compute: float | None  # fwd + bwd compute of a device
    mape_total: float | None  # all four components
    spread: float | None  # mean member standard deviation of device compute / its mean prediction


class CostMetrics(BaseModel):
    """Held-out accuracy of a cost ensemble (its mean). MAPEs are fractions (0.1 = 10%); None without a test split."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    n_train: int
    n_test: int
    ensemble_size: int = 1
    mape_overall: float | None = None
    mape_device_total: float | None = None
    # device total with the predicted compute and the measured all-to-all cost: the error planning sees when the
    # comm model is known (dreamshard.learning.planning_cost)
    mape_device_total_planning: float | None = None
    mape_device_compute: float | None = None  # fwd + bwd compute of a device
    mape_overall_from_devices: float | None = None  # max over devices of predicted device totals vs overall
    mape_device_components: tuple[float | None, ...] | None = None  # per cost component (None: all zero)
    spearman_overall: float | None = None
    train_loss: float | None = None
    regimes: tuple[RegimeError, ...] = ()


TABLE_COUNT_REGIMES: tuple[tuple[str, float, float], ...] = (
    ("1 table", 1, 1),
    ("2-5 tables", 2, 5),
    ("6-15 tables", 6, 15),
    ("16-30 tables", 16, 30),
    ("31-60 tables", 31, 60),
    (">60 tables", 61, math.inf),
)
POOLING_REGIMES: tuple[tuple[str, float, float], ...] = (
    ("pooling <= 1", 0, 1.0),
    ("pooling 1-10", 1.0, 10.0),
    ("pooling 10-50", 10.0, 50.0),
    ("pooling > 50", 50.0, math.inf),
)


def _member_predictions(ens: CostEnsemble, b: Batch) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(K, Ndev, 4) device costs ms, (K, B) overall ms from the overall heads, (Ndev,) non-empty mask."""
    devs, overalls = [], []
    nonempty = None
    for net in ens.nets:
        dev_pred, overall_pred, nonempty = net.forward_flat(
            b.feats, b.table_device, b.num_devices_total, b.device_placement, b.num_placements
        )
        devs.append((dev_pred * net.target_scale[:NUM_DEVICE_COSTS]).clamp_min(0).numpy())
        overalls.append((overall_pred * net.target_scale[-1]).clamp_min(0).numpy())
    assert nonempty is not None
    return np.stack(devs), np.stack(overalls), nonempty.numpy()


def _regime_rows(
    label_lo_hi: Sequence[tuple[str, float, float]],
    key: np.ndarray,
    pred: np.ndarray,
    true: np.ndarray,
    spread: np.ndarray,
) -> list[RegimeError]:
    rows = []
    comp = list(COMPUTE)
    for label, lo, hi in label_lo_hi:
        sel = (key >= lo) & (key <= hi)
        if not sel.any():
            continue
        p, t = pred[sel], true[sel]
        pc, tc = p[:, comp].sum(1), t[:, comp].sum(1)
        rows.append(
            RegimeError(
                regime=label,
                devices=int(sel.sum()),
                mape_compute=_finite(mape(pc, tc)),
                mape_total=_finite(mape(p.sum(1), t.sum(1))),
                spread=_finite(float(np.mean(spread[sel] / np.maximum(pc, 1e-9)))),
            )
        )
    return rows


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


@single_threaded
def evaluate_cost_net(ens: CostEnsemble, pool: Inventory, records: Sequence[Measurement]) -> dict[str, object]:
    """MAPE (overall, device totals, each component), Spearman of overall costs and per-regime errors of the
    ensemble mean over `records`."""
    if not records:
        return {}
    feats, samples, tables = to_samples(pool, records)
    with torch.no_grad():
        b = collate(feats, samples)
        member_dev, member_overall, ne = _member_predictions(ens, b)
    dev_ms = member_dev.mean(0)
    overall_ms = member_overall.mean(0)
    comp = list(COMPUTE)
    spread = member_dev[..., comp].sum(-1).std(0) if ens.size > 1 else np.zeros(len(ne))
    true_dev = b.dev_targets.numpy()
    dev_place = b.device_placement.numpy()
    from_devices = np.zeros(b.num_placements)
    np.maximum.at(from_devices, dev_place, dev_ms.sum(1))
    # regimes: tables per device and mean pooling factor of the device's tables
    counts = np.bincount(b.table_device.numpy(), minlength=b.num_devices_total).astype(float)
    pool_pf = np.array([t.pooling_factor for t in tables])
    pf_sum = np.bincount(
        b.table_device.numpy(),
        weights=pool_pf[np.concatenate([s.table_idx for s in samples])],
        minlength=b.num_devices_total,
    )
    mean_pf = pf_sum / np.maximum(counts, 1.0)
    regimes = _regime_rows(TABLE_COUNT_REGIMES, counts[ne], dev_ms[ne], true_dev[ne], spread[ne])
    regimes += _regime_rows(POOLING_REGIMES, mean_pf[ne], dev_ms[ne], true_dev[ne], spread[ne])
    return {
        "mape_overall_from_devices": mape(from_devices, b.overall.numpy()),
        "mape_overall": mape(overall_ms, b.overall.numpy()),
        "mape_device_total": mape(dev_ms[ne].sum(1), true_dev[ne].sum(1)),
        "mape_device_total_planning": mape(
            dev_ms[ne][:, comp].sum(1) + true_dev[ne][:, list(COMM)].sum(1), true_dev[ne].sum(1)
        ),
        "mape_device_compute": mape(dev_ms[ne][:, comp].sum(1), true_dev[ne][:, comp].sum(1)),
        "mape_device_components": tuple(mape(dev_ms[ne][:, k], true_dev[ne][:, k]) for k in range(NUM_DEVICE_COSTS)),
        "spearman_overall": spearman(from_devices, b.overall.numpy()) if len(records) > 1 else None,
        "regimes": tuple(regimes),
    }


def clean_metric(v: object) -> object:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, tuple) and all(x is None or isinstance(x, float) for x in v):
        return tuple(None if (x is None or not math.isfinite(x)) else x for x in v)
    return v
