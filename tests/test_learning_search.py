"""Planning on the learned cost: search over candidates, --verify, out-of-range warnings, memory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from dreamshard.cli.app import invoke
from dreamshard.inventory.synth import synth_inventory
from dreamshard.io import load_plan, save_inventory
from dreamshard.learning.configs import SearchConfig
from dreamshard.learning.model_store import load_model
from dreamshard.learning.planning_cost import PlanningCost
from dreamshard.learning.search import search
from dreamshard.memory import check_placement
from dreamshard.profiling import make_oracle
from dreamshard.sharders import get_sharder
from dreamshard.types import Table, Topology
from toy_cost import toy_model

CHEAP = ("policy", "lpt", "dim_greedy", "lookup_greedy", "size_lookup_greedy", "size_greedy", "round_robin")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("model")
    toy_model(d)
    return d


def _score(cost: PlanningCost, tables: list[Table], placement: dict[str, int]) -> float:
    with torch.no_grad():
        return float(cost.overall(cost.placement_states(tables, placement)))


def test_search_is_never_worse_than_any_candidate(model_dir):
    model = load_model(model_dir)
    inv = synth_inventory(40, seed=21, name="unseen")
    for d in (2, 4, 7):
        topo = Topology(num_devices=d, memory_per_device_gb=16)
        cost = PlanningCost(model.cost_net, topo, risk=1.0)
        res = search(inv, topo, cost, model.policy, SearchConfig(candidates=CHEAP, samples=3))
        assert res.best.predicted_ms == min(c.predicted_ms for c in res.candidates)
        assert abs(res.best.predicted_ms - _score(cost, list(inv.tables), res.best.placement)) < 1e-4
        for name in ("dim_greedy", "lookup_greedy", "round_robin"):  # every source's own plan, scored alike
            plan = get_sharder(name).place(inv, topo)
            assert res.best.predicted_ms <= _score(cost, list(inv.tables), plan) + 1e-6
        assert {c.source for c in res.candidates} >= {"policy", "lpt", "dim_greedy"}
        check_placement(inv, res.best.placement, topo)


def test_search_respects_tight_memory_and_skips_sources_that_cannot_place(model_dir):
    model = load_model(model_dir)
    inv = synth_inventory(30, seed=22, name="tight")
    total = sum(t.size_gb for t in inv.tables)
    topo = Topology(num_devices=3, memory_per_device_gb=max(total / 3 * 1.08, max(t.size_gb for t in inv.tables) * 1.01))
    res = search(inv, topo, PlanningCost(model.cost_net, topo), model.policy, SearchConfig(candidates=CHEAP))
    for c in res.candidates:
        check_placement(inv, c.placement, topo)
    assert res.candidates  # at least one source placed it; the others are listed as failed with the reason
    assert all(isinstance(v, str) and v for v in res.failed.values())


def test_verify_measures_the_best_candidates_and_keeps_the_best_measured(model_dir):
    inv = synth_inventory(24, seed=23, name="verify")
    topo = Topology(num_devices=4, memory_per_device_gb=16)
    oracle = make_oracle("simulator", warmup=0, repeats=1)
    sharder = get_sharder("dreamshard", model_dir=model_dir, verify=3, verify_rounds=2, oracle=oracle,
                          search=SearchConfig(candidates=CHEAP))
    plan = sharder.shard(inv, topo)
    v = plan.verification
    assert v is not None and v.rounds == 2 and len(v.candidates) == 3
    assert [c.source for c in v.candidates] == [c.source for c in sharder.last_search.candidates[:3]]
    kept = min(v.candidates, key=lambda c: c.measured_ms)
    assert v.chosen == kept.source
    assert plan.measured is not None and plan.measured_by is not None and plan.measured_by.is_simulated
    assert plan.measured.overall_ms == pytest.approx(kept.measured_ms)
    assert plan.cost_basis == "simulated"
    check_placement(inv, plan.placement, topo)


def test_out_of_range_inventory_warns_and_is_recorded(model_dir, tmp_path):
    wide = synth_inventory(12, seed=24, name="wide", dims=(1024,))  # the toy model saw dims 16..128
    inv = save_inventory(wide, tmp_path / "wide.yaml")
    code, out, err = invoke(["plan", "-i", str(inv), "-d", "4", "-m", "64", "-s", "dreamshard", "--model", str(model_dir),
                             "-o", str(tmp_path / "p.json")])
    assert code == 0, err
    plan = load_plan(tmp_path / "p.json")
    assert any("embedding_dim" in x and "1024" in x for x in plan.out_of_range)
    assert "warning: outside the model's training ranges" in err and "embedding_dim" in err
    # in range: nothing recorded
    same = synth_inventory(12, seed=4, name="same")  # the toy model's own table generator and seed
    inv2 = save_inventory(same, tmp_path / "same.yaml")
    code, _, err = invoke(["plan", "-i", str(inv2), "-d", "4", "-m", "64", "--model", str(model_dir), "-o", str(tmp_path / "q.json")])
    assert code == 0 and load_plan(tmp_path / "q.json").out_of_range == () and "warning" not in err


def test_cli_verify_records_and_refuses_other_sharders(model_dir, tmp_path):
    inv = save_inventory(synth_inventory(16, seed=25, name="cli"), tmp_path / "inv.yaml")
    out = tmp_path / "v.json"
    code, stdout, err = invoke(["plan", "-i", str(inv), "-d", "2", "-m", "16", "--model", str(model_dir), "--verify", "2",
                                "--verify-rounds", "1", "--backend", "simulator", "--explain", "-o", str(out)])
    assert code == 0, err
    data = json.loads(out.read_text())
    assert len(data["verification"]["candidates"]) == 2 and data["measured"] is not None
    assert "candidates under the learned cost" in stdout and "verified on simulator" in stdout
    code, _, err = invoke(["plan", "-i", str(inv), "-d", "2", "-m", "16", "-s", "dim_greedy", "--verify", "2",
                           "-o", str(tmp_path / "x.json")])
    assert code == 2 and "--verify needs --sharder dreamshard" in err and not (tmp_path / "x.json").exists()
