"""Calibration at plan time (dreamshard.measured.calibrate): on a backend with a per-table bias the model cannot
know, the probes recover the bias, the corrected cost predicts better, and the calibrated plan measures faster."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from dreamshard.cli.app import invoke
from dreamshard.documents import load_plan, save_inventory
from dreamshard.errors import ConfigError
from dreamshard.inventory.synth import synth_inventory
from dreamshard.measured.calibrate import calibrate
from dreamshard.placement.expand import expand_plan
from dreamshard.profiling.oracle import Oracle
from dreamshard.profiling.simulator import SimulatorBackend
from dreamshard.search.sharders import DreamShardSharder
from dreamshard.sharders import get_sharder
from dreamshard.values import Inventory, Plan, Table, Topology

TOPO = Topology(num_devices=2, memory_per_device_gb=16.0, batch_size=2048)


class BiasedSimulator(SimulatorBackend):
    """The simulator, with `bias` ms more forward and backward compute for each named table on a device."""

    def __init__(self, bias: dict[str, float]) -> None:
        super().__init__()
        self.bias = bias

    def compute_ms(self, tables: Sequence[Table], batch_size: int) -> tuple[float, float]:
        fwd, bwd = super().compute_ms(tables, batch_size)
        extra = sum(self.bias.get(t.name, 0.0) for t in tables)
        return fwd + extra, bwd + extra


def _oracle(bias: dict[str, float]) -> Oracle:
    return Oracle(BiasedSimulator(bias), warmup=0, repeats=1)


def _measured(inv: Inventory, plan: Plan, oracle: Oracle) -> float:
    units, placement = expand_plan(inv, plan)
    return oracle.measure(units, placement, TOPO).costs.overall_ms


@pytest.fixture(scope="module")
def case() -> tuple[Inventory, list[str], float]:
    """12 tables, and the two the uncalibrated plan puts together on device 0: those get the bias."""
    inv = synth_inventory(12, 3, name="calib")
    plain = get_sharder("dreamshard").shard(inv, TOPO)
    together = [t for t, d in plain.placement.items() if d == 0][:2]
    typical = Oracle(SimulatorBackend()).measure(inv, plain.placement, TOPO).costs.overall_ms
    return inv, together, typical


def test_probes_recover_a_per_table_bias(case: tuple[Inventory, list[str], float]) -> None:
    inv, biased, typical = case
    oracle = _oracle(dict.fromkeys(biased, typical))
    sharder = get_sharder("dreamshard")
    assert isinstance(sharder, DreamShardSharder)
    cost, report = calibrate(inv, TOPO, sharder.planning_cost(TOPO), oracle, seconds=2.0)
    bias = {n: sum(b) / 2 for n, b in cost.correction.bias.items()}
    top = sorted(bias, key=lambda n: -bias[n])[:2]
    assert set(top) == set(biased), bias
    assert all(bias[n] > 0.5 * typical for n in biased), (bias, typical)
    assert report.probes >= 12 + 6 and report.placements >= 3  # each table alone, then at least two partitions
    assert report.mape_after < 0.5 * report.mape_before, report  # the held-out partition: error at least halved


def test_the_calibrated_plan_is_measurably_better(case: tuple[Inventory, list[str], float]) -> None:
    inv, biased, typical = case
    oracle = _oracle(dict.fromkeys(biased, typical))
    plain = get_sharder("dreamshard").shard(inv, TOPO)
    calibrated = get_sharder("dreamshard", oracle=oracle, calibrate_seconds=2.0).shard(inv, TOPO)
    assert calibrated.calibration is not None and calibrated.calibration.backend == "simulator"
    assert calibrated.placement[biased[0]] != calibrated.placement[biased[1]]  # the two biased tables apart
    assert _measured(inv, calibrated, oracle) < 0.9 * _measured(inv, plain, oracle)


def test_plan_records_the_calibration_through_the_cli(tmp_path: Path) -> None:
    inv = tmp_path / "inv.yaml"
    save_inventory(synth_inventory(8, 1, name="cli"), inv)
    out = tmp_path / "plan.json"
    args = ["plan", "-i", str(inv), "-s", "dreamshard", "-o", str(out), "--backend", "simulator", "--devices", "2"]
    code, _, err = invoke([*args, "--calibrate-seconds", "0.3"])
    assert code == 0, err
    report = load_plan(out).calibration
    assert report is not None and report.probes >= 8 and report.seconds < 30
    code, _, err = invoke([*args[:4], "dim_greedy", *args[5:], "--calibrate-seconds", "1"])
    assert code == 2 and "--calibrate-seconds" in err and len(err.strip().splitlines()) == 1


def test_calibrate_seconds_is_bounded() -> None:
    with pytest.raises(ConfigError, match="calibrate_seconds must be in"):
        get_sharder("dreamshard", calibrate_seconds=-1.0)


def test_calibration_never_worsens_the_held_out_error(case: tuple[Inventory, list[str], float]) -> None:
    """Each form of the fit is judged on the held-out probe placement; a noisy backend gets the simpler form."""
    inv, _, _ = case
    sharder = get_sharder("dreamshard")
    assert isinstance(sharder, DreamShardSharder)
    for oracle in (Oracle(SimulatorBackend()), _oracle({inv.tables[0].name: 0.5})):
        _, report = calibrate(inv, TOPO, sharder.planning_cost(TOPO), oracle, seconds=1.0)
        assert report.mape_after <= report.mape_before and report.fit in (
            "none",
            "scale",
            "scale+bias",
            "scale+shrunk bias",
        )


def test_verified_calibration_starts_from_the_uncalibrated_plan_and_keeps_a_confirmed_gain() -> None:
    """With verification, the search before calibration is the search-only row (the default) and the calibrated
    search's plan replaces it only by winning every round by the margin: here it does (the biased tables apart)."""
    inv = synth_inventory(12, 3, name="calib")
    fits = _oracle({})  # the simulator's fits, no bias: what the search before calibration plans on
    plain = get_sharder("dreamshard", oracle=fits).shard(inv, TOPO)
    biased = [t for t, d in plain.placement.items() if d == 0][:2]
    oracle = _oracle(dict.fromkeys(biased, _measured(inv, plain, fits)))
    plan = get_sharder("dreamshard", oracle=oracle, calibrate_seconds=2.0, verify=2, verify_rounds=3).shard(inv, TOPO)
    v = plan.verification
    assert v is not None and v.search_only == "uncalibrated" and v.candidates[0].role == "search only"
    assert v.search_only_ms == pytest.approx(_measured(inv, plain, oracle))  # the plan search alone gives
    assert v.chosen != "uncalibrated" and v.kept_vs_search is not None and v.kept_vs_search < 0.9
    assert plan.placement[biased[0]] != plan.placement[biased[1]]
