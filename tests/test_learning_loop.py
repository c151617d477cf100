"""Task splitting, the outer train loop (simulator backend: labelled analytic, never a measurement),
checkpoints/resume, and the learning CLI commands."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dreamshard.cli.app import main
from dreamshard.inventory.synth import synth_inventory
from dreamshard.io import dump_model, load_measurements, save_inventory
from dreamshard.learning.configs import CostTrainConfig, LoopConfig, PolicyTrainConfig, TasksConfig
from dreamshard.learning.loop import last_checkpoint, train
from dreamshard.learning.model_store import load_model
from dreamshard.learning.tasks import make_taskset
from dreamshard.profiling import make_oracle
from dreamshard.types import Topology

TINY = LoopConfig(
    iterations=2, placements_per_iteration=2, seed=0,
    cost=CostTrainConfig(steps=15), policy=PolicyTrainConfig(episodes=10, episodes_per_update=5),
)


def test_taskset_split_is_disjoint_seeded_and_capped():
    pool = synth_inventory(50, seed=0)
    cfg = TasksConfig(seed=1, train_num_tasks=5, train_tables=(5, 9), test_tables=(10, 80, 160), test_devices=(2, 4, 8))
    ts = make_taskset(pool, cfg)
    assert ts == make_taskset(pool, cfg)
    assert not set(ts.train_tables) & set(ts.test_tables)
    assert set(ts.train_tables) | set(ts.test_tables) == set(pool.table_names)
    assert all(5 <= len(t.tables) <= 9 and t.num_devices == 4 and set(t.tables) <= set(ts.train_tables) for t in ts.train)
    assert all(set(t.tables) <= set(ts.test_tables) for t in ts.test)
    sizes = {(len(t.tables), t.num_devices) for t in ts.test}
    assert sizes == {(10, d) for d in (2, 4, 8)} | {(25, d) for d in (2, 4, 8)}  # 80 and 160 capped at 25
    assert ts.pool_fingerprint == pool.fingerprint()


@pytest.fixture()
def setup():
    pool = synth_inventory(24, seed=5)
    ts = make_taskset(pool, TasksConfig(train_num_tasks=3, train_tables=(4, 6), test_tables=(5,), test_devices=(2,)))
    return pool, ts, make_oracle("simulator", warmup=0, repeats=1), Topology(num_devices=4, memory_per_device_gb=8)


def test_loop_checkpoints_and_resumes(setup, tmp_path):
    pool, ts, oracle, topo = setup
    one = TINY.model_copy(update={"iterations": 1})
    r0 = train(pool, ts, topo, oracle, one, tmp_path, progress=False)
    assert [r.iteration for r in r0] == [0]
    assert last_checkpoint(tmp_path)[0] == 0
    recs = load_measurements(tmp_path / "measurements.jsonl")
    assert len(recs) == 2 and all(r.kind == "placement" and r.backend.is_simulated for r in recs)
    # a crash mid-iteration leaves records the checkpoint never saw: resume drops them
    with open(tmp_path / "measurements.jsonl", "a") as f:
        f.write(recs[0].model_copy(update={"measurement_id": "stray"}).model_dump_json() + "\n")
    r1 = train(pool, ts, topo, oracle, TINY, tmp_path, progress=False)
    assert [r.iteration for r in r1] == [1]
    recs = load_measurements(tmp_path / "measurements.jsonl")
    assert len(recs) == 4 and "stray" not in {r.measurement_id for r in recs}
    assert {r.task for r in recs} <= {t.name for t in ts.train}
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert [m["iteration"] for m in metrics] == [0, 1]
    assert metrics[1]["lr_factor"] < metrics[0]["lr_factor"]
    assert {"cost", "policy_mean_cost_ms", "policy_entropy"} <= set(metrics[0])
    model = load_model(tmp_path)
    assert model.card.provenance["iteration"] == 1 and model.card.backend == "simulator"
    assert (tmp_path / "checkpoints" / "iter-1" / "policy.pt").is_file()
    # nothing left to do; --no-resume starts over
    assert train(pool, ts, topo, oracle, TINY, tmp_path, progress=False) == []
    fresh = train(pool, ts, topo, oracle, one, tmp_path, resume=False, progress=False)
    assert [r.iteration for r in fresh] == [0] and len(load_measurements(tmp_path / "measurements.jsonl")) == 2


def test_loop_is_seeded(setup, tmp_path):
    pool, ts, oracle, topo = setup
    one = TINY.model_copy(update={"iterations": 1})
    train(pool, ts, topo, oracle, one, tmp_path / "a", progress=False)
    train(pool, ts, topo, oracle, one, tmp_path / "b", progress=False)
    pa = [m.placement for m in load_measurements(tmp_path / "a" / "measurements.jsonl")]
    pb = [m.placement for m in load_measurements(tmp_path / "b" / "measurements.jsonl")]
    assert pa == pb
    assert load_model(tmp_path / "a").card.version == load_model(tmp_path / "b").card.version


def _run(argv: list[str]) -> int:
    try:
        main(argv)
    except SystemExit as e:
        return int(e.code or 0)
    return 0


def test_cli_tasks_train_and_errors(tmp_path, capsys):
    pool = synth_inventory(24, seed=6)
    inv = save_inventory(pool, tmp_path / "pool.yaml")
    params = tmp_path / "params.yaml"
    params.write_text(
        "tasks: {train_num_tasks: 2, train_tables: [4, 6], test_tables: [5], test_devices: [2]}\n"
        "topology: {memory_per_device_gb: 8.0}\n"
        "profile: {backend: simulator, warmup: 0, repeats: 1}\n"
        "train_cost: {steps: 10}\n"
        "train_policy: {episodes: 5, episodes_per_update: 5}\n"
        "train: {iterations: 1, placements_per_iteration: 2}\n"
    )
    tasks = tmp_path / "tasks.json"
    assert _run(["tasks", "-i", str(inv), "--params", str(params), "-o", str(tasks)]) == 0
    models = tmp_path / "models"
    assert _run(["train-policy", "-i", str(inv), "--tasks", str(tasks), "--params", str(params), "--model-dir", str(models)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ModelError: no dreamshard model") and "\n" not in err
    assert _run(["train", "-i", str(inv), "--tasks", str(tasks), "--params", str(params), "--model-dir", str(models), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "iter 0:" in out
    # train-cost on the loop's measurements, then train-policy on it
    m2 = tmp_path / "m2"
    assert _run(["train-cost", "-i", str(inv), "--measurements", str(models / "measurements.jsonl"), "--params", str(params),
                 "--model-dir", str(m2), "--metrics-out", str(tmp_path / "cm.json"), "--no-progress"]) == 0
    assert json.loads((tmp_path / "cm.json").read_text())["n_train"] >= 1
    assert _run(["train-policy", "-i", str(inv), "--tasks", str(tasks), "--params", str(params), "--model-dir", str(m2),
                 "--metrics-out", str(tmp_path / "pm.json"), "--no-progress"]) == 0
    assert load_model(m2).policy is not None
    dump_model(pool, tmp_path / "bad.yaml")
    bad = tmp_path / "badparams.yaml"
    bad.write_text("train_cost: {steps: -1}\n")
    assert _run(["train-cost", "-i", str(inv), "--measurements", str(models / "measurements.jsonl"), "--params", str(bad),
                 "--model-dir", str(m2)]) == 2
    assert "train_cost.steps" in capsys.readouterr().err
