"""The orchestrator end to end: real Prefect (temporary server), real S3 (SeaweedFS), simulator backend.

run 1 trains and publishes; one changed table re-profiles, retrains and makes a new plan current;
an unchanged inventory re-runs nothing and leaves `current` where it was.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from flows_support import change_one_table, jsonl_ids, tiny_inventory, write_params

from dreamshard.events import emit_inventory_changed, get_current_inventory, push_inventory
from dreamshard.store import get_current, get_pointer, open_store

pytestmark = pytest.mark.integration


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
    second = run()
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
    third = run()
    assert not (third.profiled or third.trained or third.published)
    assert third.measured == 0 and third.outcome is None
    assert third.current_plan_id == second.outcome.plan_id
    assert "nothing to do" in third.reason
    assert jsonl_ids(ws.measurements) == ids_after_second
    assert get_current(store, "tiny").plan_id == second.outcome.plan_id
