"""Fit the cost ensemble on measurement records (profile singles + placements).

Every record contributes all its devices (per-device four costs; empty devices are skipped in the
device loss because the network predicts exactly 0 for them) and its overall cost. A seeded share of
the *placement* records is held out for CostMetrics; singles always train. Each ensemble member is fit on
its own bootstrap resample of the training records (seeded), so the members agree where the data is dense
and disagree where it is thin. Held-out error is reported overall, per cost component and per regime
(tables per device, pooling range), with the ensemble's spread in each regime.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict

from dreamshard.config.learning import CostTrainConfig
from dreamshard.errors import ModelError, PlanError
from dreamshard.learning.cost_model import COMM, COMPUTE, NUM_DEVICE_COSTS, CostEnsemble, CostNet, CostNetSpec
from dreamshard.learning.features import tables_features
from dreamshard.learning.metrics import mape, spearman
from dreamshard.learning.model_store import first_non_finite, warm_start
from dreamshard.learning.progress import progress_bar
from dreamshard.learning.records import check_record
from dreamshard.learning.threads import single_threaded
from dreamshard.placement.expand import unit_table
from dreamshard.values import Inventory, Measurement, Table, parse_unit


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


@dataclass(frozen=True)
class _Sample:
    table_idx: np.ndarray  # (T,) the tables' positions in the pool
    feat_idx: np.ndarray  # (T,) their rows of the feature matrix (a table at the record's batch size)
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


def _to_samples(pool: Inventory, records: Sequence[Measurement]) -> tuple[torch.Tensor, list[_Sample], list[Table]]:
    """The feature matrix (one row per table and batch size the records measured it at), one sample per record,
    and the tables the samples index: the pool's, then the units records measured (column shards, row shards,
    replicas: dreamshard.placement.expand.unit_table), a replica at its share of the batch as planning features it
    (dreamshard.learning.planning_cost)."""
    tables = list(pool.tables)
    by_name = pool.by_name()
    index = {t.name: i for i, t in enumerate(tables)}
    replicas: set[int] = set()  # indices of data-parallel replicas (featured at their share of the batch)
    rows: dict[tuple[int, float], int] = {}  # (table index, batch size) -> feature row
    out: list[_Sample] = []
    for m in records:
        names = list(m.placement)
        for n in names:
            if n in index:
                continue
            ref = parse_unit(n)
            if ref.table not in by_name:
                raise ModelError(
                    f"measurement {m.measurement_id} places table '{n[:80]}', which is not in pool "
                    f"'{pool.name}'; train on the inventory that was profiled"
                )
            try:
                tables.append(unit_table(by_name, n))
            except PlanError as e:
                raise ModelError(f"measurement {m.measurement_id}: {e}") from None
            index[n] = len(tables) - 1
            if ref.kind == "replica":
                replicas.add(index[n])
        D = m.topology.num_devices
        if len(m.costs.per_device) != D:
            raise ModelError(f"measurement {m.measurement_id} has {len(m.costs.per_device)} device costs for {D} devices")
        idx = [index[n] for n in names]
        batch = m.topology.batch_size
        at = [batch / D if i in replicas else float(batch) for i in idx]
        out.append(
            _Sample(
                table_idx=np.array(idx, dtype=np.int64),
                feat_idx=np.array([rows.setdefault((i, b), len(rows)) for i, b in zip(idx, at)], dtype=np.int64),
                device=np.array([m.placement[n] for n in names], dtype=np.int64),
                num_devices=D,
                dev_targets=np.array([d.as_list() for d in m.costs.per_device], dtype=np.float32),
                overall=float(m.costs.overall_ms),
            )
        )
    keys = list(rows)  # insertion order = row order
    feats = tables_features([tables[i] for i, _ in keys], [b for _, b in keys])
    return torch.from_numpy(feats), out, tables


def _collate(feats: torch.Tensor, samples: Sequence[_Sample]) -> _Batch:
    idx, tdev, dplace, targets, overall = [], [], [], [], []
    offset = 0
    for b, s in enumerate(samples):
        idx.append(s.feat_idx)
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


#: regimes of held-out error: (label, lo, hi) on tables per device, and on the device's mean pooling factor
TABLE_COUNT_REGIMES: tuple[tuple[str, float, float], ...] = (
    ("1 table", 1, 1), ("2-5 tables", 2, 5), ("6-15 tables", 6, 15), ("16-30 tables", 16, 30),
    ("31-60 tables", 31, 60), (">60 tables", 61, math.inf),
)
POOLING_REGIMES: tuple[tuple[str, float, float], ...] = (
    ("pooling <= 1", 0, 1.0), ("pooling 1-10", 1.0, 10.0), ("pooling 10-50", 10.0, 50.0), ("pooling > 50", 50.0, math.inf),
)


def _member_predictions(ens: CostEnsemble, b: _Batch) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(K, Ndev, 4) device costs ms, (K, B) overall ms from the overall heads, (Ndev,) non-empty mask."""
    devs, overalls = [], []
    nonempty = None
    for net in ens.members:
        dev_pred, overall_pred, nonempty = net.forward_flat(
            b.feats, b.table_device, b.num_devices_total, b.device_placement, b.num_placements
        )
        devs.append((dev_pred * net.target_scale[:NUM_DEVICE_COSTS]).clamp_min(0).numpy())
        overalls.append((overall_pred * net.target_scale[-1]).clamp_min(0).numpy())
    assert nonempty is not None
    return np.stack(devs), np.stack(overalls), nonempty.numpy()


def _regime_rows(
    label_lo_hi: Sequence[tuple[str, float, float]], key: np.ndarray, pred: np.ndarray, true: np.ndarray, spread: np.ndarray
) -> list[RegimeError]:
    rows = []
    comp = list(COMPUTE)
    for label, lo, hi in label_lo_hi:
        sel = (key >= lo) & (key <= hi)
        if not sel.any():
            continue
        p, t = pred[sel], true[sel]
        pc, tc = p[:, comp].sum(1), t[:, comp].sum(1)
        rows.append(RegimeError(
            regime=label, devices=int(sel.sum()), mape_compute=_finite(mape(pc, tc)),
            mape_total=_finite(mape(p.sum(1), t.sum(1))),
            spread=_finite(float(np.mean(spread[sel] / np.maximum(pc, 1e-9)))),
        ))
    return rows


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


@single_threaded
def evaluate_cost_net(ens: CostEnsemble, pool: Inventory, records: Sequence[Measurement]) -> dict[str, object]:
    """MAPE (overall, device totals, each component), Spearman of overall costs and per-regime errors of the
    ensemble mean over `records`."""
    if not records:
        return {}
    feats, samples, tables = _to_samples(pool, records)
    with torch.no_grad():
        b = _collate(feats, samples)
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
    pf_sum = np.bincount(b.table_device.numpy(), weights=pool_pf[np.concatenate([s.table_idx for s in samples])],
                         minlength=b.num_devices_total)
    mean_pf = pf_sum / np.maximum(counts, 1.0)
    regimes = _regime_rows(TABLE_COUNT_REGIMES, counts[ne], dev_ms[ne], true_dev[ne], spread[ne])
    regimes += _regime_rows(POOLING_REGIMES, mean_pf[ne], dev_ms[ne], true_dev[ne], spread[ne])
    return {
        "mape_overall_from_devices": mape(from_devices, b.overall.numpy()),
        "mape_overall": mape(overall_ms, b.overall.numpy()),
        "mape_device_total": mape(dev_ms[ne].sum(1), true_dev[ne].sum(1)),
        "mape_device_total_planning": mape(dev_ms[ne][:, comp].sum(1) + true_dev[ne][:, list(COMM)].sum(1),
                                           true_dev[ne].sum(1)),
        "mape_device_compute": mape(dev_ms[ne][:, comp].sum(1), true_dev[ne][:, comp].sum(1)),
        "mape_device_components": tuple(mape(dev_ms[ne][:, k], true_dev[ne][:, k]) for k in range(NUM_DEVICE_COSTS)),
        "spearman_overall": spearman(from_devices, b.overall.numpy()) if len(records) > 1 else None,
        "regimes": tuple(regimes),
    }


def _clean(v: object) -> object:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, tuple) and all(x is None or isinstance(x, float) for x in v):
        return tuple(None if (x is None or not math.isfinite(x)) else x for x in v)
    return v


def _fit_member(
    net: CostNet, feats: torch.Tensor, samples: Sequence[_Sample], config: CostTrainConfig, seed: int, lr_factor: float,
    advance: object,
) -> float:
    """`config.steps` Adam steps on minibatches drawn from `samples` (already the member's resample)."""
    rng = np.random.default_rng(seed)
    opt = torch.optim.Adam(net.parameters(), lr=config.lr * lr_factor)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(
        opt, T_max=max(1, config.steps), eta_min=0.05 * config.lr * lr_factor) if config.cosine_decay else None
    net.train()
    last = float("nan")
    for _ in range(config.steps):
        pick = rng.integers(0, len(samples), size=min(config.batch_size, len(samples)))
        loss = _loss(net, _collate(feats, [samples[i] for i in pick]), config.relative_loss_weight)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if sched is not None:
            sched.step()
        last = loss.item()
        advance(1)  # type: ignore[operator]
    net.eval()
    return last


@single_threaded
def require_one_backend(records: Sequence[Measurement]) -> None:
    """A cost model learns one backend's costs: simulated and measured records (or cpu and cuda) never mix."""
    counts = Counter(m.backend.name for m in records)
    if len(counts) > 1:
        found = ", ".join(f"{n} from '{b}'" for b, n in sorted(counts.items()))
        raise ModelError(
            f"the measurements mix backends ({found}); a cost model learns one backend's costs: "
            "train on one backend's records (profile each backend into its own file)"
        )


def train_cost_model(
    pool: Inventory,
    measurements: Sequence[Measurement],
    config: CostTrainConfig,
    init: CostEnsemble | None = None,
    progress: bool = True,
    lr_factor: float = 1.0,
) -> tuple[CostEnsemble, CostMetrics]:
    """Train (or continue training `init`) an ensemble on the records and report held-out metrics. Every record
    is checked first (dreamshard.learning.records.check_record: TrainingDataError); a fit that diverges to
    non-finite weights is a ModelError."""
    records = [m for m in measurements if config.use_singles or m.kind == "placement"]
    if not records:
        raise ModelError("no measurement records to train the cost model on: run `dreamshard profile` first")
    for m in records:
        check_record(m)
    require_one_backend(records)
    train_recs, test_recs = split_records(records, config.test_fraction, config.seed)
    torch.manual_seed(config.seed)
    spec = CostNetSpec(hidden=config.hidden, latent=config.latent, head_hidden=config.head_hidden)
    ens = warm_start(init, spec, lambda sp: CostEnsemble(sp, config.ensemble_size), "cost net")
    if ens.size != config.ensemble_size:
        raise ModelError(f"cost ensemble has {ens.size} members, config asks for {config.ensemble_size}; retrain from scratch")
    feats, samples, _ = _to_samples(pool, train_recs)
    losses = []
    with progress_bar("train cost ensemble", config.steps * ens.size, progress) as advance:
        for k, net in enumerate(ens.members):
            if init is None:  # a warm-started net keeps the scale its outputs were trained in
                net.target_scale.copy_(_target_scale(samples))
            torch.manual_seed(config.seed * 1009 + k)
            member = samples
            if config.bootstrap and ens.size > 1:
                pick = np.random.default_rng([config.seed, k, 7]).integers(0, len(samples), size=len(samples))
                member = [samples[i] for i in pick]
            losses.append(_fit_member(net, feats, member, config, config.seed * 7919 + k, lr_factor, advance))
    ens.eval()
    bad = first_non_finite(ens)
    if bad is not None:
        raise ModelError(f"cost training diverged: weight '{bad}' is not finite after {config.steps} steps at lr "
                         f"{config.lr * lr_factor:g}; lower train_cost.lr (or train.cost.lr)")
    ev = {k: _clean(v) for k, v in evaluate_cost_net(ens, pool, test_recs).items()}
    last = float(np.mean(losses))
    metrics = CostMetrics(
        n_train=len(train_recs), n_test=len(test_recs), ensemble_size=ens.size,
        train_loss=last if math.isfinite(last) else None, **ev,
    )
    return ens, metrics
