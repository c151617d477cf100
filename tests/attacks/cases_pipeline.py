"""Attacks on the pipeline's doors: `dreamshard pipeline run` with a simulator
backend the publish gate would refuse at the end (refused before any stage runs, unless `--allow-simulated` or
`publish.allow_simulated` says so), a `--world` that names no known world, `--params` files holding only the keys
a user changes (they layer over the pipeline's own params), a known error inside a flow (logged as its one line),
and the deployments' registered paths (absolute, from the registering directory; a worker runs each flow in a
temporary one). The world is empty: no ./params.yaml, so the installed one is the pipeline's params.

Every `pipeline run` case holds the orchestrator off (`no_orchestrator`): a refusal that came only after the
stages started fails at once instead of running the pipeline. The runs that go through (the simulator allowed,
a partial file) are tests/test_pipeline_inputs.py's, with the orchestrator stubbed; the replan deployment on a
worker started from another directory is tests/test_orchestrator_integration.py's.

Operations: a worker stopped while its flow run (in a session of its own) runs, a drift round on
a fresh install, deployments registered for worker hosts that do not share this one's files (`--root`), and a
stage silent for longer than a heartbeat. Their runs on the real Prefect server are tests/test_flows_operations.py's."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from harness import Case, Holds, Refused, Result, Runs, Table, written

from dreamshard.config.settings import resolve
from dreamshard.errors import PipelineError

RUN = "pipeline run --workspace ws --store store"
#: A params file of the keys a user changes.
PARTIAL = "plan: {verify: 2}\n"


@contextmanager
def no_orchestrator() -> Iterator[None]:
    """`pipeline run`'s orchestrator replaced by a failure: the case must be refused before it starts."""
    import dreamshard_flows.cli as cli

    saved = cli._orchestrate

    def started(prepared: Any) -> Any:
        raise AssertionError("the orchestrator started: the run was not refused up front")

    cli._orchestrate = started  # type: ignore[assignment]
    try:
        yield
    finally:
        cli._orchestrate = saved  # type: ignore[assignment]


def _whole_layered_params(work: Path, _: Result) -> None:
    """The workspace's params.yaml, read alone as its DVC stages read it: the file's key and the pipeline's own
    rest (evaluate.rounds 5 for publish.min_rounds 5), so the run the workspace makes checks out."""
    alone = resolve(work / "ws" / "params.yaml")
    alone.check_pipeline()
    assert alone.plan.verify == 2 and alone.evaluate.rounds == 5 and alone.profile.repeats == 5


def _one_line_in_flow_logs(_: Path) -> None:
    """A DreamshardError failing a task (or its flow) is logged by Prefect as `Type: line`, no traceback."""
    import dreamshard_flows.runner  # noqa: F401  what a flow process imports

    class Collect(logging.Handler):
        def __init__(self) -> None:
            super().__init__()
            self.lines: list[str] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.lines.append(logging.Formatter("%(message)s").format(record))

    for name in ("prefect.task_runs", "prefect.flow_runs"):
        logger = logging.getLogger(name)
        collect = Collect()
        saved = logger.handlers, logger.propagate
        logger.handlers, logger.propagate = [collect], False
        try:
            try:
                raise PipelineError("dvc repro failed in stage 'train': exit 1")
            except PipelineError as e:
                logger.error(f"Task run failed with exception: {e!r}", exc_info=sys.exc_info())
        finally:
            logger.handlers, logger.propagate = saved
        assert collect.lines == ["PipelineError: dvc repro failed in stage 'train': exit 1"], collect.lines


def _registered_paths_are_absolute(work: Path) -> None:
    """`python -m dreamshard_flows.deploy --work-pools` from this directory with relative paths: every path a
    deployment or trigger records (params, workspace, store, the retrain runs' DVC remote) is absolute, here."""
    from dreamshard_flows.deploy import build_deployments

    here = Path.cwd().resolve()
    (work / "params.yaml").write_text("publish: {store_uri: plans}\npipeline: {dvc_remote: remote}\n")
    deployments = build_deployments("params.yaml", "runs/pipeline", None, work_pools=True, inventory_name="x")
    requests = [d.parameters.get("request", {}) for d in deployments]
    requests += [t.parameters.get("request", {}) for d in deployments for t in d.triggers or []]
    for request in requests:
        for key in ("params_path", "workspace", "store_uri", "dvc_remote"):
            value = request.get(key)
            if value is None or value.startswith("{{"):  # a template: the event's store, else the registered one
                continue
            assert Path(value).is_absolute() and Path(value).is_relative_to(here), (key, value)
    retrain = [d for d in deployments if d.flow_name == "retrain-on-inventory-change"]
    assert len(retrain) == 2
    for d in retrain:
        for request in [d.parameters["request"], *(t.parameters["request"] for t in d.triggers or [])]:
            assert request["dvc_remote"] == str(here / "remote"), request
            assert Path(request["params_path"]).is_file()
            assert yaml.safe_load(Path(request["params_path"]).read_text())["publish"]["store_uri"] == "plans"


def _stopped_worker_leaves_no_orphan(work: Path) -> None:
    """Stop-prefect.sh on a worker whose child runs in a session of its own (as a process worker starts a flow run),
    with no Prefect API to cancel through: the child is stopped too, and the script says the runs were not
    cancelled through the API."""
    import os
    import subprocess

    root = Path(__file__).resolve().parents[2]
    run_dir = work / "run"
    run_dir.mkdir()
    child = "import time; time.sleep(120)"
    worker = subprocess.Popen(
        [
            "setsid",
            sys.executable,
            "-c",
            f"import subprocess, sys, time\n"
            f"c = subprocess.Popen([sys.executable, '-c', {child!r}], start_new_session=True)\n"
            "print(c.pid, flush=True)\ntime.sleep(120)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert worker.stdout is not None
    orphan = int(worker.stdout.readline())
    try:
        (run_dir / "worker-w9.pid").write_text(str(worker.pid))
        env = {
            **os.environ,
            "PREFECT_RUN_DIR": str(run_dir),
            "PREFECT_API_URL": "http://127.0.0.1:9/api",
            "PREFECT_STOP_GRACE_S": "2",
            "VENV_BIN": str(Path(sys.executable).parent),
        }
        res = subprocess.run(
            [str(root / "infra" / "stop-prefect.sh")], env=env, capture_output=True, text=True, timeout=120
        )
        assert res.returncode == 0 and "runs not cancelled through the API" in res.stdout, res.stdout + res.stderr
        assert worker.wait(timeout=10) is not None
        deadline = time.monotonic() + 10
        while _running(orphan) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _running(orphan), f"the worker's child {orphan} outlived it: {res.stdout}"
    finally:
        for pid in (worker.pid, orphan):
            if _running(pid):
                os.kill(pid, 9)


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _drift_round_on_a_fresh_install_skips(work: Path) -> None:
    """The drift monitor on a store that does not exist yet, then on an empty one: nothing to check, a reason, no
    error (the hourly run on a fresh install completes)."""
    from dreamshard.config.settings import Settings
    from dreamshard.usecases.drift import DriftRequest, sweep

    request = DriftRequest(settings=Settings(), store=str(work / "store"))
    assert sweep(request).skipped == [f"no plan store at {work / 'store'} yet: nothing to check"]
    (work / "store").mkdir()
    found = sweep(request)
    assert found.targets == [] and found.skipped == [
        f"no inventory in {work / 'store'} has a current plan yet: nothing to check"
    ]
    named = sweep(request.model_copy(update={"inventory_name": "pool"}))
    assert named.skipped == [f"inventory 'pool' has no current plan in {work / 'store'} yet: nothing to check"]


def _registered_under_root_name_no_path_here(work: Path) -> None:
    """`deploy --root /srv/ds` with an S3 store and a local DVC remote: every path is under /srv/ds or on S3,
    none of this directory; the directory remote is named in a warning; a relative --root is refused."""
    from dreamshard_flows.deploy import build_deployments, main
    from dreamshard_flows.deploy_paths import host_bound

    (work / "params.yaml").write_text("publish: {store_uri: 's3://b/plans'}\npipeline: {dvc_remote: remote}\n")
    deployments = build_deployments("params.yaml", "runs/pipeline", None, work_pools=True, root="/srv/ds")
    requests = [d.parameters.get("request", {}) for d in deployments]
    requests += [t.parameters.get("request", {}) for d in deployments for t in d.triggers or []]
    for request in requests:
        for key in ("params_path", "workspace", "store_uri", "dvc_remote"):
            value = request.get(key)
            if value is None or value.startswith("{{"):
                continue
            assert value.startswith(("/srv/ds/", "s3://")) and str(work) not in value, (key, value)
    retrain = deployments[1].parameters["request"]
    assert retrain["dvc_remote"] == "/srv/ds/remote" and retrain["params_path"] == "/srv/ds/params.yaml"
    (line,) = host_bound(retrain["store_uri"], retrain["dvc_remote"])
    assert "DVC remote /srv/ds/remote is a directory" in line
    try:
        main(["--root", "srv/ds", "--work-pools"])
    except SystemExit as e:
        assert str(e) == "error: --root must be an absolute path on the worker hosts, got 'srv/ds'", e
    else:
        raise AssertionError("a relative --root was accepted")


def _silent_stage_heartbeats(work: Path) -> None:
    """A command silent for 1.5 s with heartbeats every 0.4 s: its lines in order, as written, and heartbeats in
    the silence, each saying how long it has been silent."""
    from dreamshard.pipeline.stream import stream_command

    said: list[tuple[float, str]] = []
    code = "import time; print('a'); time.sleep(1.5); print('b')"
    done = stream_command(
        [sys.executable, "-c", code],
        work,
        {},
        lambda s: said.append((time.monotonic(), s)),
        "stage train",
        heartbeat_s=0.4,
    )
    assert done.returncode == 0 and done.lines == ["a", "b"]
    lines = [s for _, s in said]
    assert lines[0] == "a" and lines[-1] == "b" and len(lines) >= 4, lines
    assert all(s.startswith("stage train: still running") for s in lines[1:-1]), lines
    assert said[-1][0] - said[0][0] >= 1.4  # "a" came when written, not with "b"


CASES: list[Case] = [
    Refused(
        "pipeline run --backend simulator without --allow-simulated is refused before any stage",
        f"{RUN} --backend simulator",
        ("profile.backend is simulator", "--allow-simulated", "publish.allow_simulated"),
        guard=no_orchestrator,
        seconds=30,
    ),
    Refused(
        "pipeline run --world naming no known world is refused before anything is written",
        f"{RUN} --world ib200",
        ("unknown world 'ib200'", "fast, nvlink-ib, host, measured"),
        guard=no_orchestrator,
    ),
    Refused(
        "pipeline run --world with a 5,000-character name: one short line, the name cut",
        f"{RUN} --world {'w' * 5000}",
        ("unknown world 'wwww", "... (5000 characters)"),
        guard=no_orchestrator,
    ),
    Refused(
        "a params file saying profile.backend simulator, without --allow-simulated, is refused up front",
        f"{RUN} --params sim.yaml",
        ("profile.backend is simulator", "--allow-simulated"),
        setup=written("sim.yaml", "profile: {backend: simulator}\n"),
        guard=no_orchestrator,
        seconds=30,
    ),
    Refused(
        "publish.allow_simulated false said outright still refuses a simulator backend",
        f"{RUN} --params sim.yaml --backend simulator",
        ("profile.backend is simulator",),
        setup=written("sim.yaml", "publish: {allow_simulated: false}\n"),
        guard=no_orchestrator,
    ),
    Refused(
        # the partial file passes the cross-section checks (it once failed: evaluate.rounds 3 is below
        # publish.min_rounds 5); the refusal is the later check's, of the --export-model given as a file
        "a params file of the changed keys only layers over the pipeline's own params",
        f"{RUN} --params partial.yaml --export-model taken",
        ("--export-model taken is a file",),
        setup=lambda w: (written("partial.yaml", PARTIAL)(w), written("taken", "x")(w)),
        guard=no_orchestrator,
    ),
    Refused(
        "a bad key in a partial params file is named with the file",
        f"{RUN} --params partial.yaml",
        ("partial.yaml", "plan.verify"),
        setup=written("partial.yaml", "plan: {verify: -1}\n"),
        guard=no_orchestrator,
    ),
    Refused(
        "a partial params file asking too few evaluate rounds is still refused up front",
        f"{RUN} --params partial.yaml",
        ("evaluate.rounds (--rounds) 3 is below publish.min_rounds 5",),
        setup=written("partial.yaml", "evaluate: {rounds: 3}\n"),
        guard=no_orchestrator,
    ),
    Refused(
        "a run the gate would refuse at its end (simulator, not allowed) creates no workspace and no store",
        f"{RUN} --runner in-process --params sim.yaml",
        ("publish.allow_simulated",),
        setup=written("sim.yaml", "profile: {backend: simulator}\npublish: {allow_simulated: false}\n"),
        guard=no_orchestrator,
    ),
    Refused(
        "the same refusal with an inventory given creates no store",
        f"{RUN} --runner in-process --params sim.yaml -i inv.yaml",
        ("publish.allow_simulated",),
        setup=lambda w: (
            written("sim.yaml", "profile: {backend: simulator}\npublish: {allow_simulated: false}\n")(w),
            written(
                "inv.yaml",
                "name: inv\ntables:\n  - {name: a, num_embeddings: 100, embedding_dim: 8, pooling_factor: 1}\n",
            )(w),
        ),
        guard=no_orchestrator,
    ),
    Runs(
        "pipeline init --params with the changed keys only writes the whole layered params.yaml",
        "pipeline init ws --params partial.yaml --dvc-remote remote",
        then=_whole_layered_params,
        setup=written("partial.yaml", PARTIAL),
    ),
    Holds("a known error failing a flow's task is logged as its one line", _one_line_in_flow_logs),
    Holds("deployments registered with relative paths record them absolute", _registered_paths_are_absolute),
    Holds("a stopped worker leaves no flow-run process in a session of its own", _stopped_worker_leaves_no_orphan),
    Holds("a drift round on a fresh install is a skip with its reason", _drift_round_on_a_fresh_install_skips),
    Holds("deployments registered with --root name no path of this host", _registered_under_root_name_no_path_here),
    Holds("a stage silent past the heartbeat logs heartbeats, its lines as written", _silent_stage_heartbeats),
]

TABLE = Table(surface="pipeline", cases=CASES)
