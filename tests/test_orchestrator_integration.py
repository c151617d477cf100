"""The pipeline end to end on real servers: a Prefect server (temporary), two process workers on the `gpu` pool,
SeaweedFS as the plan store and the DVC remote, the simulator backend and tiny params.

    run 1 (batches in process) -> one changed table -> run 2: every stage, profiling batches on >= 2 workers,
    retrained, dvc pushed to S3, published with lineage; `plans reproduce` in a fresh directory gets the model
    the lineage names; the UI's artifacts read back through the API; run 3 (no change) runs nothing.
    A worker killed mid-batch: the batch runs again elsewhere; the merged measurements lose and double nothing.
    Drift: a simulator slower across the board (a busy host) is no drift; one whose tables on a device got slower
    -> dreamshard.plan.drifted with its path -> that path's deployment (replan- or retrain-on-drift) gets a run.
    A reviewer's rejection keeps the plan under rejected/ and `current` where it was.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from conftest import s3_environment
from flows_support import change_one_table, jsonl_ids, resize_one_table, tiny_inventory, write_params

from dreamshard.documents import dump_model, load_inventory, load_plan
from dreamshard.pipeline.incumbent import load_incumbent
from dreamshard.pipeline.workspace import INCUMBENT, INPUT_INCUMBENT, MEASUREMENTS, MODEL_DIR, PLAN, PipelineWorkspace
from dreamshard.store import get_current, get_pointer, list_plans, open_store
from dreamshard.values.lineage import dvc_md5, lock_outs

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[1]
ALL_STAGES = ["inventory", "incumbent", "tasks", "profile", "train", "plan", "evaluate"]
WORKERS = ("gpu-w1", "gpu-w2")
#: A Prefect API nothing listens on: a run that must not need Prefect gets it.
CLOSED_API = "http://127.0.0.1:9/api"
#: Task names that do work (a stage, a push, a publish, a measurement).
WORK_TASKS = {"dvc-stage", "dvc-push", "git-commit", "gate", "publish-plan", "measure-batch"}


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


class GpuWorkers:
    """Process workers on the `gpu` pool, started and stopped by infra/start-worker.sh / stop-prefect.sh (one flow
    run at a time each, 2 s heartbeats); their PIDs come from the scripts' PID files."""

    def __init__(self, api: str, env: dict[str, str], run_dir: Path) -> None:
        self.env = {
            **os.environ,
            **env,
            "PREFECT_API_URL": api,
            "PREFECT_WORKER_HEARTBEAT_SECONDS": "2",
            "PREFECT_WORKER_QUERY_SECONDS": "2",
            "PREFECT_HOME": str(run_dir / "prefect-home"),
            "PREFECT_RUN_DIR": str(run_dir),
            "VENV_BIN": str(BIN),
        }
        self.run_dir = run_dir

    def start(self, name: str) -> None:
        subprocess.run(
            [str(ROOT / "infra" / "start-worker.sh"), "gpu", name],
            env=self.env,
            check=True,
            capture_output=True,
            timeout=120,
        )

    def pids(self) -> dict[str, int]:
        out = {}
        for f in self.run_dir.glob("worker-*.pid"):
            pid = int(f.read_text())
            if Path(f"/proc/{pid}").exists():
                out[f.stem.removeprefix("worker-")] = pid
        return out

    def kill(self, name: str) -> list[int]:
        """SIGKILL the worker and every process it started (a host that died), by PID."""
        pid = self.pids()[name]
        pids = [pid, *_descendants(pid)]
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        (self.run_dir / f"worker-{name}.pid").unlink()
        return pids

    def stop_all(self) -> None:
        """Stop-prefect.sh, with 2 s for a worker to stop on SIGTERM before SIGKILL (a worker here took 10 s)."""
        subprocess.run(
            [str(ROOT / "infra" / "stop-prefect.sh")],
            env={**self.env, "PREFECT_STOP_GRACE_S": "2"},
            capture_output=True,
            timeout=120,
        )


def _wait_online(names: tuple[str, ...], timeout_s: float = 120, pool: str = "gpu") -> None:
    from prefect.client.orchestration import get_client

    deadline = time.monotonic() + timeout_s
    with get_client(sync_client=True) as client:
        while time.monotonic() < deadline:
            seen = {w.name for w in client.read_workers_for_work_pool(pool)}
            if set(names) <= seen:
                return
            time.sleep(0.5)
    raise AssertionError(f"workers {names} did not come online within {timeout_s} s")


@pytest.fixture(scope="module")
def gpu_workers(prefect_api: str, seaweed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GpuWorkers]:
    """The gpu and default process pools, the deployments, and two workers on the gpu pool."""
    from dreamshard_flows.deploy import build_deployments
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectAlreadyExists

    with get_client(sync_client=True) as client:
        for pool in ("gpu", "default"):
            try:
                client.create_work_pool(WorkPoolCreate(name=pool, type="process"))
            except ObjectAlreadyExists:
                pass
    for d in build_deployments(work_pools=True, inventory_name="tiny"):
        if d.name == "replan-on-drift":
            d.work_pool_name = "default"  # nothing serves the default pool here: its run is the evidence
        if d.name in ("profile-batch", "retrain-on-drift", "replan-on-drift", "nightly-and-when-due"):
            d.apply()
    workers = GpuWorkers(prefect_api, {**seaweed.env()}, tmp_path_factory.mktemp("workers"))
    try:
        for name in WORKERS:
            workers.start(name)
        _wait_online(WORKERS)
        yield workers
    finally:
        workers.stop_all()


def _params(path: Path, prefix: str, seaweed, items_per_batch: int = 6, **overrides: dict[str, Any]) -> Path:
    return write_params(
        path,
        pipeline={
            "dvc_remote": f"s3://{seaweed.bucket}/{prefix}/dvc",
            "dvc_remote_endpoint": seaweed.endpoint_url,
            "items_per_batch": items_per_batch,
            "batch_attempts": 3,
            "batch_timeout_s": 300,
        },
        publish={"store_uri": f"s3://{seaweed.bucket}/{prefix}/plans"},
        **overrides,
    )


def _task_runs_since(since: datetime) -> list[Any]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import TaskRunFilter, TaskRunFilterStartTime

    with get_client(sync_client=True) as client:
        return client.read_task_runs(task_run_filter=TaskRunFilter(start_time=TaskRunFilterStartTime(after_=since)))


def _batch_runs(tag: str) -> list[Any]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterTags

    with get_client(sync_client=True) as client:
        return client.read_flow_runs(flow_run_filter=FlowRunFilter(tags=FlowRunFilterTags(all_=[tag])))


def _run(args: list[str], cwd: Path, **extra_env: str) -> str:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", **extra_env}
    res = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, f"{' '.join(args)} failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return res.stdout


def _in_background(fn: Any) -> tuple[threading.Thread, dict[str, Any]]:
    """Run fn() in a thread; its return value lands in result["value"], an exception in result["error"]."""
    result: dict[str, Any] = {}

    def target() -> None:
        try:
            result["value"] = fn()
        except BaseException as e:  # surfaced by the caller
            result["error"] = e

    t = threading.Thread(target=target, daemon=True)
    t.start()
    return t, result


@dataclass(frozen=True)
class Published:
    """Two versions of the tiny inventory through the pipeline: the first by the CLI's in-process runner (no
    Prefect), the second (one table resized) as the Prefect flow with its profiling batches on the workers; what
    the tests of this module start from."""

    root: Path  # the fixture's directory: params.yaml, inv.yaml, inv2.yaml, ws/
    prefix: str  # the S3 key prefix of its store and DVC remote
    store_uri: str
    first_output: str  # what `dreamshard pipeline run --runner in-process` printed for the first version
    first: Any  # the first version's current plan (get_current)
    second: Any
    plan_id: str  # the plan current after the second version
    lineage: Any  # its lineage

    @property
    def ws(self) -> Path:
        return self.root / "ws"

    @property
    def params(self) -> Path:
        return self.root / "params.yaml"


@pytest.fixture(scope="module")
def published(gpu_workers: GpuWorkers, seaweed: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Published]:
    """The module's workspace and store, made once (each test that needs them asks for them: no test depends on
    another having run)."""
    from dreamshard_flows.orchestrator import retrain_on_inventory_change
    from dreamshard_flows.requests import OrchestratorRequest

    root = tmp_path_factory.mktemp("published")
    prefix = f"t-{uuid.uuid4().hex[:10]}"
    with pytest.MonkeyPatch.context() as mp:
        s3_environment(mp, seaweed, root)
        params = _params(root / "params.yaml", prefix, seaweed)
        inv = tiny_inventory(root / "inv.yaml")
        store_uri = f"s3://{seaweed.bucket}/{prefix}/plans"
        # The first version by the CLI's in-process runner, in a process whose Prefect API is a closed port: it
        # must not need one (test_the_first_version_ran_in_process_with_no_prefect_api reads its output).
        command = [str(BIN / "dreamshard"), "pipeline", "run", "--runner", "in-process", "-i", str(root / "inv.yaml")]
        first_output = _run(
            [*command, "-w", str(root / "ws"), "--params", str(params)], root, PREFECT_API_URL=CLOSED_API
        )
        first = get_current(open_store(store_uri), "tiny")
        assert first is not None and load_incumbent(root / "ws" / INCUMBENT) is None  # no plan was current before
        # One table changes: one run does everything, its profiling batches spread over both workers.
        resize_one_table(inv, root / "inv2.yaml")  # another schema: the new plan need not beat the current one
        request = OrchestratorRequest(
            workspace=str(root / "ws"), params_path=str(params), inventory_path=str(root / "inv2.yaml")
        )
        second = retrain_on_inventory_change(request)  # a server, the deployment and live workers: auto -> workers
        current = get_current(open_store(store_uri), "tiny")
        yield Published(root, prefix, store_uri, first_output, first, second, current.plan_id, current.lineage)


def test_changed_table_runs_once_on_workers_pushed_published_reproducible(
    published: Published, gpu_workers: GpuWorkers, s3_env: Any, tmp_path: Path
) -> None:
    from dreamshard_flows.orchestrator import retrain_on_inventory_change
    from dreamshard_flows.requests import OrchestratorRequest
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    from dreamshard.profiling.batches import list_shards

    ws_dir, params, store_uri, s3_prefix = published.ws, published.params, published.store_uri, published.prefix
    first, second = published.first, published.second
    store = open_store(store_uri)

    def run(inventory: Path, dispatch: str) -> Any:
        return retrain_on_inventory_change(
            OrchestratorRequest(
                workspace=str(ws_dir), params_path=str(params), inventory_path=str(inventory), dispatch=dispatch
            )
        )

    assert second.dispatch == "workers" and second.ran == ALL_STAGES, second.reason
    shards = list_shards(store, second.campaign)
    assert len(shards) >= 3
    by_worker = {s.worker.worker for s in shards}
    assert len(by_worker) >= 2 and by_worker <= set(WORKERS), by_worker  # >= 2 distinct worker processes
    assert len({(s.worker.worker, s.worker.pid) for s in shards}) >= 2
    assert {s.worker.ppid for s in shards} <= set(gpu_workers.pids().values())  # each ran under its worker
    ws = PipelineWorkspace(ws_dir)
    # The new version was planned from the plan current when it arrived: search started from it, verify measured it.
    incumbent = load_incumbent(ws.path(INCUMBENT))
    assert incumbent is not None and incumbent.plan_id == first.plan_id
    verified = load_plan(ws.path(PLAN)).verification
    assert verified is not None and any(c.source.startswith("current") for c in verified.candidates), verified
    ids = jsonl_ids(ws.path(MEASUREMENTS))
    assert ids == [i for s in shards for i in s.item_ids] and len(ids) == len(set(ids))  # merged, nothing lost

    # Retrained, pushed, published with lineage.
    lock = lock_outs(ws.lock_text())
    current = get_current(store, "tiny")
    assert second.outcome is not None and second.outcome.status == "published", second.reason
    assert current.plan_id == second.outcome.plan_id
    lineage = current.lineage
    assert lineage is not None and lineage.model_md5 == lock[MODEL_DIR] != first.lineage.model_md5
    assert lineage.measurements_md5 == lock[MEASUREMENTS] == dvc_md5(ws.path(MEASUREMENTS))
    assert lineage.flow_run_id == second.campaign and lineage.git_revision == ws.head() == second.git_revision
    assert lineage.dvc_remote == f"s3://{s3_env.bucket}/{s3_prefix}/dvc"
    assert lineage.dvc_remote_endpoint == s3_env.endpoint_url and lineage.dvc_lock == ws.lock_text()
    assert ws.tags(f"published/{current.plan_id}") == [f"published/{current.plan_id}"]
    remote = open_store(f"s3://{s3_env.bucket}/{s3_prefix}/dvc")
    for md5 in (lineage.model_md5, lineage.measurements_md5):
        assert remote.exists(f"files/md5/{md5[:2]}/{md5[2:]}"), md5  # dvc push reached SeaweedFS

    shown = _run(
        [str(BIN / "dreamshard"), "plans", "show", current.plan_id, "--store", store_uri, "--lineage"], tmp_path
    )
    assert (
        f"model_md5              {lineage.model_md5}" in shown and f"flow_run_id            {second.campaign}" in shown
    )

    # A fresh directory gets exactly that data and model from the remote.
    out = _run(
        [
            str(BIN / "dreamshard"),
            "plans",
            "reproduce",
            current.plan_id,
            "--store",
            store_uri,
            "--into",
            str(tmp_path / "repro"),
        ],
        tmp_path,
    )
    assert f"md5 {lineage.model_md5} (lineage: {lineage.model_md5}) - match" in out
    assert dvc_md5(tmp_path / "repro" / MODEL_DIR) == lineage.model_md5
    assert (tmp_path / "repro" / INPUT_INCUMBENT).read_bytes() == ws.path(INPUT_INCUMBENT).read_bytes()  # restored

    # The run's artifacts, as the UI lists them.
    keys = [
        "plan-devices-tiny",
        "sharder-comparison-tiny",
        "publish-decision-tiny",
        "plan-lineage-tiny",
        "profile-batches-tiny",
        "train-metrics-tiny",
    ]
    with get_client(sync_client=True) as client:
        arts = client.read_latest_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=keys)))
    found = {a.key: a for a in arts}
    assert set(found) == set(keys), sorted(found)
    assert current.plan_id in str(found["plan-lineage-tiny"].data) and lineage.model_md5 in str(
        found["plan-lineage-tiny"].data
    )
    batch_rows = (
        json.loads(found["profile-batches-tiny"].data)
        if isinstance(found["profile-batches-tiny"].data, str)
        else found["profile-batches-tiny"].data
    )
    assert {r["worker"] for r in batch_rows} == by_worker

    # Nothing changed: no stage, no push, no publish, no batch; `current` stays.
    t3 = datetime.now(timezone.utc)
    third = run(published.root / "inv2.yaml", "workers")
    assert third.ran == [] and third.outcome is None and "nothing to do" in third.reason
    assert third.current_plan_id == current.plan_id
    names = {r.name if r.name in ALL_STAGES else r.name.rsplit("-", 1)[0] for r in _task_runs_since(t3)}
    assert names and not names & (WORK_TASKS | set(ALL_STAGES)), names  # only the checks ran
    assert get_current(store, "tiny").plan_id == current.plan_id


def test_the_first_version_ran_in_process_with_no_prefect_api_and_a_run_with_nothing_changed_stops(
    published: Published, s3_env: Any
) -> None:
    """`dreamshard pipeline run --runner in-process` (the fixture's first version, its Prefect API a closed port):
    every stage once, the steps' log lines on stdout, the plan decided and stored with the run's id in its
    lineage, no Prefect API named. The current inputs again, from the library under the in-process runner: no
    stage, no publish, the decision already made is reported (a plan is decided once)."""
    from dreamshard.usecases.pipeline_run import PipelineRun, run_pipeline
    from dreamshard.usecases.runner import InProcessRunner

    out, first = published.first_output, published.first
    assert "stage train done" in out and "published plan" in out and "Prefect" not in out
    assert first.lineage is not None and first.lineage.flow_run_id
    assert f"ran {', '.join(ALL_STAGES)}; committed, pushed; published plan {first.plan_id}" in out
    inventory = load_inventory(published.root / "inv2.yaml")
    runner = InProcessRunner()
    again = run_pipeline(PipelineRun(workspace=published.ws, params=published.params, inventory=inventory), runner)
    assert again.ran == [] and again.outcome is None and "nothing to do" in again.reason
    assert again.current_plan_id == published.plan_id and "publish-plan" not in runner.steps
    assert runner.steps[:3] == ["current-plan", "prepare-workspace", "push-inventory"]
    assert runner.names == [f"tiny-pipeline-{inventory.fingerprint()[:12]}"] and again.campaign == runner.run_id()


def test_fresh_clone_pull_and_repro_of_training_gives_the_published_model(
    published: Published, s3_env: Any, tmp_path: Path
) -> None:
    lineage = published.lineage
    fresh = tmp_path / "fresh"
    _run(["git", "clone", "-q", str(published.ws), str(fresh)], tmp_path)
    _run([str(BIN / "dreamshard"), "pipeline", "init", str(fresh)], tmp_path)  # the code link; remote from the clone
    _run([str(BIN / "dvc"), "pull"], fresh)
    assert dvc_md5(fresh / MEASUREMENTS) == lineage.measurements_md5
    _run([str(BIN / "dvc"), "repro", "--force", "--single-item", "train"], fresh)
    assert dvc_md5(fresh / MODEL_DIR) == lineage.model_md5


def test_killed_worker_batch_is_retried_without_loss_or_duplicate(
    gpu_workers: GpuWorkers, s3_env, s3_prefix: str, tmp_path: Path
) -> None:
    from prefect.client.orchestration import get_client

    from dreamshard.config.settings import resolve
    from dreamshard.profiling.batches import read_shard
    from dreamshard.usecases import profile as profile_uc
    from dreamshard.usecases import taskset as tasks_uc

    # Every device timing takes 400 ms of wall time: a batch lasts seconds, long enough to kill its worker.
    params = _params(
        tmp_path / "params.yaml",
        s3_prefix,
        s3_env,
        items_per_batch=5,
        profile={"simulator_latency_ms": 400.0, "num_placements": 2},
    )
    pool = tiny_inventory(tmp_path / "inv.yaml")
    dump_model(
        tasks_uc.run(tasks_uc.TasksRequest(settings=resolve(params), inventory=pool)).taskset, tmp_path / "tasks.json"
    )
    store_uri = f"s3://{s3_env.bucket}/{s3_prefix}/shards"
    store = open_store(store_uri)
    campaign = f"kill-{s3_prefix}"
    request = profile_uc.BatchedProfileRequest(
        settings=resolve(params),
        inventory=pool,
        tasks=tmp_path / "tasks.json",
        out=tmp_path / "m.jsonl",
        store_uri=store_uri,
        campaign=campaign,
        dispatch="workers",
    )
    specs = profile_uc.plan_stage_batches(request, campaign)
    t, result = _in_background(lambda: profile_uc.run_batched(request, log=lambda _m: None))
    victim = None
    deadline = time.monotonic() + 120
    with get_client(sync_client=True) as client:
        while victim is None and time.monotonic() < deadline and t.is_alive():
            seen = _batch_runs(campaign)
            # the batch's latest attempt only: on a loaded machine the test server can fail to store heartbeats
            # ("database is locked"), the dispatcher then takes a live worker for dead and submits its batch again,
            # and an earlier attempt that is still running is no longer the one it watches
            latest: dict[str, Any] = {}
            for fr in seen:
                batch, _, attempt = fr.name.rpartition("-try")
                if batch not in latest or int(attempt) > int(latest[batch].name.rpartition("-try")[2]):
                    latest[batch] = fr
            for fr in latest.values():
                worker = (fr.labels or {}).get("prefect.worker.name")
                if fr.state is not None and fr.state.is_running() and worker in gpu_workers.pids():
                    victim = (fr, worker)
                    break
            time.sleep(0.2)
        assert victim is not None, "no batch was seen running on a worker"
        killed_run, killed_worker = victim
        gpu_workers.kill(killed_worker)
        t.join(timeout=240)
        assert not t.is_alive() and "error" not in result, result.get("error")
        runs = _batch_runs(campaign)
        crashed = client.read_flow_run(killed_run.id)
    assert crashed.state is not None and crashed.state.is_crashed()
    assert f"worker {killed_worker} stopped heartbeating" in (crashed.state.message or "")
    retried = sorted(
        (r for r in runs if r.name.rsplit("-try", 1)[0] == killed_run.name.rsplit("-try", 1)[0]),
        key=lambda r: int(r.name.rsplit("-try", 1)[1]),
    )
    assert retried[-1].id != killed_run.id and retried[-1].state.name == "Completed"  # submitted again, and ran
    assert {r.state.name for r in retried} <= {"Crashed", "Completed"}
    spec = next(s for s in specs if f"-profile-{s.batch_id}-try" in killed_run.name)
    shard = read_shard(store, spec)
    assert shard is not None and shard.worker.worker != killed_worker  # measured again, on the other worker
    ids = jsonl_ids(tmp_path / "m.jsonl")
    assert ids == [i for s in specs for i in s.item_ids] and len(ids) == len(set(ids))  # no loss, no duplicate
    assert len([k for k in store.list_keys(f"profiling/{campaign}/") if k.endswith(".shard.json")]) == len(specs)


def test_a_busy_host_is_no_drift_and_a_slower_device_starts_its_paths_deployment(
    published: Published, gpu_workers: GpuWorkers, s3_env: Any, tmp_path: Path
) -> None:
    from dreamshard_flows.drift import drift_check_flow
    from dreamshard_flows.requests import DriftRequest
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        ArtifactFilter,
        ArtifactFilterKey,
        DeploymentFilter,
        DeploymentFilterName,
    )

    def check(**profile: Any) -> Any:
        params = write_params(
            tmp_path / f"p{len(profile)}.yaml", publish={"store_uri": published.store_uri}, profile=profile
        )
        done = drift_check_flow(
            DriftRequest(inventory_name="tiny", params_path=str(params), workspace=str(published.ws))
        )
        assert not done.skipped and len(done.checks) == 1
        return done.checks[0]

    def drift_runs() -> list[Any]:
        with get_client(sync_client=True) as client:
            return client.read_flow_runs(
                deployment_filter=DeploymentFilter(
                    name=DeploymentFilterName(any_=["retrain-on-drift", "replan-on-drift"])
                )
            )

    steady = check()
    assert steady.plan_id == published.plan_id and not steady.drifted and steady.drift == pytest.approx(0.0)
    busy = check(simulator_slowdown=2.0)  # every cost twice: the absolute figure +100%, the paired ratio unmoved
    assert not busy.drifted and busy.drift == pytest.approx(0.0, abs=1e-9) and busy.host_change == pytest.approx(1.0)
    current = get_current(open_store(published.store_uri), "tiny")
    on_zero = {name: 4.0 for name, d in current.placement.items() if d == 0}
    slowed = check(simulator_table_slowdown=on_zero)
    assert slowed.drifted and slowed.path in ("replan", "retrain") and slowed.path_reason
    deadline = time.monotonic() + 60
    while not (runs := drift_runs()) and time.monotonic() < deadline:
        time.sleep(0.5)
    # Exactly one: neither the steady nor the busy check emitted anything (their events would have come first).
    assert len(runs) == 1, "the plan-drifted trigger started no deployment"
    with get_client(sync_client=True) as client:
        deployment = client.read_deployment(runs[0].deployment_id)
    assert deployment.name == f"{slowed.path}-on-drift", (deployment.name, slowed.path_reason)
    request = runs[0].parameters["request"]
    assert request["inventory_name"] == "tiny" and slowed.path_reason in request["reason"]
    assert request.get("reprofile" if slowed.path == "retrain" else "force") is True
    with get_client(sync_client=True) as client:
        client.delete_flow_run(runs[0].id)  # nothing serves the default pool here; the run is the evidence
        (report,) = client.read_latest_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["drift-report-tiny"]))
        )
    assert "+100.0%" in str(report.data) and slowed.path in str(report.data)  # the trend: the busy host's +100% ms


def test_replan_fast_path_publishes_without_stages_and_a_version_out_of_range_makes_a_retrain_due(
    published: Published, gpu_workers: GpuWorkers, s3_env: Any, tmp_path: Path
) -> None:
    from dreamshard_flows.replan import replan_on_inventory_change
    from dreamshard_flows.requests import ReplanRequest
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        ArtifactFilter,
        ArtifactFilterKey,
        DeploymentFilter,
        DeploymentFilterName,
    )

    from dreamshard.store import push_inventory
    from dreamshard.values import Inventory

    store = open_store(published.store_uri)
    # The packaged model in the world it learned (batch 2048, 2-16 devices; the tiny workspace model saw 2-3 tables
    # per device only), the heuristics among the verified candidates (a deterministic simulator: ties pass).
    params = write_params(
        tmp_path / "p.yaml",
        publish={"store_uri": published.store_uri, "allow_simulated": True, "min_rounds": 2},
        topology={"batch_size": 2048},
        evaluate={"rounds": 2},
        plan={
            "num_devices": 2,
            "verify": 4,
            "verify_rounds": 1,
            "samples": 0,
            "candidates": ["dim_greedy", "lookup_greedy", "size_greedy", "size_lookup_greedy"],
        },
    )
    request = ReplanRequest(
        inventory_name="tiny",
        params_path=str(params),
        workspace=str(published.ws),
        model=str(Path(__file__).resolve().parents[1] / "dreamshard" / "pretrained"),
        reason="test: a new version",
    )
    current = get_current(store, "tiny")
    inv = load_inventory(published.ws / "data" / "inventory.yaml")
    since = datetime.now(timezone.utc)
    push_inventory(store, change_one_table(inv, tmp_path / "v2.yaml"))  # in range: the fast path
    result = replan_on_inventory_change(request)
    done = result.publication
    assert result.outcome in ("published", "not-published") and done is not None and done.ref is not None, result.reason
    assert result.previous_plan_id == current.plan_id
    assert result.diff is not None and result.diff.old_plan_id == current.plan_id  # published or not: what it moves
    names = {t.name.rsplit("-", 1)[0] for t in _task_runs_since(since)}
    assert "replan" in names and not names & {"dvc-stage", "profile", "train"}, names  # no stage ran

    t0 = min(inv.tables, key=lambda t: t.num_embeddings)  # small enough to fit at dim 1024
    wide = Inventory(
        name="tiny", tables=tuple(t.model_copy(update={"embedding_dim": 1024}) if t is t0 else t for t in inv.tables)
    )
    push_inventory(store, wide)  # a dim the model never saw (it learned 4-512): a retrain is due
    due = replan_on_inventory_change(request.model_copy(update={"reason": "test: out of range"}))
    assert due.outcome == "retrain-due" and any("embedding_dim" in r for r in due.retrain_reasons), due.retrain_reasons
    assert get_current(store, "tiny").plan_id == (
        done.ref.plan_id if result.outcome == "published" else current.plan_id
    )  # nothing published for it

    def due_runs() -> list[Any]:
        with get_client(sync_client=True) as client:
            return client.read_flow_runs(
                deployment_filter=DeploymentFilter(name=DeploymentFilterName(any_=["nightly-and-when-due"]))
            )

    deadline = time.monotonic() + 60
    while not (runs := due_runs()) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert len(runs) == 1, "dreamshard.retrain.due did not start the retrain deployment"
    why = runs[0].parameters["request"]
    assert (
        why["inventory_name"] == "tiny"
        and why["reason"].startswith("retrain due:")
        and "embedding_dim" in why["reason"]
    )
    with get_client(sync_client=True) as client:
        client.delete_flow_run(runs[0].id)  # nothing serves the default pool here; the run is the evidence
        (report,) = client.read_latest_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["replan-tiny"]))
        )
    assert "retrain-due" in str(report.data) and "test: out of range" in str(report.data)


def test_reviewer_rejection_keeps_the_plan_rejected(
    published: Published, gpu_workers: GpuWorkers, s3_env: Any, tmp_path: Path
) -> None:
    from dreamshard_flows.publish import publish_workspace_plan
    from dreamshard_flows.requests import WorkspacePublishRequest
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterState, FlowRunFilterStateType
    from prefect.client.schemas.objects import StateType
    from prefect.flow_runs import resume_flow_run

    ws = PipelineWorkspace(published.ws)
    ws.repro("plan", force=True)  # a new plan id: the workspace's plan was decided already (one decision per id)
    ws.repro("evaluate")
    # a store where nothing is current: whatever the gate decides would make a plan current, so the reviewer is asked
    fresh = str(tmp_path / "review-store")
    store = open_store(fresh)
    request = WorkspacePublishRequest(workspace=str(published.ws), require_human=True, store_uri=fresh)
    t, result = _in_background(lambda: publish_workspace_plan(request))
    paused = None
    deadline = time.monotonic() + 90
    with get_client(sync_client=True) as client:
        while paused is None and time.monotonic() < deadline:
            runs = client.read_flow_runs(
                flow_run_filter=FlowRunFilter(
                    state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.PAUSED]))
                )
            )
            paused = next((r.id for r in runs if client.read_flow(r.flow_id).name == "publish-plan"), None)
            time.sleep(0.5)
    assert paused is not None, "publish-plan did not pause for a reviewer"
    resume_flow_run(paused, run_input={"approve": False, "comment": "needs a second look"})
    t.join(timeout=120)
    assert not t.is_alive() and "error" not in result, result.get("error")
    outcome = result["value"]
    assert outcome.status == "declined" and "declined via the Prefect UI: needs a second look" in outcome.reason
    assert get_pointer(store, "tiny") is None  # nothing became current
    assert all(r.status == "rejected" for r in list_plans(store, "tiny")) and list_plans(store, "tiny")
    assert PipelineWorkspace(published.ws).tags(f"rejected/{outcome.plan_id}") == [f"rejected/{outcome.plan_id}"]


def test_a_known_error_in_a_task_is_logged_as_its_one_line(prefect_api: str, tmp_path: Path) -> None:
    """A DreamshardError failing a task fails the flow run, reaches the caller as its own
    type, and is in the run's logs (as the UI shows them) as its one line, with no traceback."""
    from dreamshard_flows.orchestrator import retrain_on_inventory_change
    from dreamshard_flows.requests import OrchestratorRequest
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    params = write_params(tmp_path / "params.yaml", publish={"store_uri": str(tmp_path / "store")})
    state = retrain_on_inventory_change(
        OrchestratorRequest(workspace=str(tmp_path / "ws"), params_path=str(params), inventory_name="absent"),
        return_state=True,
    )
    assert state.is_failed()
    with pytest.raises(Exception) as raised:
        state.result()
    assert type(raised.value).__name__ == "StoreError" and "no inventory 'absent'" in str(raised.value)
    flow_run_id = state.state_details.flow_run_id
    deadline = time.monotonic() + 30
    with get_client(sync_client=True) as client:
        while True:
            logs = client.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])))
            errors = [entry.message for entry in logs if entry.level >= 40]
            if len(errors) >= 2 or time.monotonic() > deadline:  # the task's and the flow's (sent in batches)
                break
            time.sleep(0.5)
    assert errors and all("Traceback" not in m and "\n" not in m for m in errors), errors
    assert any(m.startswith("StoreError: no inventory 'absent' in ") for m in errors), errors


def test_the_replan_deployment_runs_on_a_worker_elsewhere_and_publishes(prefect_api: str, tmp_path: Path) -> None:
    """Deployments registered from a project directory with relative paths (the README's
    `python -m dreamshard_flows.deploy --work-pools`: its function), a process worker started from another
    directory, `dreamshard inventory push` in the project: the event starts the replan deployment, its run
    completes on that worker and a plan of the pushed version is current in the store. The retrain deployments'
    registered parameters resolve from any directory: absolute, and the params file exists."""
    from dreamshard_flows.deploy import build_deployments
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId
    from prefect.exceptions import ObjectAlreadyExists

    from dreamshard.usecases.pipeline_steps import run_setup

    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    # The packaged model in the world it learned (as the fast-path test above), a local store named relatively.
    write_params(
        project / "params.yaml",
        publish={"store_uri": "plans", "allow_simulated": True, "min_rounds": 2},
        topology={"batch_size": 2048},
        evaluate={"rounds": 2},
        plan={"num_devices": 2, "verify": 2, "verify_rounds": 1, "samples": 0, "candidates": ["dim_greedy", "lpt"]},
    )
    inv = tiny_inventory(project / "inv.yaml")
    # Pools of this test alone: the module's gpu workers (when running) must not take the run.
    pools = {"gpu": "h4-gpu", "default": "h4-default"}
    cwd = Path.cwd()
    os.chdir(project)
    try:
        deployments = build_deployments("params.yaml", "runs/pipeline", None, work_pools=True, inventory_name="tiny")
    finally:
        os.chdir(cwd)
    ids = []
    with get_client(sync_client=True) as client:
        for pool in pools.values():
            try:
                client.create_work_pool(WorkPoolCreate(name=pool, type="process"))
            except ObjectAlreadyExists:
                pass
    for d in deployments:
        d.work_pool_name = pools[d.work_pool_name]
        if d.name == "drift-monitor":
            d.schedules = []  # hourly: not while this test runs
        ids.append(d.apply())
    env = {
        **os.environ,
        "PREFECT_API_URL": prefect_api,
        "PREFECT_WORKER_HEARTBEAT_SECONDS": "2",
        "PREFECT_WORKER_QUERY_SECONDS": "1",
        "PREFECT_HOME": str(tmp_path / "prefect-home"),
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    worker = subprocess.Popen(
        [
            str(BIN / "prefect"),
            "worker",
            "start",
            "--pool",
            pools["gpu"],
            "--type",
            "process",
            "--name",
            "h4-elsewhere",
        ],
        cwd=elsewhere,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its flow-run processes in its group: stopped with it, by its id
    )
    try:
        _wait_online(("h4-elsewhere",), pool=pools["gpu"])
        replan = next(i for d, i in zip(deployments, ids, strict=True) if d.name == "on-inventory-change")
        pushed = subprocess.run(
            [str(BIN / "dreamshard"), "inventory", "push", "inv.yaml", "--store", "plans"],
            cwd=project,
            env=env,  # PREFECT_API_URL: the installed notifier emits dreamshard.inventory.changed
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert pushed.returncode == 0 and "emitted dreamshard.inventory.changed" in pushed.stdout, (
            pushed.stdout + pushed.stderr
        )
        run = _final_run(replan, timeout_s=150)
        assert run.state is not None and run.state.is_completed(), (run.state, run.state and run.state.message)
        assert (run.labels or {}).get("prefect.worker.name") == "h4-elsewhere"
        assert run.parameters["request"]["store_uri"] == str(project / "plans")  # the event's store
        current = get_current(open_store(str(project / "plans")), "tiny")
        assert current.inventory_fingerprint == inv.fingerprint()  # the pushed version's plan is current
        # The retrain deployments, as the server holds them: every path absolute and resolvable from elsewhere.
        with get_client(sync_client=True) as client:
            held = client.read_deployments(deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=ids)))
        retrain = [d for d in held if d.name in ("nightly-and-when-due", "retrain-on-drift")]
        assert len(retrain) == 2
        os.chdir(elsewhere)
        try:
            for d in retrain:
                request = d.parameters["request"]
                assert Path(request["params_path"]).is_file() and Path(request["params_path"]).is_absolute()
                for key in ("workspace", "store_uri", "dvc_remote"):
                    assert Path(request[key]).is_absolute() and Path(request[key]).is_relative_to(project), request
                setup = run_setup(
                    Path(request["workspace"]),
                    request["params_path"],
                    None,
                    request["store_uri"],
                    (request["dvc_remote"], None),
                )
                assert setup.store_uri == str(project / "plans") and setup.remote.url == str(
                    project / "runs/dvc-remote"
                )
        finally:
            os.chdir(cwd)
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        try:
            worker.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(timeout=15)
        with get_client(sync_client=True) as client:
            for i in ids:  # the module's other tests register their own deployments; leave none of these behind
                client.delete_deployment(i)


def _final_run(deployment_id: Any, timeout_s: float) -> Any:
    """The deployment's first flow run once it is in a final state (AssertionError after `timeout_s`)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId

    deadline = time.monotonic() + timeout_s
    with get_client(sync_client=True) as client:
        while time.monotonic() < deadline:
            runs = client.read_flow_runs(
                deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id]))
            )
            if runs and runs[0].state is not None and runs[0].state.is_final():
                return runs[0]
            time.sleep(1)
    states = [(r.name, r.state and r.state.name) for r in runs]
    raise AssertionError(f"no run of the deployment finished within {timeout_s} s: {states}")
