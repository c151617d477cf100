"""Planning honest without statistics (dreamshard.search.unknown_stats, measured.robust_verify): tables that declare
no access histogram are planned for several id distributions, verified under each, and the plan says so."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dreamshard.cli.app import invoke
from dreamshard.documents import load_plan, save_inventory
from dreamshard.inventory.synth import synth_inventory
from dreamshard.inventory.unknown import assumed_variant, regrets, unknown_tables
from dreamshard.profiling.oracle import Oracle
from dreamshard.profiling.simulator import SimulatorBackend
from dreamshard.sharders import get_sharder
from dreamshard.values import Inventory, Topology

TOPO = Topology(num_devices=3, memory_per_device_gb=16.0, batch_size=2048)


@pytest.fixture(scope="module")
def nohist() -> Inventory:
    inv = synth_inventory(12, 7, name="nohist")
    tables = tuple(t.model_copy(update={"access_histogram": None}) if i % 2 else t for i, t in enumerate(inv.tables))
    return inv.model_copy(update={"tables": tables})


def test_a_plan_without_statistics_states_the_distributions_it_holds_under(nohist: Inventory) -> None:
    plan = get_sharder("dreamshard").shard(nohist, TOPO)
    a = plan.assumptions
    assert a is not None and a.tables == 6 and a.skews == (0.0, 1.05, 1.6)
    assert set(a.predicted_ms) == {"0", "1.05", "1.6"} and a.predicted_regret >= 1.0
    assert a.measured_regret is None  # not verified
    assert "6 table(s) declare no access statistics" in a.summary()


def test_declared_statistics_or_one_assumption_plan_as_before(nohist: Inventory) -> None:
    full = synth_inventory(12, 7, name="full")
    assert get_sharder("dreamshard").shard(full, TOPO).assumptions is None
    assert get_sharder("dreamshard", unknown_skews=(1.05,)).shard(nohist, TOPO).assumptions is None


def test_verification_measures_under_every_distribution(nohist: Inventory) -> None:
    oracle = Oracle(SimulatorBackend(), warmup=0, repeats=1)
    # the race's rounds cycle through the distributions: 3 rounds measure under each
    plan = get_sharder("dreamshard", oracle=oracle, verify=2, verify_rounds=3).shard(nohist, TOPO)
    a = plan.assumptions
    assert a is not None and set(a.measured_ms) == {"0", "1.05", "1.6"} and a.measured_regret is not None
    assert plan.verification is not None and plan.measured is not None
    # the distributions differ on this backend (else measuring under each would be pointless)
    assert len({round(v, 6) for v in a.measured_ms.values()}) == 3


def test_the_variants_change_only_the_tables_without_statistics(nohist: Inventory) -> None:
    uniform, skewed = assumed_variant(nohist, 0.0), assumed_variant(nohist, 1.6)
    missing = set(unknown_tables(nohist))
    for a, b, t in zip(uniform.tables, skewed.tables, nohist.tables, strict=True):
        if t.name in missing:
            assert a.access_histogram is not None and a.access_histogram != b.access_histogram
        else:
            assert a.access_histogram == b.access_histogram == t.access_histogram
    assert not unknown_tables(uniform)


def test_worst_case_regret_prefers_the_plan_that_holds() -> None:
    # plan 0 is best under one distribution and 5x off under the other; plan 1 is within 2x of both
    assert regrets([[1.0, 10.0], [2.0, 2.0]]) == [5.0, 2.0]


@pytest.mark.parametrize(
    ("skews", "needle"),
    [([0.0, 0.0], "lists a distribution twice"), ([0.0, 1.0, 1.2, 1.4, 1.6, 2.0], "at most 5")],
)
def test_bad_skews_are_one_line(skews: list[float], needle: str, nohist: Inventory, tmp_path: Path) -> None:
    inv = tmp_path / "inv.yaml"
    save_inventory(nohist, inv)
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"plan": {"unknown_skews": skews}}))
    code, _, err = invoke(["plan", "-i", str(inv), "-d", "3", "--params", str(params), "-o", str(tmp_path / "p.json")])
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "p.json").exists()


def test_the_cli_says_what_it_assumed(nohist: Inventory, tmp_path: Path) -> None:
    inv = tmp_path / "inv.yaml"
    save_inventory(nohist, inv)
    out = tmp_path / "plan.json"
    code, stdout, err = invoke(["plan", "-i", str(inv), "-d", "3", "--verify", "0", "-o", str(out)])
    assert code == 0, err
    assert "access statistics: 6 table(s) declare no access statistics" in stdout
    assert load_plan(out).assumptions is not None
