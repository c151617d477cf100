"""profile_flow under a real Prefect server: batches, and a run killed midway resumes without re-measuring."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from flows_support import jsonl_ids, tiny_inventory, write_params

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]


def _prepare(tmp_path: Path, num_placements: int, num_tables: int = 14, task_tables: int = 5) -> tuple[object, Path]:
    from dreamshard.learning.stages import make_tasks_file
    from flows.requests import ProfileRequest, Workspace

    params = write_params(tmp_path / "params.yaml", profile={"num_placements": num_placements},
                          tasks={"train_tables": [task_tables, task_tables]}, topology={"memory_per_device_gb": 16.0})
    ws = Workspace(root=str(tmp_path / "ws"))
    tiny_inventory(ws.inventory, num_tables=num_tables)
    make_tasks_file(ws.inventory, ws.tasks, params)
    return ProfileRequest(workspace=ws, params_path=str(params), tasks_per_batch=1), params


def test_profile_flow_batches_and_rerun_measures_nothing(prefect_api: str, tmp_path: Path) -> None:
    from flows.profile_flow import profile_flow

    req, _ = _prepare(tmp_path, num_placements=3)
    first = profile_flow(req)
    assert first.batches == 2 and first.measured > 0 and first.backend == "simulator"
    ids = jsonl_ids(req.workspace.measurements)
    assert len(ids) == len(set(ids)) == first.measured
    again = profile_flow(req)
    assert jsonl_ids(req.workspace.measurements) == ids  # nothing re-measured


def test_killed_profile_run_resumes_without_remeasuring(prefect_api: str, tmp_path: Path) -> None:
    from flows.profile_flow import profile_flow

    # 12-table tasks on 2 devices: thousands of distinct placements, a few seconds of simulated profiling.
    req, _ = _prepare(tmp_path, num_placements=800, num_tables=40, task_tables=12)
    out = req.workspace.measurements
    script = textwrap.dedent(f"""
        from flows.profile_flow import profile_flow
        from flows.requests import ProfileRequest
        profile_flow(ProfileRequest.model_validate_json({req.model_dump_json()!r}))
    """)
    env = {**os.environ, "PREFECT_API_URL": prefect_api, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if out.exists() and out.read_bytes().count(b"\n") >= 100:
                break
            time.sleep(0.01)
        assert proc.poll() is None, "profile run finished before it could be interrupted"
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    done_before = jsonl_ids(out)
    assert 100 <= len(done_before)

    outcome = profile_flow(req)
    ids = jsonl_ids(out)
    assert ids[: len(done_before)] == done_before  # finished placements kept, in place
    assert len(ids) == len(set(ids))  # and none measured twice
    assert outcome.skipped >= len(done_before)
    assert outcome.measured == len(ids) - len(done_before)
