"""plan_and_publish_flow under a real Prefect server with publish.require_human: the run pauses for an
ApprovalInput; a reviewer's rejection keeps the plan under rejected/ with the reason, and nothing is current."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from flows_support import tiny_inventory, write_params

pytestmark = pytest.mark.integration


def _trained_workspace(tmp_path: Path) -> tuple[object, Path]:
    from dreamshard.learning.stages import make_tasks_file, train_cost_stage, train_policy_stage
    from dreamshard.profiling import make_oracle, profile_inventory
    from dreamshard.types import TaskSet
    from flows.requests import Workspace

    params = write_params(tmp_path / "params.yaml", publish={"require_human": True})
    ws = Workspace(root=str(tmp_path / "ws"))
    inv = tiny_inventory(ws.inventory)
    ts: TaskSet = make_tasks_file(ws.inventory, ws.tasks, params)
    from dreamshard.learning.configs import TopologyConfig

    profile_inventory(inv, TopologyConfig(memory_per_device_gb=1.0, batch_size=256).topology(2), 4, ws.measurements,
                      make_oracle("simulator", warmup=0, repeats=1), tasks=ts, progress=False)
    train_cost_stage(ws.inventory, ws.measurements, ws.model_dir, params, progress=False)
    train_policy_stage(ws.inventory, ws.tasks, ws.model_dir, params, progress=False)
    return ws, params


def _paused_run_id(flow_name: str, timeout_s: float = 90) -> object:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterState, FlowRunFilterStateType
    from prefect.client.schemas.objects import StateType

    deadline = time.monotonic() + timeout_s
    with get_client(sync_client=True) as client:
        while time.monotonic() < deadline:
            runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(
                state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.PAUSED]))))
            for r in runs:
                if r.name and client.read_flow(r.flow_id).name == flow_name:
                    return r.id
            time.sleep(0.5)
    raise AssertionError(f"no paused '{flow_name}' run within {timeout_s} s")


def test_human_rejection_is_kept_with_reason(prefect_api: str, tmp_path: Path) -> None:
    from prefect.flow_runs import resume_flow_run

    from dreamshard.store import get_pointer, list_plans, open_store
    from flows.publish_flow import plan_and_publish_flow
    from flows.requests import PublishRequest

    ws, params = _trained_workspace(tmp_path)
    store_uri = str(tmp_path / "store")
    result: dict[str, object] = {}

    def run() -> None:
        try:
            result["outcome"] = plan_and_publish_flow(
                PublishRequest(workspace=ws, params_path=str(params), store_uri=store_uri))
        except BaseException as e:  # surfaced below
            result["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    run_id = _paused_run_id("plan-and-publish")
    resume_flow_run(run_id, run_input={"approve": False, "comment": "needs a second look"})
    t.join(timeout=120)
    assert not t.is_alive() and "error" not in result, result.get("error")
    outcome = result["outcome"]
    assert not outcome.approved and not outcome.is_current
    assert "rejected by a human reviewer; reviewer: needs a second look" in outcome.reason
    store = open_store(store_uri)
    assert get_pointer(store, "tiny") is None  # nothing became current
    (record,) = list_plans(store, "tiny")
    assert record.plan_id == outcome.plan_id and record.status == "rejected"
    assert "needs a second look" in record.reason
