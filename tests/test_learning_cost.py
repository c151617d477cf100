"""The cost ensemble learns a KNOWN non-additive cost (tests/toy_cost.ToyCost: a per-device kernel
overhead paid once, plus compute superlinear in the device's combined lookups), and knows where it is unsure.

Bound: an additive model (device cost = sum of the measured single-table costs, what a per-table proxy
assumes) is wrong by the shared overhead and the superlinear term; the cost net sees the same singles
plus placements and must be at least twice as accurate on held-out placements, below 15% MAPE overall,
and rank held-out placements almost perfectly (Spearman > 0.9).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from toy_cost import ToyCost, toy_measurements

from dreamshard.config.learning import CostTrainConfig
from dreamshard.errors import ModelError
from dreamshard.inventory.synth import synth_inventory
from dreamshard.learning.cost_model import CostEnsemble
from dreamshard.learning.metrics import mape
from dreamshard.learning.planning_cost import PlanningCost
from dreamshard.learning.train_cost import split_records, train_cost_model
from dreamshard.values import Topology

CFG = CostTrainConfig(steps=500, lr=3e-3, test_fraction=0.25, seed=0, ensemble_size=3)


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
    print(
        f"held-out: net MAPE overall {metrics.mape_overall:.3f}, per-device {metrics.mape_device_total:.3f}, "
        f"Spearman {metrics.spearman_overall:.3f}; additive baseline MAPE {additive_mape:.3f}"
    )
    assert metrics.mape_overall is not None and metrics.mape_overall < 0.15
    assert metrics.mape_device_total is not None and metrics.mape_device_total < 0.15
    assert metrics.mape_overall < 0.5 * additive_mape
    assert metrics.spearman_overall is not None and metrics.spearman_overall > 0.9


def test_any_number_of_tables_and_devices(fitted):
    pool, toy, _, net, _ = fitted
    for d, k in ((1, 1), (3, 7), (8, 40)):
        tables = list(pool.tables[:k])
        placement = {t.name: i % d for i, t in enumerate(tables)}
        pred = PlanningCost(net, Topology(num_devices=d, memory_per_device_gb=64)).predict(tables, placement)
        true = toy.costs(tables, placement, d)
        assert len(pred.per_device) == d
        assert pred.overall_ms > 0
        assert abs(pred.overall_ms - true.overall_ms) / true.overall_ms < 0.5
    # empty device predicts exactly zero
    cost = PlanningCost(net, Topology(num_devices=3, memory_per_device_gb=64))
    pred = cost.predict(list(pool.tables[:2]), {pool.tables[0].name: 0, pool.tables[1].name: 0}, pessimistic=True)
    assert pred.per_device[2].total == 0.0 and pred.per_device[1].total == 0.0


def test_continues_from_init_and_rejects_mismatched_architecture(fitted):
    pool, _, records, net, _ = fitted
    cfg = CFG.model_copy(update={"steps": 5})
    net2, _ = train_cost_model(pool, records, cfg, init=net, progress=False)
    assert net2 is net
    with pytest.raises(ModelError, match="architecture"):
        train_cost_model(pool, records, cfg.model_copy(update={"latent": 8}), init=CostEnsemble(), progress=False)
    with pytest.raises(ModelError, match="members"):
        train_cost_model(pool, records, cfg.model_copy(update={"ensemble_size": 2}), init=net, progress=False)


def test_unknown_table_in_records_is_a_typed_error(fitted):
    pool, _, records, _, _ = fitted
    other = synth_inventory(5, seed=9, name="other")
    with pytest.raises(ModelError, match="not in pool"):
        train_cost_model(
            other.model_copy(update={"tables": other.tables}), records[:3] + records[-3:], CFG, progress=False
        )


def test_ensemble_is_less_sure_of_crowded_devices_than_of_familiar_ones():
    """Members trained only on devices holding 1-6 tables agree there and disagree on 40-table devices."""
    pool = synth_inventory(120, seed=4)
    toy = ToyCost()
    records = toy_measurements(pool, toy, num_placements=200, num_devices=4, tables_per_task=(4, 24), seed=1)
    cfg = CFG.model_copy(update={"steps": 400, "test_fraction": 0.0})
    ens, metrics = train_cost_model(pool, records, cfg, progress=False)
    cost = PlanningCost(ens, Topology(num_devices=1, memory_per_device_gb=64))
    rng = np.random.default_rng(0)

    def relative_spread(k: int) -> float:
        out = []
        for _ in range(20):
            tables = [pool.tables[i] for i in rng.choice(pool.num_tables, size=k, replace=False)]
            with torch.no_grad():
                dev = cost.placement_states(tables, {t.name: 0 for t in tables})
                out.append(float(cost.spread(dev)[0] / cost.mean_device_costs(dev)[0].sum()))
        return float(np.mean(out))

    familiar, crowded = relative_spread(4), relative_spread(60)
    print(f"relative member spread: 4 tables {familiar:.3f}, 60 tables {crowded:.3f}")
    assert crowded > 2 * familiar
    # the pessimistic cost is above the mean exactly by risk x spread on compute
    tables = list(pool.tables[:60])
    with torch.no_grad():
        dev = cost.placement_states(tables, {t.name: 0 for t in tables})
        gap = float(cost.device_costs(dev)[0].sum() - cost.mean_device_costs(dev)[0].sum())
        assert gap > 0


def test_regime_errors_are_reported(fitted):
    _, _, _, _, metrics = fitted
    labels = {r.regime for r in metrics.regimes}
    assert any("tables" in x for x in labels) and any("pooling" in x for x in labels)
    assert all(r.devices > 0 for r in metrics.regimes)
