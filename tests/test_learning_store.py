"""Model directories: save -> load -> same plan, byte-deterministic saves; corrupt / incompatible models are
one-line ModelErrors; the CLI's model lookup order; the learned sharders behind the registry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from dreamshard.errors import InfeasiblePlacementError, ModelError
from dreamshard.inventory.synth import synth_inventory
from dreamshard.settings import model_dir as default_model_dir
from dreamshard.learning import model_store
from dreamshard.learning.model_store import load_model, save_model
from dreamshard.sharders import get_sharder
from dreamshard.types import Topology
from toy_cost import toy_model


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("model")
    toy_model(d)
    return d


def test_save_load_same_plan(model_dir, tmp_path):
    inv = synth_inventory(25, seed=11, name="unseen")
    topo = Topology(num_devices=4, memory_per_device_gb=8)
    plan1 = get_sharder("dreamshard", model_dir=model_dir).shard(inv, topo)
    loaded = load_model(model_dir)
    copy = tmp_path / "copy"
    card = save_model(copy, loaded.cost_net, loaded.policy, backend=loaded.card.backend)
    assert card.version == loaded.card.version  # version = hash of the weights
    again = save_model(tmp_path / "again", loaded.cost_net, loaded.policy, backend=loaded.card.backend)
    for name in ("cost_net.pt", "policy.pt", "model.json"):  # byte-deterministic: same model, same files
        assert (copy / name).read_bytes() == (tmp_path / "again" / name).read_bytes()
    assert again.version == card.version
    plan2 = get_sharder("dreamshard", model_dir=copy).shard(inv, topo)
    assert plan1.placement == plan2.placement
    assert plan1.predicted == plan2.predicted
    assert plan1.sharder == "dreamshard" and plan1.model_version == card.version
    assert all(isinstance(x, str) for x in plan1.out_of_range)
    assert plan1.predicted is not None and len(plan1.predicted.per_device) == 4 and plan1.predicted.overall_ms > 0
    assert card.version.startswith("ds-")


def test_trained_on_4_devices_plans_3_and_8(model_dir):
    inv = synth_inventory(40, seed=12, name="unseen")
    for d in (3, 8):
        plan = get_sharder("dreamshard", model_dir=model_dir, samples=4, seed=1).shard(inv, Topology(num_devices=d, memory_per_device_gb=8))
        assert plan.fits_memory() and len(plan.placement) == 40
        assert plan.predicted is not None and len(plan.predicted.per_device) == d


def test_a_table_larger_than_a_device_is_split_or_named(model_dir):
    inv = synth_inventory(10, seed=13)
    big = max(inv.tables, key=lambda t: t.size_bytes)
    topo = Topology(num_devices=2, memory_per_device_gb=big.size_gb * 0.9)
    # table-wise only: the typed error names the table
    with pytest.raises(InfeasiblePlacementError, match=big.name):
        get_sharder("dreamshard", model_dir=model_dir, column_splits="never").shard(inv, topo)
    # by default the table is cut into the fewest equal column shards that fit, planned as tables
    plan = get_sharder("dreamshard", model_dir=model_dir).shard(inv, topo)
    assert big.name in plan.column_shards and big.name not in plan.placement
    shards = plan.column_shards[big.name]
    assert len(shards) == 2 and sum(sh.width for sh in shards) == big.embedding_dim
    assert plan.fits_memory() and set(plan.table_names) == set(inv.table_names)
    # even the finest split does not fit: the error names the table and the limit
    tiny = Topology(num_devices=2, memory_per_device_gb=big.size_gb / (big.embedding_dim // 4) * 0.5)
    with pytest.raises(InfeasiblePlacementError, match=rf"{big.name}.*even split into"):
        get_sharder("dreamshard", model_dir=model_dir).shard(inv, tiny)


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

    d = _copy(model_dir, tmp_path / "old")
    card = json.loads((d / "model.json").read_text())
    card["format_version"] = 1
    card["cost_spec"]["a_field_of_the_old_format"] = True  # an older card's fields differ: named by its format
    (d / "model.json").write_text(json.dumps(card))
    with pytest.raises(ModelError, match="model format 1, this dreamshard reads 2; retrain"):
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


def test_cli_model_lookup_order(model_dir, tmp_path, monkeypatch):
    """The CLI's default: --model, else ./models, else ./models/dreamshard, else None (the packaged model)."""
    monkeypatch.chdir(tmp_path)
    assert default_model_dir(Path("explicit")) == Path("explicit")
    assert default_model_dir() is None
    _copy(model_dir, tmp_path / "models" / "dreamshard")  # the DVC pipeline's layout
    assert default_model_dir() == Path.cwd() / "models" / "dreamshard"
    _copy(model_dir, tmp_path / "models")
    assert default_model_dir() == Path.cwd() / "models"
    monkeypatch.setattr(model_store, "PACKAGED_DIR", model_dir)
    assert load_model(None).card.version == load_model(model_dir).card.version


def test_learned_greedy_orders_by_predicted_single_costs(model_dir):
    """dreamshard_lpt = memory-aware LPT on the cost net's single-table predictions, with predicted costs recorded."""
    from dreamshard.learning.mdp import single_table_costs
    from dreamshard.sharders.heuristics import GreedySharder

    inv = synth_inventory(30, seed=14, name="unseen")
    topo = Topology(num_devices=4, memory_per_device_gb=8)
    plan = get_sharder("dreamshard_lpt", model_dir=model_dir).shard(inv, topo)
    from dreamshard.learning.planning_cost import PlanningCost

    cost = PlanningCost(load_model(model_dir).cost_net, topo)
    pred = dict(zip(inv.table_names, single_table_costs(cost, cost.encode(list(inv.tables)))))
    assert plan.placement == GreedySharder("x", lambda t: float(pred[t.name])).place(inv, topo)
    assert plan.sharder == "dreamshard_lpt" and plan.model_version == load_model(model_dir).card.version
    assert plan.predicted is not None and len(plan.predicted.per_device) == 4 and plan.fits_memory()
    # the LPT balances the summed predicted single costs within the classic 4/3 bound of the best split
    loads = [sum(pred[n] for n, d in plan.placement.items() if d == dev) for dev in range(4)]
    assert max(loads) <= 4 / 3 * max(sum(pred.values()) / 4, max(pred.values())) + 1e-9
