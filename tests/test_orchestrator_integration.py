"""The orchestrator end to end: real Prefect (temporary server), real S3 (SeaweedFS), simulator backend.

run 1 trains and publishes; one changed table re-profiles, retrains and makes a new plan current;
an unchanged inventory re-runs nothing and leaves `current` where it was.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest
from flows_support import change_one_table, jsonl_ids, tiny_inventory, write_params

from dreamshard.events import emit_inventory_changed, get_current_inventory, push_inventory
from dreamshard.store import get_current, get_pointer, open_store

pytestmark = pytest.mark.integration

#: Tasks that do real work: profiling, training, planning, measuring, publishing.
WORK_TASKS = ("make-tasks", "profile-batch", "train-cost-model", "train-policy", "plan", "compare-sharders",
              "publish-plan")


def task_states_since(since: datetime) -> dict[str, list[str]]:
    """{task name prefix: [state names]} of the task runs that started or ended after `since` (Prefect's API)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import TaskRunFilter, TaskRunFilterEndTime, TaskRunFilterStartTime

    out: dict[str, list[str]] = {}
    with get_client(sync_client=True) as client:
        runs = {r.id: r for r in client.read_task_runs(
            task_run_filter=TaskRunFilter(start_time=TaskRunFilterStartTime(after_=since)))}
        runs.update({r.id: r for r in client.read_task_runs(
            task_run_filter=TaskRunFilter(end_time=TaskRunFilterEndTime(after_=since)))})
    for r in runs.values():
        base = r.name.rsplit("-", 1)[0]  # "profile-batch-0" -> "profile-batch"
        out.setdefault(base, []).append(r.state.name if r.state else "?")
    return out


def test_orchestrator_retrains_only_on_change(prefect_api: str, s3_env, s3_prefix: str, tmp_path: Path) -> None:
    from flows.orchestrator import retrain_on_inventory_change
    from flows.requests import OrchestratorRequest, Workspace

    store_uri = f"s3://{s3_env.bucket}/{s3_prefix}"
    store = open_store(store_uri, endpoint_url=s3_env.endpoint_url)
    params = write_params(tmp_path / "params.yaml")
    inv = tiny_inventory(tmp_path / "inv.yaml")
    push_inventory(store, inv, store_uri)
    ws = Workspace(root=str(tmp_path / "ws"))

    def run() -> object:
        # No inventory path: the orchestrator reads the store's current inventory (what a pushed event points at).
        return retrain_on_inventory_change(OrchestratorRequest(
            workspace=ws, params_path=str(params), inventory_name="tiny", store_uri=store_uri,
            endpoint_url=s3_env.endpoint_url))

    first = run()
    assert first.trained and first.profiled and first.published
    assert first.inventory_fingerprint == inv.fingerprint()
    assert first.outcome is not None and first.outcome.approved, first.outcome
    current = get_current(store, "tiny")
    assert current.plan_id == first.outcome.plan_id
    assert current.inventory_fingerprint == inv.fingerprint()
    assert current.measured is not None and current.fits_memory()
    ids_after_first = jsonl_ids(ws.measurements)

    # One table changes: pushed as a new version; profile + retrain + a new current plan.
    changed = change_one_table(inv, tmp_path / "inv2.yaml")
    ref = push_inventory(store, changed, store_uri)
    assert ref.changed and ref.key.endswith(f"{changed.fingerprint()}.yaml")
    assert get_current_inventory(store, "tiny")[1].fingerprint == changed.fingerprint()
    assert emit_inventory_changed(ref) is not None  # what the deployment trigger listens for
    t2 = datetime.now(timezone.utc)
    second = run()
    states2 = task_states_since(t2)
    assert "Completed" in states2.get("profile-batch", []), states2  # really re-measured, not a cache hit
    for name in ("train-cost-model", "train-policy"):  # (a subflow also shows as a task run of its parent)
        assert states2.get(name) and set(states2[name]) == {"Completed"}, states2
    assert second.profiled and second.trained and second.measured > 0
    assert second.inventory_fingerprint == changed.fingerprint()
    assert second.outcome is not None and second.outcome.approved, second.outcome
    current2 = get_current(store, "tiny")
    assert current2.plan_id == second.outcome.plan_id != first.outcome.plan_id
    assert current2.inventory_fingerprint == changed.fingerprint()
    pointer = get_pointer(store, "tiny")
    assert pointer is not None and pointer.previous is not None and pointer.previous.plan_id == first.outcome.plan_id
    ids_after_second = jsonl_ids(ws.measurements)
    assert ids_after_second and not set(ids_after_second) & set(ids_after_first)  # new inventory, new records
    from dreamshard.io import load_measurements

    assert {m.inventory_fingerprint for m in load_measurements(ws.measurements)} == {changed.fingerprint()}
    assert len(jsonl_ids(ws.measurements.with_name(f"measurements.{inv.fingerprint()[:12]}.jsonl"))) == len(
        ids_after_first)  # the old inventory's records are set aside, not lost

    # Nothing changed: nothing is re-profiled, retrained or re-published; current stays.
    t3 = datetime.now(timezone.utc)
    third = run()
    states3 = task_states_since(t3)
    assert not {name for name in states3 if name in WORK_TASKS}, states3  # Prefect ran none of the work tasks
    assert not (third.profiled or third.trained or third.published)
    assert third.measured == 0 and third.outcome is None
    assert third.current_plan_id == second.outcome.plan_id
    assert "nothing to do" in third.reason
    assert jsonl_ids(ws.measurements) == ids_after_second
    assert get_current(store, "tiny").plan_id == second.outcome.plan_id
