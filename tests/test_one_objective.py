"""One objective: a learned sharder that has the backend which will judge its plans (an oracle: verification,
refinement, calibration, the gate) plans with that backend's collective fits, so its predicted communication is
the one the measurement charges; without one it uses the model card's fits."""

from __future__ import annotations

import pytest

from dreamshard.inventory.synth import synth_inventory
from dreamshard.measured.calibrate import calibrate
from dreamshard.placement.expand import expand_plan
from dreamshard.profiling.oracle import Oracle
from dreamshard.profiling.simulator import SimulatorBackend, SimulatorParams
from dreamshard.search.sharders import DreamShardSharder
from dreamshard.sharders import get_sharder
from dreamshard.values import Inventory, Plan, Topology

TOPO = Topology(num_devices=3, memory_per_device_gb=16.0, batch_size=2048)


@pytest.fixture(scope="module")
def inv() -> Inventory:
    return synth_inventory(14, 5, name="objective")


def _oracle() -> Oracle:
    """A backend whose collectives are far slower than the card's fits (so the two objectives differ)."""
    return Oracle(SimulatorBackend(SimulatorParams(alpha_ms=3.0, beta_ms_per_mb=9.0)), warmup=0, repeats=1)


def _measured_comm(inv: Inventory, plan: Plan, oracle: Oracle) -> list[float]:
    units, placement = expand_plan(inv, plan)
    return [d.fwd_comm for d in oracle.measure(units, placement, plan.topology).costs.per_device]


def test_with_an_oracle_the_predicted_exchange_is_the_measured_one(inv: Inventory) -> None:
    oracle = _oracle()
    plan = get_sharder("dreamshard", oracle=oracle).shard(inv, TOPO)
    measured = _measured_comm(inv, plan, oracle)
    predicted = [d.fwd_comm for d in plan.predicted.per_device]
    assert predicted == pytest.approx(measured, rel=1e-6)


def test_without_an_oracle_the_card_fits_are_used(inv: Inventory) -> None:
    oracle = _oracle()
    plan = get_sharder("dreamshard").shard(inv, TOPO)
    measured = _measured_comm(inv, plan, oracle)
    predicted = [d.fwd_comm for d in plan.predicted.per_device]
    assert max(p / m for p, m in zip(predicted, measured, strict=True)) < 0.8  # the card's gloo fits, not these


def test_the_calibrated_cost_keeps_the_backends_collectives(inv: Inventory) -> None:
    oracle = _oracle()
    sharder = get_sharder("dreamshard", oracle=oracle)
    assert isinstance(sharder, DreamShardSharder)
    base = sharder.planning_cost(TOPO)
    assert base.comm == oracle.comm_model(TOPO)
    calibrated, _ = calibrate(inv, TOPO, base, oracle, seconds=0.5)
    assert calibrated.source is oracle and calibrated.comm == base.comm
