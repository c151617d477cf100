"""Fit the cost ensemble on measurement records (profile singles + placements; docs/architecture/learning.md,
"Learning").

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

import numpy as np
import torch

from dreamshard.config.learning import CostTrainConfig
from dreamshard.errors import ModelError
from dreamshard.learning.cost_eval import CostMetrics, clean_metric, evaluate_cost_net
from dreamshard.learning.cost_model import NUM_DEVICE_COSTS, CostEnsemble, CostNet, CostNetSpec
from dreamshard.learning.cost_samples import Batch, Sample, collate, to_samples
from dreamshard.learning.model_store import first_non_finite, warm_start
from dreamshard.learning.progress import Advance, progress_bar
from dreamshard.learning.records import check_record
from dreamshard.learning.threads import single_threaded
from dreamshard.values import Inventory, Measurement
from dreamshard.values.progress import Progress


def _target_scale(samples: Sequence[Sample]) -> torch.Tensor:
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


def _loss(net: CostNet, batch: Batch, relative_weight: float = 0.0) -> torch.Tensor:
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
def _fit_member(
    net: CostNet,
    feats: torch.Tensor,
    samples: Sequence[Sample],
    config: CostTrainConfig,
    seed: int,
    lr_factor: float,
    advance: Advance,
    label: str = "",
) -> float:
    """`config.steps` Adam steps on minibatches drawn from `samples` (already the member's resample)."""
    rng = np.random.default_rng(seed)
    opt = torch.optim.Adam(net.parameters(), lr=config.lr * lr_factor)
    sched = (
        torch.optim.lr_scheduler.CosineAnnealingLR(
            opt, T_max=max(1, config.steps), eta_min=0.05 * config.lr * lr_factor
        )
        if config.cosine_decay
        else None
    )
    net.train()
    last = float("nan")
    for _ in range(config.steps):
        pick = rng.integers(0, len(samples), size=min(config.batch_size, len(samples)))
        loss = _loss(net, collate(feats, [samples[i] for i in pick]), config.relative_loss_weight)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if sched is not None:
            sched.step()
        last = loss.item()
        advance(1, f"{label}loss {last:.4g}")
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
    report: Progress | None = None,
) -> tuple[CostEnsemble, CostMetrics]:
    """Train (or continue training `init`) an ensemble on the records and report held-out metrics. Every record
    is checked first (dreamshard.learning.records.check_record: TrainingDataError); a fit that diverges to
    non-finite weights is a ModelError. `report` gets a line per step: the step, the member and its loss."""
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
        raise ModelError(
            f"cost ensemble has {ens.size} members, config asks for {config.ensemble_size}; retrain from scratch"
        )
    feats, samples, _ = to_samples(pool, train_recs)
    losses = []
    with progress_bar("cost ensemble step", config.steps * ens.size, progress, report) as advance:
        for k, net in enumerate(ens.nets):
            if init is None:  # a warm-started net keeps the scale its outputs were trained in
                net.target_scale.copy_(_target_scale(samples))
            torch.manual_seed(config.seed * 1009 + k)
            member = samples
            if config.bootstrap and ens.size > 1:
                pick = np.random.default_rng([config.seed, k, 7]).integers(0, len(samples), size=len(samples))
                member = [samples[i] for i in pick]
            label = f"member {k + 1}/{ens.size}, " if ens.size > 1 else ""
            losses.append(_fit_member(net, feats, member, config, config.seed * 7919 + k, lr_factor, advance, label))
    ens.eval()
    bad = first_non_finite(ens)
    if bad is not None:
        raise ModelError(
            f"cost training diverged: weight '{bad}' is not finite after {config.steps} steps at lr "
            f"{config.lr * lr_factor:g}; lower train_cost.lr (or train.cost.lr)"
        )
    ev = {k: clean_metric(v) for k, v in evaluate_cost_net(ens, pool, test_recs).items()}
    last = float(np.mean(losses))
    metrics = CostMetrics.model_validate(  # the held-out figures are validated as the model's fields
        {
            "n_train": len(train_recs),
            "n_test": len(test_recs),
            "ensemble_size": ens.size,
            "train_loss": last if math.isfinite(last) else None,
            **ev,
        }
    )
    return ens, metrics
