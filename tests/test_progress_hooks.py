"""Long work says what it is doing (docs/architecture/index.md, "Progress"): the library's progress hooks fire once per
measurement (interleaved rounds, the plan stage's verify and refine), per training step with its loss and per policy
update, prefixed with the iteration; the doors' `ProgressLines` hands them on at most every 10 s and repeats the
latest after 30 s of silence (a scripted clock: no timed asserts); the CLI's train and plan commands write them on
stderr when no bar shows (a DVC stage, whose output the orchestrator streams into the flow log)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dreamshard.cli.app import main
from dreamshard.config.learning import CostTrainConfig, LoopConfig, PolicyTrainConfig, TasksConfig
from dreamshard.documents import dump_model, save_inventory
from dreamshard.evaluation import compare_sharders
from dreamshard.inventory.synth import synth_inventory
from dreamshard.learning import loop
from dreamshard.learning.taskset import make_taskset
from dreamshard.profiling import make_oracle
from dreamshard.profiling.oracle import Oracle
from dreamshard.profiling.simulator import SimulatorBackend
from dreamshard.search.candidates import best_placement
from dreamshard.sharders import get_sharder
from dreamshard.usecases.progress import ProgressLines, progress_lines
from dreamshard.values import Topology
from dreamshard.values.progress import prefixed


class Clock:
    """A scripted clock: `now` seconds, moved by the test."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_lines_are_handed_on_at_most_every_10_s_and_the_latest_repeats_after_30_s_of_silence() -> None:
    said: list[str] = []
    clock = Clock()
    lines = ProgressLines(said.append, "replan", every_s=10.0, heartbeat_s=30.0, clock=clock)
    lines("round 1/5: measuring dreamshard")  # the first line at once
    for i in range(2, 40):  # a line a quarter second apart: held back, the latest kept
        clock.now += 0.25
        lines(f"round {i}/40: measuring dim_greedy")
    assert said == ["replan: round 1/5: measuring dreamshard"] and lines.lines == 39
    lines.beat()  # 9.5 s since the last line handed on: not yet
    assert len(said) == 1
    clock.now = 10.0
    lines.beat()  # its time has come: the latest line
    assert said[-1] == "replan: round 39/40: measuring dim_greedy" and len(said) == 2
    clock.now = 39.0
    lines.beat()  # nothing new for 29 s: silence is allowed up to 30 s
    assert len(said) == 2
    clock.now = 40.0
    lines.beat()  # 30 s without a new line: the latest again, with the time so far
    assert said[-1] == "replan: still at: round 39/40: measuring dim_greedy (40 s so far)" and len(said) == 3
    clock.now = 71.0
    lines.beat()
    assert len(said) == 4  # and again 30 s later: never silent for longer
    lines("gate: round 1/5")
    assert said[-1] == "replan: gate: round 1/5"  # 31 s since the last: handed on at once
    clock.now = 72.0
    lines("gate: round 2/5")
    lines.flush()  # the end of the work: the held-back latest line
    assert said[-1] == "replan: gate: round 2/5" and len(said) == 6
    lines.flush()
    assert len(said) == 6  # nothing held back: nothing said twice


def test_the_block_hands_on_the_first_line_at_once_and_the_last_at_its_end() -> None:
    said: list[str] = []
    with progress_lines(said.append, "train", every_s=1e6, heartbeat_s=1e6) as hook:
        for step in range(1, 101):
            hook(f"cost ensemble step {step}/100, loss {1 / step:.3g}")
    assert said == ["train: cost ensemble step 1/100, loss 1", "train: cost ensemble step 100/100, loss 0.01"]
    quiet: list[str] = []
    with progress_lines(quiet.append, "idle", every_s=1e6, heartbeat_s=1e6):
        pass
    assert quiet == []  # nothing said, nothing written
    failed: list[str] = []
    with pytest.raises(ValueError), progress_lines(failed.append, "plan", every_s=1e6, heartbeat_s=1e6) as hook:
        hook("verify: round 1/3")
        hook("verify: round 2/3")
        raise ValueError("refused")
    assert failed == ["plan: verify: round 1/3"]  # an error's own line is the last word: nothing flushed after it


def test_a_command_that_ends_within_its_first_seconds_writes_no_progress_line() -> None:
    """The CLI's lines wait their first 10 s: a refusal (or a quick command) writes only its own line."""
    said: list[str] = []
    clock = Clock()
    lines = ProgressLines(said.append, "compare", clock=clock, first_after_s=10.0)
    lines("planning with round_robin")
    clock.now = 9.0
    lines("round 1/5: measuring round_robin")
    lines.beat()
    lines.flush()
    assert said == []  # nothing shown yet: nothing flushed at the end either
    clock.now = 10.0
    lines.beat()  # the work goes on: from 10 s on, the latest line
    assert said == ["compare: round 1/5: measuring round_robin"]
    clock.now = 12.0
    lines("round 2/5: measuring dim_greedy")
    lines.flush()
    assert said[-1] == "compare: round 2/5: measuring dim_greedy" and len(said) == 2


def test_prefixed_keeps_none_and_prefixes_each_line() -> None:
    got: list[str] = []
    assert prefixed(None, "x: ") is None
    hook = prefixed(got.append, "iteration 2/10: ")
    assert hook is not None
    hook("policy update 1/4")
    assert got == ["iteration 2/10: policy update 1/4"]


LOOP = LoopConfig(
    iterations=1,
    placements_per_iteration=2,
    search_per_iteration=1,
    perturb_per_iteration=1,
    seed=0,
    init="none",
    cost=CostTrainConfig(steps=12),
    policy=PolicyTrainConfig(episodes=10, episodes_per_update=5),
)


def test_the_training_loop_reports_each_placement_step_with_its_loss_and_policy_update(tmp_path: Path) -> None:
    pool = synth_inventory(24, seed=5)
    ts = make_taskset(pool, TasksConfig(train_num_tasks=3, train_tables=(4, 6), test_tables=(5,), test_devices=(2,)))
    lines: list[str] = []
    (it,) = loop.train(
        pool,
        ts,
        Topology(num_devices=4, memory_per_device_gb=8),
        make_oracle("simulator", warmup=0, repeats=1),
        LOOP,
        tmp_path / "models",
        progress=False,
        searcher=best_placement,
        report=lines.append,
    )
    assert lines and all(line.startswith("iteration 1/1: ") for line in lines)
    measured = [line for line in lines if "measured placement" in line]
    steps = [line for line in lines if "cost ensemble step" in line]
    updates = [line for line in lines if "policy update" in line]
    assert len(measured) == it.n_measured >= 2
    assert len(steps) == LOOP.cost.steps * LOOP.cost.ensemble_size and "loss " in steps[-1]
    total = LOOP.cost.steps * LOOP.cost.ensemble_size
    assert steps[-1].startswith(f"iteration 1/1: cost ensemble step {total}/{total}")
    assert len(updates) == 2 and "mean estimated cost" in updates[-1]  # 10 episodes, 5 per update


TOPO = Topology(num_devices=3, memory_per_device_gb=16.0, batch_size=2048)


def test_the_plan_stage_reports_every_race_measurement_who_is_left_and_each_refine_proposal() -> None:
    inv = synth_inventory(10, 3, name="steps")
    lines: list[str] = []
    oracle = Oracle(SimulatorBackend(), warmup=0, repeats=1)
    plan = get_sharder(
        "dreamshard", oracle=oracle, seed=1, verify=2, verify_rounds=2, refine_seconds=0.5, progress=lines.append
    ).shard(inv, TOPO)
    verified, refine = plan.verification, plan.refinement
    assert verified is not None and refine is not None
    measuring = [line for line in lines if line.startswith("verify: round") and ": measuring " in line]
    assert len(measuring) == sum(c.rounds or verified.rounds for c in verified.candidates)
    # after each round but the last: who is left (or who dropped out), naming the baselines the race measures (of 3:
    # the field's 2, then what confirmation may add)
    left = [line for line in lines if line.startswith("verify: round 1/3: ") and " left: " in line]
    assert len(left) == 1 and "heuristic:dim_greedy" in left[0] and "torchrec:torchrec" in left[0]
    kept = next(c.label for c in verified.candidates if c.kept)
    assert lines.count(f"verify: kept {kept} after {verified.rounds} round(s)") == 1  # 2, or 3 when confirming
    proposals = [line for line in lines if line.startswith("refine: proposal")]
    assert len(proposals) == refine.tried and all(" s" in line for line in proposals)
    whole = [line for line in lines if line.startswith("refine: refined vs start:")]
    assert len(whole) == (2 * refine.whole_rounds if refine.kept else 0)


def test_compare_sharders_reports_each_measurement_of_each_round() -> None:
    inv = synth_inventory(8, seed=2)
    lines: list[str] = []
    topo = Topology(num_devices=2, memory_per_device_gb=8.0, batch_size=512)
    cmp = compare_sharders(
        inv, topo, ["round_robin", "dim_greedy"], make_oracle("simulator"), rounds=3, progress=lines.append
    )
    rounds = [line for line in lines if line.startswith("round ")]
    assert len(rounds) == 3 * len(cmp.results) and rounds[0].startswith("round 1/3: measuring")


@pytest.fixture()
def trained(tmp_path: Path) -> tuple[Path, Path, Path]:
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
        "plan: {num_devices: 2, verify: 2, verify_rounds: 2, samples: 4}\n"
    )
    ts = make_taskset(pool, TasksConfig(train_num_tasks=2, train_tables=(4, 6), test_tables=(5,), test_devices=(2,)))
    tasks = tmp_path / "tasks.json"
    dump_model(ts, tasks)
    return inv, params, tasks


def _run(argv: list[str]) -> int:
    try:
        main(argv)
    except SystemExit as e:
        return int(e.code or 0)
    return 0


def test_the_cli_writes_progress_lines_on_stderr_where_no_bar_shows(
    trained: tuple[Path, Path, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`train --no-progress` (the DVC stage's command line) and `plan --verify` in a pipe: their lines on stderr
    (shown from the first line on here: the CLI's wait of 10 s is the throttle's, tested above), stdout unchanged."""
    monkeypatch.setattr("dreamshard.cli.progress.FIRST_AFTER_S", 0.0)
    inv, params, tasks = trained
    models = tmp_path / "models"
    argv = ["train", "-i", str(inv), "--tasks", str(tasks), "--params", str(params), "--model-dir", str(models)]
    assert _run([*argv, "--no-progress"]) == 0
    got = capsys.readouterr()
    assert "iter 0:" in got.out and "train: " not in got.out
    lines = got.err.strip().splitlines()
    assert lines[0] == "train: iteration 1/1: planning the placements to measure"
    assert lines[-1].startswith("train: iteration 1/1: policy update 1/1")
    out = tmp_path / "plan.json"
    plan_argv = ["plan", "-i", str(inv), "--params", str(params), "--model", str(models), "-o", str(out)]
    assert _run([*plan_argv, "--json"]) == 0
    got = capsys.readouterr()
    assert json.loads(got.out)["verification"] is not None  # stdout: the JSON alone
    assert got.err.startswith("plan: verify: round 1/3: measuring")  # 2 rounds, and a third to confirm a lead
