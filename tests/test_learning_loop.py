"""Task splitting, the outer train loop (simulator backend: labelled analytic, never a measurement),
checkpoints, resume without re-measuring, reproduction from the state dir, and the learning CLI commands."""

from __future__ import annotations

import json
from functools import partial

import pytest

from dreamshard.cli.app import main
from dreamshard.config.learning import CostTrainConfig, LoopConfig, PolicyTrainConfig, TasksConfig
from dreamshard.documents import dump_model, load_measurements, save_inventory
from dreamshard.inventory.synth import synth_inventory
from dreamshard.learning import loop
from dreamshard.learning.loop import MEASUREMENTS_FILE, last_checkpoint
from dreamshard.learning.model_store import load_model
from dreamshard.learning.taskset import make_taskset
from dreamshard.profiling import make_oracle
from dreamshard.search.candidates import best_placement
from dreamshard.values import Inventory, Topology

#: The outer loop with the search planner the library's train use case gives it.
train = partial(loop.train, searcher=best_placement)

TINY = LoopConfig(
    iterations=2,
    placements_per_iteration=2,
    search_per_iteration=1,
    perturb_per_iteration=1,
    seed=0,
    init="none",
    cost=CostTrainConfig(steps=15),
    policy=PolicyTrainConfig(episodes=10, episodes_per_update=5),
)


class CountingOracle:
    """Counts measurements; raises after `fail_after` of them (a kill mid-iteration)."""

    def __init__(self, inner, fail_after: int | None = None) -> None:
        self.inner, self.fail_after, self.count = inner, fail_after, 0
        self.info = inner.info

    def measure(self, *a, **kw):
        if self.fail_after is not None and self.count >= self.fail_after:
            raise KeyboardInterrupt("killed")
        self.count += 1
        return self.inner.measure(*a, **kw)


def test_taskset_split_is_disjoint_seeded_and_capped():
    pool = synth_inventory(50, seed=0)
    cfg = TasksConfig(seed=1, train_num_tasks=5, train_tables=(5, 9), test_tables=(10, 80, 160), test_devices=(2, 4, 8))
    ts = make_taskset(pool, cfg)
    assert ts == make_taskset(pool, cfg)
    assert not set(ts.train_tables) & set(ts.test_tables)
    assert set(ts.train_tables) | set(ts.test_tables) == set(pool.table_names)
    assert all(
        5 <= len(t.tables) <= 9 and t.num_devices == 4 and set(t.tables) <= set(ts.train_tables) for t in ts.train
    )
    assert all(set(t.tables) <= set(ts.test_tables) for t in ts.test)
    m = len(ts.test_tables)
    assert 15 <= m <= 35  # test_fraction 0.5 of 50, drawn per table
    sizes = {(len(t.tables), t.num_devices) for t in ts.test}
    assert sizes == {(10, d) for d in (2, 4, 8)} | {(m, d) for d in (2, 4, 8)}  # 80 and 160 capped at the pool
    assert ts.pool_fingerprint == pool.fingerprint()


def test_taskset_is_stable_under_a_table_change_and_an_addition():
    pool = synth_inventory(60, seed=0)
    cfg = TasksConfig(seed=0, train_num_tasks=16, train_tables=(20, 30))
    t0, t1 = pool.tables[0], pool.tables[1]
    v2 = Inventory(
        name=pool.name,
        tables=(
            t0.model_copy(update={"pooling_factor": t0.pooling_factor * 1.5}),
            *pool.tables[1:],
            t1.model_copy(update={"name": "brand_new"}),
        ),
    )
    a, b = make_taskset(pool, cfg), make_taskset(v2, cfg)
    assert set(b.train_tables) - set(a.train_tables) <= {"brand_new"}  # no old table changes pool
    assert set(a.train_tables) <= set(b.train_tables)
    changed = 0
    for old, new in zip(a.train, b.train, strict=True):
        gone, came = set(old.tables) - set(new.tables), set(new.tables) - set(old.tables)
        assert came <= {"brand_new"} and len(gone) == len(came) <= 1  # one in, one displaced, or nothing
        changed += bool(came)
    assert changed < len(a.train)  # the tasks the new table does not join are untouched


@pytest.fixture()
def setup():
    pool = synth_inventory(24, seed=5)
    ts = make_taskset(pool, TasksConfig(train_num_tasks=3, train_tables=(4, 6), test_tables=(5,), test_devices=(2,)))
    return pool, ts, make_oracle("simulator", warmup=0, repeats=1), Topology(num_devices=4, memory_per_device_gb=8)


def test_loop_checkpoints_and_resumes(setup, tmp_path):
    pool, ts, oracle, topo = setup
    state = tmp_path / "models" / "train-state"
    one = TINY.model_copy(update={"iterations": 1})
    r0 = train(pool, ts, topo, oracle, one, tmp_path / "models", progress=False)
    assert [r.iteration for r in r0] == [0]
    assert last_checkpoint(state)[0] == 0
    recs = load_measurements(state / MEASUREMENTS_FILE)
    # iteration 0 without a policy: random placements (no search, no cost net yet) + perturbations of the best
    assert len(recs) == r0[0].n_measured >= 2 and all(r.kind == "placement" and r.backend.is_simulated for r in recs)
    r1 = train(pool, ts, topo, oracle, TINY, tmp_path / "models", progress=False)
    assert [r.iteration for r in r1] == [1] and r1[0].n_new >= 3  # rollouts + the search planner's plan (+ perturbed)
    assert {r.task for r in load_measurements(state / MEASUREMENTS_FILE)} <= {t.name for t in ts.train}
    metrics = json.loads((state / "metrics.json").read_text())
    assert [m["iteration"] for m in metrics] == [0, 1]
    assert metrics[1]["lr_factor"] < metrics[0]["lr_factor"]
    model = load_model(tmp_path / "models")
    assert model.card.provenance["iteration"] == 1 and model.card.backend == "simulator"
    assert model.card.feature_ranges is not None and model.card.feature_ranges.num_devices.hi == 4
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == [
        "cost_net.pt",
        "model.json",
        "policy.pt",
        "train-state",
    ]
    # nothing left to do; --no-resume starts over (and forgets the measurements)
    assert train(pool, ts, topo, oracle, TINY, tmp_path / "models", progress=False) == []
    fresh = train(
        pool, ts, topo, oracle, one, tmp_path / "models", resume=False, progress=False, searcher=best_placement
    )
    assert [r.iteration for r in fresh] == [0] and fresh[0].n_measured == len(recs)


def test_kill_then_resume_measures_nothing_twice(setup, tmp_path):
    pool, ts, oracle, topo = setup
    ref = train(
        pool,
        ts,
        topo,
        oracle,
        TINY,
        tmp_path / "ref",
        state_dir=tmp_path / "ref-state",
        progress=False,
        searcher=best_placement,
    )
    total = sum(r.n_measured for r in ref)
    killer = CountingOracle(oracle, fail_after=ref[0].n_measured + 1)  # dies inside iteration 1
    with pytest.raises(KeyboardInterrupt):
        train(
            pool,
            ts,
            topo,
            killer,
            TINY,
            tmp_path / "m",
            state_dir=tmp_path / "s",
            progress=False,
            searcher=best_placement,
        )
    again = CountingOracle(oracle)
    train(
        pool, ts, topo, again, TINY, tmp_path / "m", state_dir=tmp_path / "s", progress=False, searcher=best_placement
    )
    assert killer.count + again.count == total  # the one placement measured before the kill is not measured again
    # same inputs, same seeds -> the same model, byte for byte
    for name in ("cost_net.pt", "policy.pt", "model.json"):
        assert (tmp_path / "m" / name).read_bytes() == (tmp_path / "ref" / name).read_bytes()
    # reproduce from the state's measurements alone (checkpoints gone, e.g. a fresh clone that pulled them):
    import shutil

    shutil.rmtree(tmp_path / "s" / "checkpoints")
    (tmp_path / "m" / "model.json").unlink()
    repro = CountingOracle(oracle)
    train(
        pool, ts, topo, repro, TINY, tmp_path / "m", state_dir=tmp_path / "s", progress=False, searcher=best_placement
    )
    assert repro.count == 0
    assert load_model(tmp_path / "m").card.version == load_model(tmp_path / "ref").card.version


def test_loop_is_seeded(setup, tmp_path):
    pool, ts, oracle, topo = setup
    one = TINY.model_copy(update={"iterations": 1})
    train(pool, ts, topo, oracle, one, tmp_path / "a", progress=False)
    train(pool, ts, topo, oracle, one, tmp_path / "b", progress=False)
    pa = [m.placement for m in load_measurements(tmp_path / "a" / "train-state" / MEASUREMENTS_FILE)]
    pb = [m.placement for m in load_measurements(tmp_path / "b" / "train-state" / MEASUREMENTS_FILE)]
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
        "train: {iterations: 1, placements_per_iteration: 2, init: none}\n"
    )
    tasks = tmp_path / "tasks.json"
    assert _run(["tasks", "-i", str(inv), "--params", str(params), "-o", str(tasks)]) == 0
    models = tmp_path / "models"
    assert (
        _run(
            ["train-policy", "-i", str(inv), "--tasks", str(tasks), "--params", str(params), "--model-dir", str(models)]
        )
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ModelError: no dreamshard model") and "\n" not in err
    assert (
        _run(
            [
                "train",
                "-i",
                str(inv),
                "--tasks",
                str(tasks),
                "--params",
                str(params),
                "--model-dir",
                str(models),
                "--state-dir",
                str(tmp_path / "state"),
                "--metrics-out",
                str(tmp_path / "train.json"),
                "--no-progress",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "iter 0:" in out
    summary = json.loads((tmp_path / "train.json").read_text())
    assert summary["iterations_run"] == [0] and summary["model_version"] == load_model(models).card.version
    assert summary["init"] is None and summary["measured_now"] >= 2
    # train-cost on the loop's measurements, then train-policy on it
    m2 = tmp_path / "m2"
    loop_records = str(tmp_path / "state" / MEASUREMENTS_FILE)
    assert (
        _run(
            [
                "train-cost",
                "-i",
                str(inv),
                "--measurements",
                loop_records,
                "--params",
                str(params),
                "--model-dir",
                str(m2),
                "--metrics-out",
                str(tmp_path / "cm.json"),
                "--no-progress",
            ]
        )
        == 0
    )
    assert json.loads((tmp_path / "cm.json").read_text())["n_train"] >= 1
    assert (
        _run(
            [
                "train-policy",
                "-i",
                str(inv),
                "--tasks",
                str(tasks),
                "--params",
                str(params),
                "--model-dir",
                str(m2),
                "--metrics-out",
                str(tmp_path / "pm.json"),
                "--no-progress",
            ]
        )
        == 0
    )
    assert load_model(m2).policy is not None
    dump_model(pool, tmp_path / "bad.yaml")
    bad = tmp_path / "badparams.yaml"
    bad.write_text("train_cost: {steps: -1}\n")
    assert (
        _run(
            ["train-cost", "-i", str(inv), "--measurements", loop_records, "--params", str(bad), "--model-dir", str(m2)]
        )
        == 2
    )
    assert "train_cost.steps" in capsys.readouterr().err
