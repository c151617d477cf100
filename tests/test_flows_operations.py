"""Operations on the real Prefect server (the session's temporary one): a stopped worker leaves no
flow-run process; the drift monitor checks every inventory with a current plan and skips the rest with a reason;
deployments registered with `--root` and S3 name nothing of the registering host and run on a worker elsewhere;
a stage's output reaches the flow log as it comes, with heartbeats, and runs are named `<inventory>-<stage>-<version>`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from flows_support import tiny_inventory, write_params

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[1]


def _logs(flow_run_id: Any, until: str, timeout_s: float = 30) -> list[Any]:
    """The flow run's log entries, oldest first, once one holds `until` (they reach the API in batches)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.client.schemas.sorting import LogSort

    deadline = time.monotonic() + timeout_s
    with get_client(sync_client=True) as client:
        while True:
            logs = client.read_logs(
                LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])), sort=LogSort.TIMESTAMP_ASC
            )
            if any(until in e.message for e in logs) or time.monotonic() > deadline:
                return list(logs)
            time.sleep(0.5)


def _flow_run(flow_run_id: Any) -> Any:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return client.read_flow_run(flow_run_id)


def _publish(store_uri: str, tmp_path: Path, name: str, approved: bool) -> str:
    """A measured plan of a tiny inventory called `name`, published (approved: current) or rejected."""
    from dreamshard.evaluation import evaluate_plan
    from dreamshard.profiling import ProfileConfig
    from dreamshard.sharders import get_sharder
    from dreamshard.store import open_store, publish, push_inventory, reject
    from dreamshard.values import GateDecision, Topology

    inv = tiny_inventory(tmp_path / f"{name}.yaml").model_copy(update={"name": name})
    plan = get_sharder("size_greedy").shard(inv, Topology(num_devices=2, memory_per_device_gb=1.0, batch_size=256))
    plan = evaluate_plan(inv, plan, ProfileConfig(backend="simulator").oracle())
    decision = GateDecision(
        approved=approved,
        outcome="approved" if approved else "rejected",
        reason="by hand",
        plan_id=plan.plan_id,
        best_baseline="round_robin",
        best_baseline_ms=1.0,
        rounds=2,
        inventory_fingerprint=inv.fingerprint(),
    )
    store = open_store(store_uri)
    push_inventory(store, inv)
    (publish if approved else reject)(store, plan, decision)
    return inv.fingerprint()


def test_a_drift_round_checks_every_current_plan_and_skips_the_rest_with_a_reason(
    prefect_api: str, tmp_path: Path
) -> None:
    """#10: on a fresh store the monitor's run completes and its log says why nothing was checked; then the
    inventory with a current plan is checked (its task run `<inventory>-drift-<version>`) and the one without is
    skipped, by name."""
    from dreamshard_flows.drift import drift_check_flow
    from dreamshard_flows.requests import DriftRequest

    store = str(tmp_path / "store")
    params = write_params(tmp_path / "params.yaml", publish={"store_uri": store})
    state = drift_check_flow(DriftRequest(params_path=str(params)), return_state=True)
    assert state.is_completed(), state.message
    done = state.result()
    assert done.checks == [] and done.skipped == [f"no plan store at {store} yet: nothing to check"]
    run_id = state.state_details.flow_run_id
    assert any("skipped: no plan store at" in e.message for e in _logs(run_id, "skipped:"))
    assert _flow_run(run_id).name.startswith("all-drift-")
    Path(store).mkdir()  # a store, but nothing published in it
    done = drift_check_flow(DriftRequest(params_path=str(params)))
    assert done.checks == [] and done.skipped == [f"no inventory in {store} has a current plan yet: nothing to check"]

    fingerprint = _publish(store, tmp_path, "alpha", approved=True)
    _publish(store, tmp_path, "beta", approved=False)  # a plan, but none current
    state = drift_check_flow(DriftRequest(params_path=str(params)), return_state=True)
    assert state.is_completed(), state.message
    done = state.result()
    assert [c.inventory_name for c in done.checks] == ["alpha"] and not done.checks[0].drifted
    assert done.skipped == [f"inventory 'beta' has no current plan in {store} yet: nothing to check"]
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with get_client(sync_client=True) as client:
        tasks = client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[state.state_details.flow_run_id]))
        )
    assert f"alpha-drift-{fingerprint[:12]}" in {t.name for t in tasks}


def _stage_workspace(root: Path) -> None:
    """A DVC repository whose one stage writes a line, is silent for 3 s, and writes another."""
    root.mkdir()
    subprocess.run([str(BIN / "dvc"), "init", "--no-scm", "-q"], cwd=root, check=True, timeout=60)
    cmd = f"{sys.executable} -c \"import time; print('first line'); time.sleep(3); print('second line')\""
    (root / "dvc.yaml").write_text(f"stages:\n  train:\n    cmd: {cmd}\n")


def test_a_stage_streams_its_output_with_heartbeats_and_runs_are_named(
    prefect_api: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """#12: each line of a stage reaches the flow log when the stage writes it (not all at its end), a heartbeat
    line marks its silence, the task run is `<inventory>-<stage>-<version>` and a flow run that learns its
    version is renamed to it."""
    from dreamshard_flows.naming import rename_flow_run, run_name
    from dreamshard_flows.runner import PrefectRunner
    from prefect import flow

    import dreamshard.pipeline.stream as stream
    from dreamshard.usecases.pipeline_run import run_stage, stage_step

    monkeypatch.setattr(stream, "HEARTBEAT_S", 1.0)
    _stage_workspace(tmp_path / "ws")
    version = "0123456789abcdef"

    @flow(name="one-stage")
    def one_stage() -> str:
        rename_flow_run(run_name("tiny", "pipeline", version))
        runner = PrefectRunner()
        root = str(tmp_path / "ws")
        return runner.step(stage_step("train", "tiny", version), run_stage, runner, root, "train", True, {})

    state = one_stage(return_state=True)
    assert state.is_completed(), state.message
    run_id = state.state_details.flow_run_id
    logs = _logs(run_id, "stage train done")
    first = next(e for e in logs if e.message == "first line")
    second = next(e for e in logs if e.message == "second line")
    beats = [e for e in logs if "still running" in e.message and first.timestamp < e.timestamp < second.timestamp]
    assert (second.timestamp - first.timestamp).total_seconds() >= 2.5, "the lines reached the log together"
    assert len(beats) >= 2, [e.message for e in logs]
    assert _flow_run(run_id).name == "tiny-pipeline-0123456789ab"
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with get_client(sync_client=True) as client:
        (task,) = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run_id])))
    assert task.name == "tiny-train-0123456789ab"


def _pool(name: str) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectAlreadyExists

    with get_client(sync_client=True) as client:
        try:
            client.create_work_pool(WorkPoolCreate(name=name, type="process"))
        except ObjectAlreadyExists:
            pass


def _worker_env(api: str, run_dir: Path, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "PREFECT_API_URL": api,
        "PREFECT_WORKER_HEARTBEAT_SECONDS": "2",
        "PREFECT_WORKER_QUERY_SECONDS": "1",
        "PREFECT_HOME": str(run_dir / "prefect-home"),
        "PREFECT_RUN_DIR": str(run_dir),
        "VENV_BIN": str(BIN),
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        **extra,
    }


def _start_worker(pool: str, name: str, env: dict[str, str], cwd: Path) -> None:
    subprocess.run(
        [str(ROOT / "infra" / "start-worker.sh"), pool, name], env=env, cwd=cwd, check=True, capture_output=True
    )


def _stop(env: dict[str, str], grace_s: int = 5) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ROOT / "infra" / "stop-prefect.sh")],
        env={**env, "PREFECT_STOP_GRACE_S": str(grace_s)},
        capture_output=True,
        text=True,
        timeout=180,
    )


def _wait_final(flow_run_id: Any, timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        run = _flow_run(flow_run_id)
        if run.state is not None and run.state.is_final():
            return run
        time.sleep(1)
    raise AssertionError(f"flow run {flow_run_id} did not finish within {timeout_s} s: {run.state}")


def test_deployments_registered_with_a_root_run_on_a_worker_without_this_hosts_files(
    prefect_api: str, s3_env: Any, s3_prefix: str, tmp_path: Path
) -> None:
    """#11: `deploy --root DIR` with the store and the DVC remote on S3: no parameter names a path of the
    registering project; the project is then gone, and the drift monitor runs on a worker whose host holds only
    DIR/params.yaml (a fresh S3 store: the round completes, skipping with its reason)."""
    from dreamshard_flows.deploy import build_deployments

    project, host_b = tmp_path / "project", tmp_path / "host-b"
    project.mkdir()
    host_b.mkdir()
    store = f"s3://{s3_env.bucket}/{s3_prefix}/plans"
    write_params(
        project / "params.yaml",
        publish={"store_uri": store},
        pipeline={"dvc_remote": f"s3://{s3_env.bucket}/{s3_prefix}/dvc", "dvc_remote_endpoint": s3_env.endpoint_url},
    )
    cwd = Path.cwd()
    os.chdir(project)
    try:
        deployments = build_deployments("params.yaml", "runs/pipeline", None, True, "tiny", root=str(host_b))
    finally:
        os.chdir(cwd)
    requests = [d.parameters.get("request", {}) for d in deployments]
    requests += [t.parameters["request"] for d in deployments for t in d.triggers or []]
    for request in requests:
        for key, value in request.items():
            if isinstance(value, str) and key in ("params_path", "workspace", "store_uri", "dvc_remote"):
                assert str(project) not in value, (key, value)
                assert value.startswith(("s3://", str(host_b), "{{")), (key, value)
    shutil.copy(project / "params.yaml", host_b / "params.yaml")  # what host B holds
    shutil.rmtree(project)
    pool = "h11-gpu"
    _pool(pool)
    drift = next(d for d in deployments if d.name == "drift-monitor")
    drift.work_pool_name, drift.schedules = pool, []
    deployment_id = drift.apply()
    run_dir = tmp_path / "run"
    env = _worker_env(prefect_api, run_dir, DREAMSHARD_S3_ENDPOINT=s3_env.endpoint_url)
    from prefect.client.orchestration import get_client

    try:
        _start_worker(pool, "h11-worker", env, host_b)
        with get_client(sync_client=True) as client:
            flow_run = client.create_flow_run_from_deployment(deployment_id)
        run = _wait_final(flow_run.id, timeout_s=150)
        assert run.state.is_completed(), (run.state.name, run.state.message)
        assert any(f"no inventory in {store}" in e.message for e in _logs(run.id, "skipped:"))
    finally:
        _stop(env)
        with get_client(sync_client=True) as client:
            client.delete_deployment(deployment_id)


SLEEPER = """
import os, subprocess, sys, time
from pathlib import Path
from prefect import flow

@flow(name="sleeper")
def sleeper(marker: str) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    Path(marker).write_text(f"{os.getpid()} {child.pid}")
    time.sleep(300)
"""


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_stop_prefect_cancels_the_workers_runs_and_leaves_no_process(prefect_api: str, tmp_path: Path) -> None:
    """#9: a worker started by infra/start-worker.sh runs a flow run (in a session of its own) that started a child;
    infra/stop-prefect.sh leaves neither the worker, the flow-run process nor its child running, and the run is
    Cancelled."""
    from prefect.client.orchestration import get_client
    from prefect.deployments.runner import EntrypointType

    code = tmp_path / "code"
    code.mkdir()
    (code / "h9_sleeper.py").write_text(SLEEPER)
    sys.path.insert(0, str(code))
    try:
        import h9_sleeper  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(code))
    pool = "h9-pool"
    _pool(pool)
    deployment_id = h9_sleeper.sleeper.to_deployment(
        name="h9", work_pool_name=pool, entrypoint_type=EntrypointType.MODULE_PATH
    ).apply()
    run_dir = tmp_path / "run"
    env = _worker_env(prefect_api, run_dir, PYTHONPATH=str(code))
    marker = tmp_path / "pids"
    pids: list[int] = []
    try:
        _start_worker(pool, "h9-worker", env, tmp_path)
        pids.append(int((run_dir / "worker-h9-worker.pid").read_text()))
        with get_client(sync_client=True) as client:
            flow_run = client.create_flow_run_from_deployment(deployment_id, parameters={"marker": str(marker)})
        deadline = time.monotonic() + 120
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert marker.exists(), "the flow run did not start"
        pids += [int(p) for p in marker.read_text().split()]
        stopped = _stop(env)
        assert stopped.returncode == 0, stopped.stderr
        time.sleep(1)
        assert [p for p in pids if _running(p)] == [], stopped.stdout + stopped.stderr
        run = _wait_final(flow_run.id, timeout_s=30)
        assert run.state.is_cancelled(), (run.state.name, run.state.message)
    finally:
        for p in pids:
            if _running(p):
                os.kill(p, 9)
        with get_client(sync_client=True) as client:
            client.delete_deployment(deployment_id)
