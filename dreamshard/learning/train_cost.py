"""Fit the cost network on measurement records (profile singles + placements).

Every record contributes all its devices (per-device four costs; empty devices are skipped in the
device loss because the network predicts exactly 0 for them) and its overall cost. A seeded share of
the *placement* records is held out for CostMetrics; singles always train.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict

from dreamshard.errors import ModelError
from dreamshard.learning.configs import CostTrainConfig
from dreamshard.learning.cost_model import NUM_DEVICE_COSTS, CostNet, CostNetSpec
from dreamshard.learning.features import tables_features
from dreamshard.learning.metrics import mape, spearman
from dreamshard.learning.model_store import warm_start
from dreamshard.learning.progress import progress_bar
from dreamshard.learning.threads import single_threaded
from dreamshard.types import Inventory, Measurement


class CostMetrics(BaseModel):
    """Held-out accuracy of a cost network. MAPEs are fractions (0.1 = 10%); None without a test split."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    n_train: int
    n_test: int
    mape_overall: float | None = None
    mape_device_total: float | None = None
    mape_overall_from_devices: float | None = None  # max over devices of predicted device totals vs overall
    mape_device_components: tuple[float | None, ...] | None = None  # per cost component (None: all zero)
    spearman_overall: float | None = None
    train_loss: float | None = None


@dataclass(frozen=True)
class _Sample:
    table_idx: np.ndarray  # (T,) rows of the pool feature matrix
    device: np.ndarray  # (T,) device of each table
    num_devices: int
    dev_targets: np.ndarray  # (D, 4) ms
    overall: float


@dataclass(frozen=True)
class _Batch:
    feats: torch.Tensor
    table_device: torch.Tensor
    num_devices_total: int
    device_placement: torch.Tensor
    num_placements: int
    dev_targets: torch.Tensor
    overall: torch.Tensor


def _to_samples(pool: Inventory, records: Sequence[Measurement]) -> list[_Sample]:
    index = {t.name: i for i, t in enumerate(pool.tables)}
    out: list[_Sample] = []
    for m in records:
        names = list(m.placement)
        missing = [n for n in names if n not in index]
        if missing:
            raise ModelError(
                f"measurement {m.measurement_id} places table '{missing[0]}', which is not in pool "
                f"'{pool.name}'; train on the inventory that was profiled"
            )
        D = m.topology.num_devices
        if len(m.costs.per_device) != D:
            raise ModelError(f"measurement {m.measurement_id} has {len(m.costs.per_device)} device costs for {D} devices")
        out.append(
            _Sample(
                table_idx=np.array([index[n] for n in names], dtype=np.int64),
                device=np.array([m.placement[n] for n in names], dtype=np.int64),
                num_devices=D,
                dev_targets=np.array([d.as_list() for d in m.costs.per_device], dtype=np.float32),
                overall=float(m.costs.overall_ms),
            )
        )
    return out


def _collate(feats: torch.Tensor, samples: Sequence[_Sample]) -> _Batch:
    idx, tdev, dplace, targets, overall = [], [], [], [], []
    offset = 0
    for b, s in enumerate(samples):
        idx.append(s.table_idx)
        tdev.append(s.device + offset)
        dplace.append(np.full(s.num_devices, b, dtype=np.int64))
        targets.append(s.dev_targets)
        overall.append(s.overall)
        offset += s.num_devices
    return _Batch(
        feats=feats[torch.from_numpy(np.concatenate(idx))],
        table_device=torch.from_numpy(np.concatenate(tdev)),
        num_devices_total=offset,
        device_placement=torch.from_numpy(np.concatenate(dplace)),
        num_placements=len(samples),
        dev_targets=torch.from_numpy(np.concatenate(targets)),
        overall=torch.tensor(overall, dtype=torch.float32),
    )


def _target_scale(samples: Sequence[_Sample]) -> torch.Tensor:
    """Mean positive value of each target (ms); a component that is always 0 gets the overall scale."""
    dev = np.concatenate([s.dev_targets for s in samples])
    overall = np.array([s.overall for s in samples])
    o = float(overall[overall > 0].mean()) if (overall > 0).any() else 1.0
    scales = []
    for k in range(NUM_DEVICE_COSTS):
        col = dev[:, k]
        pos = col[col > 0]
        scales.append(float(pos.mean()) if len(pos) else o)
    return torch.tensor([*(max(s, 1e-6 * o) for s in scales), o], dtype=torch.float32)


def _loss(net: CostNet, batch: _Batch, relative_weight: float = 0.0) -> torch.Tensor:
    dev_pred, overall_pred, nonempty = net.forward_flat(
        batch.feats, batch.table_device, batch.num_devices_total, batch.device_placement, batch.num_placements
    )
    scale = net.target_scale
    dev_t = batch.dev_targets / scale[:NUM_DEVICE_COSTS]
    if nonempty.any():
        dev_loss = ((dev_pred[nonempty] - dev_t[nonempty]) ** 2).mean(dim=0).sum()
        if relative_weight > 0:
            # squared log ratio, with a floor of 1% of the target scale so ~0 targets (no comm) stay tame
            p, t = dev_pred[nonempty], dev_t[nonempty]
            floor = 0.01
            rel = (torch.log(p.clamp_min(0) + floor) - torch.log(t + floor)) ** 2
            dev_loss = dev_loss + relative_weight * rel.mean(dim=0).sum()
    else:
        dev_loss = dev_pred.sum() * 0.0
    overall_loss = ((overall_pred - batch.overall / scale[-1]) ** 2).mean()
    return dev_loss + overall_loss


def split_records(
    measurements: Sequence[Measurement], test_fraction: float, seed: int
) -> tuple[list[Measurement], list[Measurement]]:
    """(train, test): a seeded share of placement records is held out; singles always train."""
    placements = [m for m in measurements if m.kind == "placement"]
    singles = [m for m in measurements if m.kind == "single"]
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(placements))
    n_test = int(math.floor(test_fraction * len(placements)))
    if len(placements) - n_test < 1:
        n_test = 0
    test = [placements[i] for i in sorted(order[:n_test])]
    train = [placements[i] for i in sorted(order[n_test:])]
    return singles + train, test


@single_threaded
def evaluate_cost_net(net: CostNet, pool: Inventory, records: Sequence[Measurement]) -> dict[str, object]:
    """MAPE (overall, device totals, each component) and Spearman of overall costs over `records`."""
    if not records:
        return {}
    feats = torch.from_numpy(tables_features(pool.tables))
    samples = _to_samples(pool, records)
    with torch.no_grad():
        b = _collate(feats, samples)
        dev_pred, overall_pred, nonempty = net.forward_flat(
            b.feats, b.table_device, b.num_devices_total, b.device_placement, b.num_placements
        )
        dev_ms = (dev_pred * net.target_scale[:NUM_DEVICE_COSTS]).clamp_min(0).numpy()
        overall_ms = (overall_pred * net.target_scale[-1]).clamp_min(0).numpy()
    ne = nonempty.numpy()
    true_dev = b.dev_targets.numpy()
    dev_place = b.device_placement.numpy()
    from_devices = np.zeros(b.num_placements)
    np.maximum.at(from_devices, dev_place, dev_ms.sum(1))
    return {
        "mape_overall_from_devices": mape(from_devices, b.overall.numpy()),
        "mape_overall": mape(overall_ms, b.overall.numpy()),
        "mape_device_total": mape(dev_ms[ne].sum(1), true_dev[ne].sum(1)),
        "mape_device_components": tuple(mape(dev_ms[ne][:, k], true_dev[ne][:, k]) for k in range(NUM_DEVICE_COSTS)),
        "spearman_overall": spearman(overall_ms, b.overall.numpy()) if len(records) > 1 else None,
    }


def _clean(v: object) -> object:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, tuple):
        return tuple(None if (x is None or not math.isfinite(x)) else x for x in v)
    return v


@single_threaded
def train_cost_model(
    pool: Inventory,
    measurements: Sequence[Measurement],
    config: CostTrainConfig,
    init: CostNet | None = None,
    progress: bool = True,
    lr_factor: float = 1.0,
) -> tuple[CostNet, CostMetrics]:
    """Train (or continue training `init`) on the records and report held-out metrics."""
    records = [m for m in measurements if config.use_singles or m.kind == "placement"]
    if not records:
        raise ModelError("no measurement records to train the cost model on: run `dreamshard profile` first")
    train_recs, test_recs = split_records(records, config.test_fraction, config.seed)
    torch.manual_seed(config.seed)
    rng = np.random.default_rng(config.seed)
    spec = CostNetSpec(hidden=config.hidden, latent=config.latent, head_hidden=config.head_hidden)
    net = warm_start(init, spec, CostNet, "cost net")
    samples = _to_samples(pool, train_recs)
    if init is None:  # a warm-started net keeps the scale its outputs were trained in
        net.target_scale.copy_(_target_scale(samples))
    feats = torch.from_numpy(tables_features(pool.tables))
    opt = torch.optim.Adam(net.parameters(), lr=config.lr * lr_factor)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(1, config.steps), eta_min=0.05 * config.lr * lr_factor) if config.cosine_decay else None
    net.train()
    last = float("nan")
    with progress_bar("train cost net", config.steps, progress) as advance:
        for _ in range(config.steps):
            pick = rng.integers(0, len(samples), size=min(config.batch_size, len(samples)))
            loss = _loss(net, _collate(feats, [samples[i] for i in pick]), config.relative_loss_weight)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if sched is not None:
                sched.step()
            last = loss.item()
            advance(1)
    net.eval()
    ev = {k: _clean(v) for k, v in evaluate_cost_net(net, pool, test_recs).items()}
    metrics = CostMetrics(
        n_train=len(train_recs), n_test=len(test_recs), train_loss=last if math.isfinite(last) else None, **ev
    )
    return net, metrics
