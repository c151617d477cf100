"""The cost network learns a KNOWN non-additive cost (dreamshard.learning.toy.ToyCost: a per-device kernel
overhead paid once, plus compute superlinear in the device's combined lookups).

Bound: an additive model (device cost = sum of the measured single-table costs, what a per-table proxy
assumes) is wrong by the shared overhead and the superlinear term; the cost net sees the same singles
plus placements and must be at least twice as accurate on held-out placements, below 15% MAPE overall,
and rank held-out placements almost perfectly (Spearman > 0.9).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dreamshard.errors import ModelError
from dreamshard.inventory.synth import synth_inventory
from dreamshard.learning.configs import CostTrainConfig
from dreamshard.learning.cost_model import CostNet, predict_costs
from dreamshard.learning.metrics import mape
from toy_cost import ToyCost, toy_measurements
from dreamshard.learning.train_cost import split_records, train_cost_model

CFG = CostTrainConfig(steps=800, lr=3e-3, test_fraction=0.25, seed=0)


@pytest.fixture(scope="module")
def fitted():
    torch.manual_seed(0)
    pool = synth_inventory(80, seed=2)
    toy = ToyCost()
    records = toy_measurements(pool, toy, num_placements=240, num_devices=4, tables_per_task=(10, 30), seed=0)
    net, metrics = train_cost_model(pool, records, CFG, progress=False)
    return pool, toy, records, net, metrics


def test_fits_non_additive_cost_better_than_additive_baseline(fitted):
    pool, toy, records, net, metrics = fitted
    _, test = split_records(records, CFG.test_fraction, CFG.seed)
    assert metrics.n_test == len(test) == 60
    # additive baseline: a device costs the sum of its tables' measured single-table totals
    single = {next(iter(m.placement)): m.costs.per_device[0].total for m in records if m.kind == "single"}
    add_overall, true_overall = [], []
    for m in test:
        dev = [0.0] * m.topology.num_devices
        for t, d in m.placement.items():
            dev[d] += single[t]
        add_overall.append(max(dev))
        true_overall.append(m.overall_ms)
    additive_mape = mape(np.array(add_overall), np.array(true_overall))
    print(f"held-out: net MAPE overall {metrics.mape_overall:.3f}, per-device {metrics.mape_device_total:.3f}, "
          f"Spearman {metrics.spearman_overall:.3f}; additive baseline MAPE {additive_mape:.3f}")
    assert metrics.mape_overall is not None and metrics.mape_overall < 0.15
    assert metrics.mape_device_total is not None and metrics.mape_device_total < 0.15
    assert metrics.mape_overall < 0.5 * additive_mape
    assert metrics.spearman_overall is not None and metrics.spearman_overall > 0.9


def test_any_number_of_tables_and_devices(fitted):
    pool, toy, _, net, _ = fitted
    for d, k in ((1, 1), (3, 7), (8, 40)):
        tables = list(pool.tables[:k])
        placement = {t.name: i % d for i, t in enumerate(tables)}
        pred = predict_costs(net, tables, placement, d)
        true = toy.costs(tables, placement, d)
        assert len(pred.per_device) == d
        assert pred.overall_ms > 0
        assert abs(pred.overall_ms - true.overall_ms) / true.overall_ms < 0.5
    # empty device predicts exactly zero
    pred = predict_costs(net, list(pool.tables[:2]), {pool.tables[0].name: 0, pool.tables[1].name: 0}, 3)
    assert pred.per_device[2].total == 0.0


def test_continues_from_init_and_rejects_mismatched_architecture(fitted):
    pool, _, records, net, _ = fitted
    cfg = CFG.model_copy(update={"steps": 5})
    net2, _ = train_cost_model(pool, records, cfg, init=net, progress=False)
    assert net2 is net
    with pytest.raises(ModelError, match="architecture"):
        train_cost_model(pool, records, cfg.model_copy(update={"latent": 8}), init=CostNet(), progress=False)


def test_unknown_table_in_records_is_a_typed_error(fitted):
    pool, _, records, _, _ = fitted
    other = synth_inventory(5, seed=9, name="other")
    with pytest.raises(ModelError, match="not in pool"):
        train_cost_model(other.model_copy(update={"tables": other.tables}), records[:3] + records[-3:], CFG, progress=False)
