"""Model directories: save -> load -> same plan; corrupt / incompatible models are one-line ModelErrors;
model lookup order; the DreamShardSharder behind the registry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from dreamshard.errors import InfeasiblePlacementError, ModelError
from dreamshard.inventory.synth import synth_inventory
from dreamshard.learning import model_store
from dreamshard.learning.configs import CostTrainConfig, PolicyTrainConfig, TopologyConfig
from dreamshard.learning.model_store import load_model, resolve_model_dir, save_model
from toy_cost import ToyCost, toy_measurements
from dreamshard.learning.train_cost import train_cost_model
from dreamshard.learning.train_policy import train_policy
from dreamshard.sharders import get_sharder
from dreamshard.types import Task, Topology


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    torch.manual_seed(0)
    pool = synth_inventory(30, seed=4)
    records = toy_measurements(pool, ToyCost(), num_placements=40, num_devices=4, tables_per_task=(5, 12), seed=1)
    net, metrics = train_cost_model(pool, records, CostTrainConfig(steps=60, lr=3e-3), progress=False)
    tasks = [Task(name=f"t{i}", tables=tuple(pool.table_names[i : i + 8]), num_devices=4) for i in range(4)]
    policy, _ = train_policy(pool, tasks, net, PolicyTrainConfig(episodes=20), progress=False, topology=TopologyConfig())
    d = tmp_path_factory.mktemp("model")
    save_model(d, net, policy, inventory_name=pool.name, inventory_fingerprint=pool.fingerprint(), backend="toy",
               cost_metrics=metrics.model_dump(mode="json"))
    return d


def test_save_load_same_plan(model_dir, tmp_path):
    inv = synth_inventory(25, seed=11, name="unseen")
    topo = Topology(num_devices=4, memory_per_device_gb=8)
    plan1 = get_sharder("dreamshard", model_dir=model_dir).shard(inv, topo)
    loaded = load_model(model_dir)
    copy = tmp_path / "copy"
    card = save_model(copy, loaded.cost_net, loaded.policy, backend=loaded.card.backend)
    assert card.version == loaded.card.version  # version = hash of the weights
    plan2 = get_sharder("dreamshard", model_dir=copy).shard(inv, topo)
    assert plan1.placement == plan2.placement
    assert plan1.predicted == plan2.predicted
    assert plan1.sharder == "dreamshard" and plan1.model_version == card.version
    assert plan1.predicted is not None and len(plan1.predicted.per_device) == 4 and plan1.predicted.overall_ms > 0
    assert card.version.startswith("ds-")


def test_trained_on_4_devices_plans_3_and_8(model_dir):
    inv = synth_inventory(40, seed=12, name="unseen")
    for d in (3, 8):
        plan = get_sharder("dreamshard", model_dir=model_dir, samples=4, seed=1).shard(inv, Topology(num_devices=d, memory_per_device_gb=8))
        assert plan.fits_memory() and len(plan.placement) == 40
        assert plan.predicted is not None and len(plan.predicted.per_device) == d


def test_infeasible_names_the_table(model_dir):
    inv = synth_inventory(10, seed=13)
    big = max(inv.tables, key=lambda t: t.size_bytes)
    topo = Topology(num_devices=2, memory_per_device_gb=big.size_gb * 0.9)
    with pytest.raises(InfeasiblePlacementError, match=big.name):
        get_sharder("dreamshard", model_dir=model_dir).shard(inv, topo)


def _copy(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst, dirs_exist_ok=True)
    return dst


def test_corrupt_and_incompatible_models_are_one_line_errors(model_dir, tmp_path):
    d = _copy(model_dir, tmp_path / "a")
    (d / "policy.pt").write_bytes(b"garbage")
    with pytest.raises(ModelError, match="checksum") as e:
        load_model(d)
    assert "\n" not in str(e.value)

    d = _copy(model_dir, tmp_path / "b")
    card = json.loads((d / "model.json").read_text())
    card["feature_spec_version"] = "0"
    (d / "model.json").write_text(json.dumps(card))
    with pytest.raises(ModelError, match="features v0"):
        load_model(d)

    d = _copy(model_dir, tmp_path / "c")
    (d / "model.json").write_text("{not json")
    with pytest.raises(ModelError, match="corrupt model card"):
        load_model(d)

    d = _copy(model_dir, tmp_path / "d")
    card = json.loads((d / "model.json").read_text())
    card["cost_spec"]["latent"] = 7  # weights no longer fit the architecture
    card["files"] = {}
    (d / "model.json").write_text(json.dumps(card))
    with pytest.raises(ModelError, match="cannot load weights"):
        load_model(d)

    with pytest.raises(ModelError, match="no dreamshard model"):
        load_model(tmp_path / "missing")


def test_cost_only_model_needs_policy(model_dir, tmp_path):
    loaded = load_model(model_dir)
    save_model(tmp_path, loaded.cost_net, None)
    assert load_model(tmp_path, require_policy=False).policy is None
    with pytest.raises(ModelError, match="train-policy"):
        load_model(tmp_path)


def test_resolve_model_dir_order(model_dir, tmp_path, monkeypatch):
    project = tmp_path / "proj"
    (project / "sub").mkdir(parents=True)
    (project / "params.yaml").write_text("{}\n")
    monkeypatch.chdir(project / "sub")
    monkeypatch.setattr(model_store, "PACKAGED_DIR", tmp_path / "no-packaged")
    assert resolve_model_dir(Path("explicit")) == Path("explicit")
    with pytest.raises(ModelError, match=r"no dreamshard model: run `dreamshard train` or pass --model"):
        resolve_model_dir(None)
    monkeypatch.setattr(model_store, "PACKAGED_DIR", model_dir)
    assert resolve_model_dir(None) == model_dir  # packaged fallback
    _copy(model_dir, project / "models" / "dreamshard")  # the DVC pipeline's layout
    assert resolve_model_dir(None) == project / "models" / "dreamshard"
    _copy(model_dir, project / "models")
    assert model_store.default_model_dir() == project / "models"
    assert resolve_model_dir(None) == project / "models"


def test_learned_greedy_orders_by_predicted_single_costs(model_dir):
    """dreamshard_lpt = memory-aware LPT on the cost net's single-table predictions, with predicted costs recorded."""
    from dreamshard.learning.mdp import single_table_costs
    from dreamshard.sharders.heuristics import GreedySharder

    inv = synth_inventory(30, seed=14, name="unseen")
    topo = Topology(num_devices=4, memory_per_device_gb=8)
    plan = get_sharder("dreamshard_lpt", model_dir=model_dir).shard(inv, topo)
    net = load_model(model_dir).cost_net
    pred = dict(zip(inv.table_names, single_table_costs(net, net.encode(list(inv.tables)))))
    assert plan.placement == GreedySharder("x", lambda t: float(pred[t.name])).place(inv, topo)
    assert plan.sharder == "dreamshard_lpt" and plan.model_version == load_model(model_dir).card.version
    assert plan.predicted is not None and len(plan.predicted.per_device) == 4 and plan.fits_memory()
    # the LPT balances the summed predicted single costs within the classic 4/3 bound of the best split
    loads = [sum(pred[n] for n, d in plan.placement.items() if d == dev) for dev in range(4)]
    assert max(loads) <= 4 / 3 * max(sum(pred.values()) / 4, max(pred.values())) + 1e-9
