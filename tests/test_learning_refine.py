"""Local-search refinement over the cost estimator: never worse, keeps memory limits, fixes bad plans."""

from __future__ import annotations

import torch
from toy_cost import ToyCost

from dreamshard.inventory.synth import synth_inventory
from dreamshard.learning.policy import Policy, plan_with_policy
from dreamshard.placement.validate import check_placement
from dreamshard.search.local import refine_placement
from dreamshard.values import Topology


def _max_total(toy: ToyCost, states: torch.Tensor, devices: list[int], n_dev: int) -> float:
    dev = torch.zeros(n_dev, states.shape[1]).index_add_(0, torch.tensor(devices), states)
    return float(toy.device_costs(dev).sum(-1).max())


def test_refine_repairs_an_all_on_one_device_plan():
    toy = ToyCost()
    inv = synth_inventory(24, seed=3)
    states = toy.encode(inv.tables)
    topo = Topology(num_devices=4, memory_per_device_gb=64.0)
    start = [0] * len(inv.tables)
    out = refine_placement(toy, states, [t.size_bytes for t in inv.tables], start, topo, max_rounds=200)
    before, after = _max_total(toy, states, start, 4), _max_total(toy, states, out, 4)
    assert after < 0.5 * before


def test_refine_never_worsens_and_respects_memory():
    toy = ToyCost()
    inv = synth_inventory(30, seed=5)
    sizes = [t.size_bytes for t in inv.tables]
    # memory so tight that only some moves are legal
    cap_gb = max(sum(sizes) / 3 / 2**30 * 1.15, max(sizes) / 2**30 * 1.01)
    topo = Topology(num_devices=3, memory_per_device_gb=cap_gb)
    torch.manual_seed(0)
    policy = Policy()
    ep = plan_with_policy(policy, toy, inv.tables, topo)
    tables = ep.mdp.tables
    states = toy.encode(tables)
    acts = [ep.placement[t.name] for t in tables]
    out = refine_placement(toy, states, [t.size_bytes for t in tables], acts, topo, max_rounds=50, min_gain=0.0)
    assert _max_total(toy, states, out, 3) <= _max_total(toy, states, acts, 3) + 1e-6
    check_placement(inv, {t.name: d for t, d in zip(tables, out, strict=True)}, topo)


def test_refine_zero_rounds_is_identity():
    toy = ToyCost()
    inv = synth_inventory(10, seed=1)
    acts = [i % 2 for i in range(10)]
    out = refine_placement(
        toy,
        toy.encode(inv.tables),
        [t.size_bytes for t in inv.tables],
        acts,
        Topology(num_devices=2, memory_per_device_gb=64.0),
        max_rounds=0,
    )
    assert out == acts
