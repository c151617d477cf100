"""Orchestration pieces without a Prefect server: the stage graph as declared, typed params sections, inventory
versions, deployments with their schedules and triggers, the drift check and its history, artifact keys, the
workspace lock, human review."""

from __future__ import annotations

import fcntl
from pathlib import Path
from typing import Any

import pytest
import yaml
from flows_support import change_one_table, tiny_inventory

from dreamshard.pipeline.incumbent import load_incumbent
from dreamshard.store import open_store
from dreamshard.store.inventories import current_inventory_key, get_current_inventory, inventory_key, push_inventory

ROOT = Path(__file__).resolve().parents[1]
STAGES = ["inventory", "incumbent", "tasks", "profile", "train", "plan", "evaluate"]


def test_dvc_yaml_is_the_stage_graph_and_ships_with_the_package() -> None:
    from dreamshard.config.settings import installed_pipeline_file

    text = (ROOT / "dvc.yaml").read_text()
    assert installed_pipeline_file("dvc.yaml").read_text() == text  # what a workspace runs is this very file
    assert installed_pipeline_file("params.yaml").read_text() == (ROOT / "params.yaml").read_text()
    stages = yaml.safe_load(text)["stages"]
    assert list(stages) == STAGES
    for name, st in stages.items():
        assert st["cmd"].startswith("dreamshard "), name  # one thin CLI call
        code = [d for d in st["deps"] if d.startswith("dreamshard/")]
        assert code, f"stage {name} lists no code it runs"
        assert all((ROOT / d).is_dir() or (d.endswith(".py") and (ROOT / d).is_file()) for d in code), code
    assert "models/dreamshard" in stages["train"]["outs"]
    assert "data/plan.json" in stages["evaluate"]["deps"] and "data/comparison.json" in stages["evaluate"]["outs"]
    assert (ROOT / "inputs" / "inventory.yaml").is_file()  # the repository root is a DVC project itself
    assert load_incumbent(ROOT / "inputs" / "incumbent.json") is None  # ... in which no plan is current yet
    assert (
        "data/incumbent.json" in stages["plan"]["deps"] and "--incumbent data/incumbent.json" in stages["plan"]["cmd"]
    )


def test_params_sections_pipeline_and_drift_are_typed(tmp_path: Path) -> None:
    from dreamshard.config.settings import resolve
    from dreamshard.errors import ConfigError

    cfg = resolve(ROOT / "params.yaml")
    assert cfg.pipeline.profile_deployment == "profile-batch/profile-batch" and cfg.pipeline.items_per_batch >= 1
    assert 0 < cfg.drift.threshold and cfg.drift.rounds >= 1
    bad = tmp_path / "p.yaml"
    bad.write_text("drift: {threshold: -1}\n")
    with pytest.raises(ConfigError, match="drift"):
        resolve(bad)
    bad.write_text("pipeline: {items_per_batch: 10, dvc_remot: x}\n")
    with pytest.raises(ConfigError, match="dvc_remot"):
        resolve(bad)


def test_params_text_overrides_only_the_backend(tmp_path: Path) -> None:
    from dreamshard.config.settings import params_text
    from dreamshard.errors import ConfigError

    src = ROOT / "params.yaml"
    assert params_text(str(src), None) == src.read_text()
    assert params_text(str(src), {"profile.backend": None}) == src.read_text()
    overridden = yaml.safe_load(params_text(str(src), {"profile.backend": "simulator"}))
    assert overridden["profile"]["backend"] == "simulator"
    assert {k: v for k, v in overridden.items() if k != "profile"} == {
        k: v for k, v in yaml.safe_load(src.read_text()).items() if k != "profile"
    }
    with pytest.raises(ConfigError, match="unknown backend 'tpu'"):
        params_text(str(src), {"profile.backend": "tpu"})


def test_stage_env_says_where_shards_go() -> None:
    from dreamshard.usecases.pipeline_steps import stage_env

    env = stage_env("/abs/store", "http://127.0.0.1:1", "run-1", "local")
    assert env == {
        "DREAMSHARD_PROFILE_STORE": "/abs/store",
        "DREAMSHARD_PROFILE_CAMPAIGN": "run-1",
        "DREAMSHARD_PROFILE_DISPATCH": "local",
        "DREAMSHARD_PROFILE_ENDPOINT": "http://127.0.0.1:1",
    }
    workers = stage_env("/abs/store", None, "run-1", "workers", "http://127.0.0.1:4200/api")
    assert workers["PREFECT_API_URL"] == "http://127.0.0.1:4200/api" and "DREAMSHARD_PROFILE_ENDPOINT" not in workers


def test_where_batches_run_and_which_stages_run() -> None:
    from dreamshard.errors import ConfigError
    from dreamshard.usecases.pipeline_steps import dispatch_for, runs

    def never() -> bool:
        raise AssertionError("no worker is asked about without a Prefect API")

    assert dispatch_for("auto", None, never) == "local"  # an ephemeral API: no worker can reach it
    assert dispatch_for("auto", "http://api", lambda: True) == "workers"
    assert dispatch_for("auto", "http://api", lambda: False) == "local"
    assert dispatch_for("local", "http://api", never) == "local"
    with pytest.raises(ConfigError, match="needs a Prefect server"):
        dispatch_for("workers", None, never)
    stale = {"train": ["changed"]}
    assert [s for s in ("profile", "train", "plan") if runs(s, stale, False, False)] == ["train"]
    assert [s for s in ("profile", "train", "plan") if runs(s, stale, False, True)] == ["profile", "train"]
    assert [s for s in ("profile", "train", "plan") if runs(s, {}, True, False)] == ["profile", "train", "plan"]


def test_push_inventory_versions_and_current_pointer(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "store"))
    inv = tiny_inventory(tmp_path / "inv.yaml")
    ref = push_inventory(store, inv, str(tmp_path / "store"))
    assert ref.changed and ref.key == inventory_key("tiny", inv.fingerprint())
    assert store.exists(current_inventory_key("tiny"))
    assert not push_inventory(store, inv).changed  # same content: no new version, pointer unchanged
    changed = change_one_table(inv, tmp_path / "inv2.yaml")
    ref2 = push_inventory(store, changed)
    got, got_ref = get_current_inventory(store, "tiny")
    assert got.fingerprint() == changed.fingerprint() and got_ref.key == ref2.key
    assert store.exists(ref.key)  # the old version stays


def test_inventory_push_cli_stores_without_event(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from dreamshard.cli.app import app

    tiny_inventory(tmp_path / "inv.yaml")
    res = CliRunner().invoke(
        app, ["inventory", "push", str(tmp_path / "inv.yaml"), "--store", str(tmp_path / "s"), "--no-event"]
    )
    assert res.exit_code == 0, res.output
    assert "stored tiny" in res.output


def test_deployments_schedules_triggers_and_pools() -> None:
    from dreamshard_flows.deploy import DRIFT_CRON, NIGHTLY_CRON, build_deployments

    deps = {d.name: d for d in build_deployments(store_uri="s3://bucket/plans", work_pools=True)}
    assert set(deps) == {
        "on-inventory-change",
        "nightly-and-when-due",
        "retrain-on-drift",
        "replan-on-drift",
        "profile-batch",
        "drift-monitor",
        "publish-plan",
    }
    replan = deps["on-inventory-change"]  # a new inventory version: the fast path, not a retrain
    (changed,) = replan.triggers
    assert changed.expect == {"dreamshard.inventory.changed"} and not replan.schedules
    assert changed.parameters["request"]["inventory_name"] == "{{ event.payload.inventory_name }}"
    assert "changed to version" in changed.parameters["request"]["reason"]
    assert replan.entrypoint == "dreamshard_flows.replan.replan_on_inventory_change"
    orch = deps["nightly-and-when-due"]  # retraining: on the schedule, or when the fast path says it is due
    assert orch.schedules[0].schedule.cron == NIGHTLY_CRON and orch.work_pool_name == "default"
    (due,) = orch.triggers
    assert due.expect == {"dreamshard.retrain.due"} and due.parameters["request"]["reason"].startswith("retrain due")
    assert orch.parameters["request"]["reason"] == "nightly schedule"
    (drifted,) = deps["retrain-on-drift"].triggers  # a drift on other hardware or out of the model's ranges
    assert drifted.expect == {"dreamshard.plan.drifted"}
    assert drifted.match.model_dump()["prefect.resource.id"] == "dreamshard.plan.*"
    assert drifted.match.model_dump()["dreamshard.drift.path"] == "retrain"
    assert drifted.parameters["request"]["reprofile"] is True
    (cheap,) = deps["replan-on-drift"].triggers  # only the measured costs moved: the fast path, forced
    assert cheap.expect == {"dreamshard.plan.drifted"} and cheap.match.model_dump()["dreamshard.drift.path"] == "replan"
    assert cheap.parameters["request"]["force"] is True and "reprofile" not in cheap.parameters["request"]
    assert cheap.parameters["request"]["inventory_name"] == "{{ event.payload.inventory_name }}"
    assert "{{ event.payload.path_reason }}" in cheap.parameters["request"]["reason"]
    assert deps["replan-on-drift"].entrypoint == replan.entrypoint and deps["replan-on-drift"].work_pool_name == "gpu"
    assert deps["profile-batch"].work_pool_name == "gpu" and deps["drift-monitor"].work_pool_name == "gpu"
    assert deps["drift-monitor"].schedules[0].schedule.cron == DRIFT_CRON
    for d in deps.values():  # workers import the installed package, whatever their working directory
        assert d.entrypoint.startswith("dreamshard_flows."), d.entrypoint
    declared = {d["name"]: d for d in yaml.safe_load((ROOT / "infra" / "prefect.yaml").read_text())["deployments"]}
    assert set(declared) == set(deps)
    for name, d in declared.items():  # infra/prefect.yaml and deploy.py declare the same deployments
        assert d["entrypoint"] == deps[name].entrypoint and d["work_pool"]["name"] == deps[name].work_pool_name


def test_artifact_keys_are_lowercase_dash() -> None:
    from dreamshard_flows.artifacts import artifact_key

    assert artifact_key("plan-devices", "My_Pool.v2") == "plan-devices-my-pool-v2"
    assert artifact_key("sharder-comparison", "") == "sharder-comparison"


def test_workspace_lock_is_exclusive(tmp_path: Path) -> None:
    from dreamshard.usecases.pipeline_steps import workspace_lock

    lock = tmp_path / "ws" / ".pipeline.lock"
    with workspace_lock(lock):
        with open(lock) as other, pytest.raises(BlockingIOError):
            fcntl.flock(other.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    with open(lock) as other:
        fcntl.flock(other.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)  # released


def _question(details: str = "**make plan p current**") -> Any:
    from dreamshard.values.review import ReviewQuestion

    return ReviewQuestion(
        inventory_name="inv",
        plan_id="p",
        change="approval",
        headline="make plan p current",
        details=details,
        timeout_s=10,
    )


def _ui(monkeypatch: pytest.MonkeyPatch, pause: Any) -> list[Any]:
    """The Prefect reviewer with its pause replaced by `pause`, and its log and artifact kept in a list."""
    import logging

    import dreamshard_flows.review as review
    import prefect.flow_runs

    kept: list[Any] = []
    monkeypatch.setattr(prefect.flow_runs, "pause_flow_run", pause)
    monkeypatch.setattr(review, "get_run_logger", lambda: logging.getLogger("test-review"))
    monkeypatch.setattr(review, "review_artifact", kept.append)
    return kept


def test_the_prefect_reviewer_gives_the_answer_or_none_when_nobody_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    """The UI's pause: the reviewer's answer with who and where; a pause that times out is no answer (the change
    waits, pending)."""
    from dreamshard_flows.review import ApprovalInput, PrefectReviewer
    from prefect.exceptions import FlowPauseTimeout

    _ui(monkeypatch, lambda wait_for_input, timeout, **kw: ApprovalInput(approve=False, comment="too risky"))
    got = PrefectReviewer().ask(_question())
    assert got is not None and not got.approve and got.comment == "too risky" and got.via == "the Prefect UI"
    _ui(monkeypatch, lambda wait_for_input, timeout, **kw: ApprovalInput(approve=True, reviewer="erin"))
    got = PrefectReviewer().ask(_question())
    assert got is not None and got.approve and got.reviewer == "erin"

    def timeout(wait_for_input: Any, timeout: int, **kw: Any) -> Any:
        raise FlowPauseTimeout("Flow run was paused and never resumed.")

    _ui(monkeypatch, timeout)
    assert PrefectReviewer().ask(_question()) is None


def test_the_review_pause_shows_the_question_on_the_runs_page(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reviewer decides on what the gate found: the question (decision, interval, evidence, moves, where the
    reports are) is the form's description and the run's `review-<inventory>` artifact, not only a "Pausing flow"
    line."""
    from dreamshard_flows.review import ApprovalInput, PrefectReviewer

    seen: list[Any] = []

    def pause(wait_for_input: Any, timeout: int, **kw: Any) -> Any:
        seen.append(wait_for_input)
        return ApprovalInput(approve=True)

    kept = _ui(monkeypatch, pause)
    question = _question(
        "**make plan p current**\n\nplan p / size_greedy: [0.9200, 0.9780]\n\n`/ws/reports/comparison.md`"
    )
    PrefectReviewer().ask(question)
    described = seen[0]._description  # type: ignore[attr-defined]
    assert kept == [question]
    for needle in ("make plan p current", "[0.9200, 0.9780]", "/ws/reports/comparison.md"):
        assert needle in described, needle


def test_library_never_imports_the_flows() -> None:
    import subprocess
    import sys

    code = (
        "import sys, dreamshard.cli.app, dreamshard.pipeline.workspace, dreamshard.evaluation.drift, "
        "dreamshard.profiling.batches; "
        "print(sorted(m for m in sys.modules "
        "if m.startswith(('flows', 'dreamshard_flows.orchestrator', 'prefect.flows'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/", check=True).stdout
    assert out.strip() == "[]"  # the CLI's entry point loads only dreamshard_flows.cli, which imports no Prefect
    import importlib.util

    assert importlib.util.find_spec("dreamshard_flows") is not None
    assert subprocess.run([sys.executable, "-c", "import flows"], capture_output=True, cwd="/").returncode != 0


def test_a_worker_is_dead_after_three_silent_heartbeat_intervals() -> None:
    from datetime import datetime, timedelta, timezone
    from types import SimpleNamespace

    from dreamshard_flows.fanout import worker_dead

    now = datetime.now(timezone.utc)

    def w(silent_s: float, interval: int = 2, status: str = "ONLINE") -> SimpleNamespace:
        return SimpleNamespace(
            status=status, last_heartbeat_time=now - timedelta(seconds=silent_s), heartbeat_interval_seconds=interval
        )

    assert not worker_dead(w(5.9), now) and worker_dead(w(6.1), now)
    assert worker_dead(w(0, status="WorkerStatus.OFFLINE"), now)
    assert not worker_dead(None, now)  # not known (yet): no verdict


def test_drift_finds_the_plans_own_inventory_version(tmp_path: Path) -> None:
    from dreamshard.errors import StoreError
    from dreamshard.sharders import get_sharder
    from dreamshard.usecases.drift import inventory_for
    from dreamshard.values import Topology

    inv = tiny_inventory(tmp_path / "inv.yaml")
    plan = get_sharder("size_greedy").shard(inv, Topology(num_devices=2, memory_per_device_gb=1.0))
    store_uri = str(tmp_path / "store")
    with pytest.raises(StoreError, match="neither in .* nor in the workspace"):
        inventory_for(plan, open_store(store_uri), None)
    push_inventory(open_store(store_uri), inv)
    push_inventory(open_store(store_uri), change_one_table(inv, tmp_path / "inv2.yaml"))  # current is another one
    assert inventory_for(plan, open_store(store_uri), None).fingerprint() == inv.fingerprint()
    ws = tmp_path / "ws"
    tiny_inventory(ws / "data" / "inventory.yaml")
    assert inventory_for(plan, open_store(str(tmp_path / "empty")), ws).fingerprint() == inv.fingerprint()


def test_a_fallback_is_reviewed_like_any_plan_that_would_become_current(tmp_path: Path) -> None:
    """The publish use case asks the reviewer before its fallback (the best measured baseline, for a version
    nothing current can serve) becomes current: a no keeps it rejected and not current; a yes makes it current."""
    import yaml

    from dreamshard.config.settings import resolve
    from dreamshard.documents import load_inventory
    from dreamshard.sharders import get_sharder
    from dreamshard.store import get_current, get_pointer, list_plans
    from dreamshard.usecases.publish import PublishRequest, publish
    from dreamshard.usecases.review import ScriptedReviewer
    from dreamshard.values import Topology
    from dreamshard.values.review import Review

    inv = tiny_inventory(tmp_path / "inv.yaml")
    params = tmp_path / "params.yaml"
    rules = {"store_uri": str(tmp_path / "store"), "allow_simulated": True, "min_rounds": 2, "require_human": True}
    params.write_text(
        yaml.safe_dump({"profile": {"backend": "simulator"}, "evaluate": {"rounds": 2}, "publish": rules})
    )
    topo = Topology(num_devices=2, memory_per_device_gb=1.0, batch_size=2048)
    store = open_store(str(tmp_path / "store"))
    no = ScriptedReviewer([Review(approve=False, comment="not today")])
    for reviewer in (no, ScriptedReviewer([Review(approve=True, reviewer="dana")])):
        slow = get_sharder("round_robin").shard(load_inventory(tmp_path / "inv.yaml"), topo)
        done = publish(PublishRequest(settings=resolve(params), plan=slow, inventory=inv, measure=True), reviewer)
        assert done.change == "fallback" and len(reviewer.asked) == 1, done.reason
        assert reviewer.asked[0].change == "fallback" and "fallback" in reviewer.asked[0].details
        if reviewer is no:
            assert done.status == "declined" and get_pointer(store, "tiny") is None
            assert "declined via" not in done.reason and any("not today" in r.reason for r in list_plans(store))
    assert done.status == "fallback" and done.fallback_ref is not None
    assert get_current(store, "tiny").plan_id == done.fallback_ref.plan_id
    assert get_pointer(store, "tiny").history == ()  # type: ignore[union-attr]


def test_stop_prefect_kills_what_ignores_sigterm_after_the_grace_and_refuses_a_bad_grace(tmp_path: Path) -> None:
    """infra/stop-prefect.sh: SIGTERM to each PID file's process group, SIGKILL after PREFECT_STOP_GRACE_S; the
    PID files it names but that do not exist are skipped in silence."""
    import os
    import signal
    import subprocess

    script = ROOT / "infra" / "stop-prefect.sh"
    stubborn = subprocess.Popen(
        [
            "setsid",
            "python3",
            "-c",
            "import signal, time\n"
            "signal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('up', flush=True)\n"
            "time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert stubborn.stdout is not None and stubborn.stdout.readline().strip() == "up"
        (tmp_path / "worker-w1.pid").write_text(str(stubborn.pid))
        env = {**os.environ, "PREFECT_RUN_DIR": str(tmp_path)}
        bad = subprocess.run(
            [str(script)], env={**env, "PREFECT_STOP_GRACE_S": "soon"}, capture_output=True, text=True, timeout=30
        )
        assert bad.returncode == 2 and bad.stderr.splitlines() == [
            "error: PREFECT_STOP_GRACE_S must be whole seconds, got 'soon'"
        ]
        assert stubborn.poll() is None and (tmp_path / "worker-w1.pid").exists()  # nothing was stopped
        res = subprocess.run(
            [str(script)], env={**env, "PREFECT_STOP_GRACE_S": "1"}, capture_output=True, text=True, timeout=30
        )
        assert res.returncode == 0 and res.stderr == "" and f"stopped worker-w1 (pid {stubborn.pid})" in res.stdout
        assert stubborn.wait(timeout=10) == -signal.SIGKILL and not (tmp_path / "worker-w1.pid").exists()
    finally:
        if stubborn.poll() is None:
            stubborn.kill()


def test_stop_prefect_freezes_a_worker_before_it_cancels_its_runs(tmp_path: Path) -> None:
    """infra/stop-prefect.sh: while a worker's runs are being cancelled and stopped, the worker takes no new run
    (it was left polling, and picked up a profiling batch into a process about to be killed). A stand-in worker
    "polls" (a line a tick) and a stand-in shutdown module counts its lines at the start and end of `cancel`."""
    import os
    import subprocess
    import time

    polls, events = tmp_path / "polls", tmp_path / "events"
    worker = subprocess.Popen(
        [
            "setsid",
            "python3",
            "-c",
            f"import time\nwhile True:\n    open({str(polls)!r}, 'a').write('poll\\n')\n    time.sleep(0.02)",
        ],
    )
    stub = tmp_path / "python"
    stub.write_text(
        "#!/usr/bin/env bash\n"
        f"n() {{ wc -l < {polls}; }}\n"
        f'echo "$3 $(n)" >> {events}\n'
        "if [[ $3 == cancel ]]; then sleep 1; fi\n"
        f'echo "$3-end $(n)" >> {events}\n'
    )
    stub.chmod(0o755)
    try:
        deadline = time.monotonic() + 10
        while not polls.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        (tmp_path / "worker-w1.pid").write_text(str(worker.pid))
        env = {**os.environ, "PREFECT_RUN_DIR": str(tmp_path), "PYTHON": str(stub), "PREFECT_STOP_GRACE_S": "1"}
        res = subprocess.run(
            [str(ROOT / "infra" / "stop-prefect.sh")], env=env, capture_output=True, text=True, timeout=60
        )
        assert res.returncode == 0 and f"stopped worker-w1 (pid {worker.pid})" in res.stdout, res.stdout + res.stderr
        seen = dict(line.split() for line in events.read_text().splitlines())
        assert list(seen) == ["cancel", "cancel-end", "finish", "finish-end"]
        assert int(seen["cancel"]) > 0 and seen["cancel"] == seen["cancel-end"] == seen["finish"], seen
        assert worker.wait(timeout=10) != 0
    finally:
        if worker.poll() is None:
            worker.kill()
