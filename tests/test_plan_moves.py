"""What a new plan moves: the moved tables' weights and optimizer state, and the time
to send them at the new plan's recorded all-to-all rate. Failed before: the diff counted weights only, no time."""

from __future__ import annotations

import pytest

from dreamshard.inventory.synth import synth_inventory
from dreamshard.placement.device_memory import ADAM_STATES
from dreamshard.placement.diff import move_rate_ms_per_mb, plan_diff
from dreamshard.sharders import get_sharder
from dreamshard.values import GB, CommModel, Topology, named_world


def test_a_move_counts_optimizer_state_and_its_time_at_the_plans_rate() -> None:
    inv = synth_inventory(8, 3, name="moves")
    topo = Topology(num_devices=2, memory_per_device_gb=16.0, optimizer="adam")
    old = get_sharder("size_greedy").shard(inv, topo)
    new = get_sharder("round_robin").shard(inv, topo)
    fit = CommModel(alpha_ms=0.1, beta_ms_per_mb=0.5, backend="gloo", world_size=2)
    new = new.model_copy(update={"comm_fits": (fit,)})
    d = plan_diff(old, new, inv)
    assert d.moved and d.kept + len(d.moved) == 8
    weights = sum(inv.by_name()[t].size_bytes for t in d.moved) / GB
    assert d.moved_gb == pytest.approx(weights)
    assert d.moved_state_gb == pytest.approx(ADAM_STATES * weights)  # adam: two states per weight
    assert d.ms_per_mb == 0.5 and d.move_ms == pytest.approx((1 + ADAM_STATES) * weights * GB / 1e6 * 0.5)
    assert "optimizer state" in d.summary and "ms to send at 0.500 ms/MB" in d.summary
    same = plan_diff(old, old, inv)
    assert not same.moved and same.move_ms == 0.0 and "ms to send" not in same.summary


def test_without_a_recorded_fit_the_rate_is_the_worlds() -> None:
    inv = synth_inventory(4, 1, name="rate")
    plan = get_sharder("size_greedy").shard(inv, Topology(num_devices=2, memory_per_device_gb=16.0))
    plan = plan.model_copy(update={"comm_fits": ()})
    assert move_rate_ms_per_mb(plan) == 0.5  # the labelled default
    fast = plan.model_copy(update={"topology": plan.topology.in_world(named_world("fast"))})
    assert move_rate_ms_per_mb(fast) == 0.1
