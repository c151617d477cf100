"""Model directories: save -> load -> same plan, byte-deterministic saves; corrupt / incompatible models are
one-line ModelErrors; the CLI's model lookup order; the learned sharders behind the registry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from toy_cost import ToyCost, toy_measurements, toy_model

from dreamshard.config.settings import model_dir as default_model_dir
from dreamshard.errors import InfeasiblePlacementError, ModelError
from dreamshard.inventory.synth import synth_inventory
from dreamshard.learning import model_store
from dreamshard.learning.model_store import load_model, save_model
from dreamshard.sharders import get_sharder
from dreamshard.values import TableConstraints, Topology


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
        plan = get_sharder("dreamshard", model_dir=model_dir, samples=4, seed=1).shard(
            inv, Topology(num_devices=d, memory_per_device_gb=8)
        )
        assert plan.fits_memory() and len(plan.placement) == 40
        assert plan.predicted is not None and len(plan.predicted.per_device) == d


def test_a_table_larger_than_a_device_is_split_or_named(model_dir):
    inv = synth_inventory(10, seed=13)
    big = max(inv.tables, key=lambda t: t.size_bytes)
    # column shards narrower than TorchRec's 128 only where the table's min_partition allows them
    big = big.model_copy(update={"constraints": TableConstraints(min_partition=4)})
    inv = inv.model_copy(update={"tables": tuple(big if t.name == big.name else t for t in inv.tables)})
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
    card["cost_spec"]["latent"] = 7  # weights no longer fit the architecture (their checksums still match)
    (d / "model.json").write_text(json.dumps(card))
    with pytest.raises(ModelError, match="cannot load weights"):
        load_model(d)

    with pytest.raises(ModelError, match="no dreamshard model"):
        load_model(tmp_path / "missing")


def test_a_card_without_the_checksums_of_its_weights_is_refused(model_dir, tmp_path):
    """`"files": {}` on a card: a flipped byte in its cost_net.pt was planned with silently; now nothing loads
    unverified (load_model, and `plan --model` in one line)."""
    from dreamshard.cli.app import invoke
    from dreamshard.documents import save_inventory

    d = _copy(model_dir, tmp_path / "m")
    card = json.loads((d / "model.json").read_text())
    card["files"] = {}
    (d / "model.json").write_text(json.dumps(card))
    weights = bytearray((d / "cost_net.pt").read_bytes())
    weights[-100] ^= 0x01  # one flipped bit in the weights' last tensor
    (d / "cost_net.pt").write_bytes(bytes(weights))
    with pytest.raises(ModelError, match="records no checksum for cost_net.pt"):
        load_model(d)
    save_inventory(synth_inventory(4, seed=0, name="inv"), tmp_path / "inv.yaml")
    code, _, err = invoke(
        ["plan", "-i", str(tmp_path / "inv.yaml"), "-d", "2", "--model", str(d), "-o", str(tmp_path / "p.json")]
    )
    assert code == 2 and len(err.strip().splitlines()) == 1 and "records no checksum" in err, err


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
    pred = dict(zip(inv.table_names, single_table_costs(cost, cost.encode(list(inv.tables))), strict=True))
    assert plan.placement == GreedySharder("x", lambda t: float(pred[t.name])).place(inv, topo)
    assert plan.sharder == "dreamshard_lpt" and plan.model_version == load_model(model_dir).card.version
    assert plan.predicted is not None and len(plan.predicted.per_device) == 4 and plan.fits_memory()
    # the LPT balances the summed predicted single costs within the classic 4/3 bound of the best split
    loads = [sum(pred[n] for n, d in plan.placement.items() if d == dev) for dev in range(4)]
    assert max(loads) <= 4 / 3 * max(sum(pred.values()) / 4, max(pred.values())) + 1e-9


def _cpu_model(model_dir: Path, directory: Path, batch_sizes: tuple[int, ...] = (2048,)) -> Path:
    """The toy model re-saved as if its records had been measured on the cpu backend at `batch_sizes`."""
    from dreamshard.learning.ranges import ranges_from

    pool = synth_inventory(30, seed=4)
    records = []
    for i, m in enumerate(
        toy_measurements(pool, ToyCost(), num_placements=12, num_devices=4, tables_per_task=(5, 12), seed=1)
    ):
        topo = m.topology.model_copy(update={"batch_size": batch_sizes[i % len(batch_sizes)]})
        records.append(m.model_copy(update={"topology": topo, "backend": m.backend.model_copy(update={"name": "cpu"})}))
    ranges = ranges_from(records, pool.by_name())
    assert ranges.device_types == ("cpu",) and ranges.batch_sizes == tuple(sorted(set(batch_sizes)))
    loaded = load_model(model_dir)
    save_model(directory, loaded.cost_net, loaded.policy, backend="cpu", feature_ranges=ranges)
    return directory


def test_a_cpu_trained_card_warns_for_cuda_and_records_it(model_dir, tmp_path):
    d = _cpu_model(model_dir, tmp_path / "cpu")
    inv = synth_inventory(12, seed=4, name="same")  # the toy model's own tables: in range but for the device
    sharder = get_sharder("dreamshard_lpt", model_dir=d)
    cpu = sharder.shard_with_report(inv, Topology(num_devices=4, memory_per_device_gb=8))
    assert cpu.plan.out_of_range == () and cpu.warnings == ()
    cuda = sharder.shard_with_report(inv, Topology(num_devices=4, memory_per_device_gb=8, device_type="cuda"))
    assert cuda.plan.out_of_range == ("device_type cuda: the model learned from cpu measurements",)
    assert cuda.warnings == (
        "outside the model's training ranges: device_type cuda: the model learned from cpu measurements",
    )


def test_a_batch_size_outside_the_cards_span_warns_with_the_span(model_dir, tmp_path):
    d = _cpu_model(model_dir, tmp_path / "span", batch_sizes=(512, 2048, 65536))
    inv = synth_inventory(12, seed=4, name="same")
    sharder = get_sharder("dreamshard_lpt", model_dir=d)
    for inside in (512, 4096, 65536):  # a batch size between the profiled ones is inside the span
        plan = sharder.shard(inv, Topology(num_devices=4, memory_per_device_gb=8, batch_size=inside))
        assert plan.out_of_range == (), inside
    for outside in (128, 262144):
        report = sharder.shard_with_report(inv, Topology(num_devices=4, memory_per_device_gb=8, batch_size=outside))
        line = f"batch size {outside}, outside the trained range 512..65536"
        assert report.plan.out_of_range == (line,)
        assert report.warnings == (f"outside the model's training ranges: {line}",)


def test_a_card_without_device_types_loads_and_reads_its_backend(model_dir, tmp_path):
    """Cards written before device types were recorded (the packaged model's among them) still load; their
    device type is the backend they record (a simulated backend: none, no device warning)."""
    d = _copy(_cpu_model(model_dir, tmp_path / "src"), tmp_path / "old")
    card = json.loads((d / "model.json").read_text())
    del card["feature_ranges"]["device_types"]
    (d / "model.json").write_text(json.dumps(card))
    old = load_model(d)
    assert old.card.feature_ranges is not None and old.card.feature_ranges.device_types == ()
    assert (
        old.card.device_types == ("cpu",) and old.card.ranges is not None and old.card.ranges.device_types == ("cpu",)
    )
    cuda = Topology(num_devices=4, memory_per_device_gb=8, device_type="cuda")
    assert old.card.out_of_range([], cuda)[-1] == "device_type cuda: the model learned from cpu measurements"
    packaged = model_store.load_card(model_store.PACKAGED_DIR)
    assert packaged.backend == "cpu" and packaged.device_types == ("cpu",)
    assert any(x.startswith("device_type cuda") for x in packaged.out_of_range([], cuda))
    toy = load_model(model_dir).card  # learned from a simulated backend: no device type to check
    assert toy.device_types == () and not any("device_type" in x for x in toy.out_of_range([], cuda))


def test_pretraining_tasks_draw_batch_sizes_in_the_configured_span():
    from dreamshard.config.learning import PretrainConfig
    from dreamshard.learning.pretrain import pretraining_batch_sizes, pretraining_tasks

    cfg = PretrainConfig(num_tasks=60, tables=(2, 6), batch_sizes=(512, 65536))
    pool, taskset = pretraining_tasks(cfg)
    drawn = pretraining_batch_sizes(cfg, taskset)
    assert set(drawn) == {t.name for t in taskset.train}
    assert all(512 <= b <= 65536 for b in drawn.values())
    assert min(drawn.values()) < 1024 and max(drawn.values()) > 32768  # log-uniform: both ends are drawn
    assert sum(b < 5793 for b in drawn.values()) > 15 and sum(b > 5793 for b in drawn.values()) > 15  # around sqrt
    assert pretraining_batch_sizes(cfg, taskset) == drawn  # seeded
    one = PretrainConfig(num_tasks=60, tables=(2, 6))
    assert set(pretraining_batch_sizes(one, pretraining_tasks(one)[1]).values()) == {2048}  # the default: 2048 only
    assert pretraining_tasks(one)[0].fingerprint() == pool.fingerprint()  # the span changes no task's tables
    assert PretrainConfig.model_validate({"batch_size": 4096}).batch_sizes == (4096, 4096)  # the old key
    with pytest.raises(ValueError, match="batch_sizes min"):
        PretrainConfig(batch_sizes=(4096, 512))


def test_each_pretraining_task_is_profiled_and_looped_at_its_own_batch_size(tmp_path):
    """Profiling (one run per batch size) and the loop's topologies carry each task's batch size."""
    from dreamshard.config.learning import PretrainConfig, TopologyConfig
    from dreamshard.documents import load_measurements
    from dreamshard.learning.pretrain import _profile, pretraining_batch_sizes, pretraining_tasks
    from dreamshard.learning.train_policy import make_mdps
    from dreamshard.profiling import make_oracle

    cfg = PretrainConfig(num_tasks=4, tables=(2, 3), devices=(2, 2), batch_sizes=(256, 8192), kinds=())
    pool, taskset = pretraining_tasks(cfg)
    drawn = pretraining_batch_sizes(cfg, taskset)
    assert len(set(drawn.values())) > 1
    template = TopologyConfig(memory_per_device_gb=cfg.memory_per_device_gb)
    path = tmp_path / "m.jsonl"
    backend = _profile(pool, taskset, template, drawn, cfg, path, make_oracle("simulator", warmup=0, repeats=1), False)
    records = load_measurements(path)
    assert backend.name == "simulator" and {m.task for m in records} == set(drawn)
    assert all(m.topology.batch_size == drawn[m.task] for m in records)
    mdps = make_mdps(pool, list(taskset.train), ToyCost(), template, drawn)
    assert [m.topology.batch_size for m in mdps] == [drawn[t.name] for t in taskset.train]
