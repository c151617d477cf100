"""Orchestration pieces without a Prefect server: fingerprint state, inventory versions, stale-record
handling, batching and cache keys, artifact keys, the workspace lock, human review, deployments."""

from __future__ import annotations

import fcntl
import json
from pathlib import Path

import pytest
import yaml
from flows_support import TINY_PARAMS, change_one_table, tiny_inventory

from dreamshard.events import current_inventory_key, get_current_inventory, inventory_key, push_inventory
from dreamshard.fingerprints import (
    PipelineState,
    PublishedPlanState,
    TrainedModelState,
    load_state,
    needs_publishing,
    needs_training,
    params_fingerprint,
    retire_stale_measurements,
    save_state,
)
from dreamshard.store import open_store

ROOT = Path(__file__).resolve().parents[1]


def test_params_fingerprint_tracks_only_named_sections() -> None:
    sections = ("train_cost", "train_policy")
    base = params_fingerprint(TINY_PARAMS, sections)
    assert params_fingerprint({**TINY_PARAMS, "evaluate": {"rounds": 9}}, sections) == base
    changed = {**TINY_PARAMS, "train_policy": {**TINY_PARAMS["train_policy"], "episodes": 11}}
    assert params_fingerprint(changed, sections) != base


def test_state_decides_what_to_rerun(tmp_path: Path) -> None:
    state = load_state(tmp_path)
    assert state == PipelineState()
    assert needs_training(state, "fp1", "p1") and needs_publishing(state, "fp1", "p1")
    (tmp_path / "models").mkdir()
    state = PipelineState(
        trained=TrainedModelState(inventory_fingerprint="fp1", params_fingerprint="p1", model_dir=str(tmp_path / "models")),
        published=PublishedPlanState(inventory_fingerprint="fp1", model_fingerprint="p1", plan_id="plan-1", approved=True),
    )
    save_state(tmp_path, state)
    state = load_state(tmp_path)
    assert not needs_training(state, "fp1", "p1") and not needs_publishing(state, "fp1", "p1")
    assert needs_training(state, "fp2", "p1") and needs_publishing(state, "fp2", "p1")
    assert needs_training(state, "fp1", "p2")  # a training param changed
    (tmp_path / "models").rmdir()
    assert needs_training(state, "fp1", "p1")  # the model is gone


def test_push_inventory_versions_and_current_pointer(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "store"))
    inv = tiny_inventory(tmp_path / "inv.yaml")
    ref = push_inventory(store, inv, str(tmp_path / "store"))
    assert ref.changed and ref.key == inventory_key("tiny", inv.fingerprint())
    assert ref.key == f"inventories/tiny/{inv.fingerprint()}.yaml"
    assert store.exists(current_inventory_key("tiny"))
    assert not push_inventory(store, inv).changed  # same content: no new version, pointer unchanged
    changed = change_one_table(inv, tmp_path / "inv2.yaml")
    ref2 = push_inventory(store, changed)
    assert ref2.changed and ref2.fingerprint != ref.fingerprint
    got, got_ref = get_current_inventory(store, "tiny")
    assert got.fingerprint() == changed.fingerprint() and got_ref.key == ref2.key
    assert store.exists(ref.key)  # the old version stays
    assert get_current_inventory(store, "other") is None


def test_inventory_push_cli_stores_without_event(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from dreamshard.cli.app import app

    tiny_inventory(tmp_path / "inv.yaml")
    res = CliRunner().invoke(app, ["inventory", "push", str(tmp_path / "inv.yaml"), "--store", str(tmp_path / "s"),
                                   "--no-event"])
    assert res.exit_code == 0, res.output
    assert "stored tiny" in res.output
    assert list((tmp_path / "s" / "inventories" / "tiny").glob("*.yaml"))


def test_retire_stale_measurements_keeps_current_inventory_records(tmp_path: Path) -> None:
    from dreamshard.io import append_measurement, load_measurements
    from dreamshard.profiling import make_oracle
    from dreamshard.types import Topology

    inv = tiny_inventory(tmp_path / "a.yaml")
    inv2 = change_one_table(inv, tmp_path / "b.yaml")
    oracle = make_oracle("simulator", warmup=0, repeats=1)
    topo = Topology(num_devices=2, memory_per_device_gb=1.0, batch_size=256)
    path = tmp_path / "m.jsonl"
    for i, which in enumerate((inv, inv2, inv)):
        append_measurement(path, oracle.measure(which, {t.name: j % 2 for j, t in enumerate(which.tables)}, topo,
                                                measurement_id=f"m{i}"))
    assert retire_stale_measurements(path, inv2.fingerprint()) == 2
    assert [m.measurement_id for m in load_measurements(path)] == ["m1"]
    aside = path.with_name(f"m.{inv.fingerprint()[:12]}.jsonl")
    assert [m.measurement_id for m in load_measurements(aside)] == ["m0", "m2"]
    assert retire_stale_measurements(path, inv2.fingerprint()) == 0


def test_batches_and_profile_cache_key(tmp_path: Path) -> None:
    from dreamshard.learning.configs import TasksConfig
    from dreamshard.learning.tasks import make_taskset
    from dreamshard.profiling import ProfileConfig
    from dreamshard.types import Topology
    from flows.profile_flow import batches_of
    from flows.tasks import profile_batch_cache_key

    inv = tiny_inventory(tmp_path / "inv.yaml", num_tables=30)
    ts = make_taskset(inv, TasksConfig(train_num_tasks=5, train_tables=(3, 4), train_devices=2, test_tables=(4,),
                                       test_devices=(2,)))
    batches = batches_of(ts, 2)
    assert [len(b.train) for b in batches] == [2, 2, 1]
    assert [t.name for b in batches for t in b.train] == [t.name for t in ts.train]
    out = tmp_path / "m.jsonl"
    params = {"inventory": inv, "tasks": batches[0], "profile_config": ProfileConfig(backend="simulator"),
              "topology": Topology(num_devices=2, memory_per_device_gb=1.0), "out_path": str(out)}
    assert profile_batch_cache_key(None, params) is None  # nothing on disk yet: never a cache hit
    out.write_text("")
    key = profile_batch_cache_key(None, params)
    assert key and key == profile_batch_cache_key(None, dict(params))
    assert key != profile_batch_cache_key(None, {**params, "tasks": batches[1]})
    assert key != profile_batch_cache_key(None, {**params, "profile_config": ProfileConfig(backend="cpu")})


def test_artifact_keys_are_lowercase_dash() -> None:
    from flows.artifacts import artifact_key

    assert artifact_key("plan-devices", "My_Pool.v2") == "plan-devices-my-pool-v2"
    assert artifact_key("sharder-comparison", "") == "sharder-comparison"


def test_workspace_lock_is_exclusive(tmp_path: Path) -> None:
    from flows.tasks import workspace_lock

    lock = tmp_path / "ws" / ".lock"
    with workspace_lock(lock):
        with open(lock) as other, pytest.raises(BlockingIOError):
            fcntl.flock(other.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    with open(lock) as other:
        fcntl.flock(other.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)  # released


def test_human_review_rejection_keeps_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    import prefect.flow_runs

    from dreamshard.gate import GateDecision
    from flows.publish_flow import ApprovalInput, _human_review

    decision = GateDecision(approved=True, reason="approved: 1 ms vs 2 ms", plan_id="p")
    monkeypatch.setattr(prefect.flow_runs, "pause_flow_run",
                        lambda wait_for_input, timeout, **kw: ApprovalInput(approve=False, comment="too risky"))
    rejected = _human_review(decision, 10)
    assert not rejected.approved and "rejected by a human reviewer; reviewer: too risky" in rejected.reason
    monkeypatch.setattr(prefect.flow_runs, "pause_flow_run",
                        lambda wait_for_input, timeout, **kw: ApprovalInput(approve=True, comment="ok"))
    assert _human_review(decision, 10).approved

    def timeout(wait_for_input, timeout, **kw):  # type: ignore[no-untyped-def]
        from prefect.exceptions import FlowPauseTimeout

        raise FlowPauseTimeout("Flow run was paused and never resumed.")

    monkeypatch.setattr(prefect.flow_runs, "pause_flow_run", timeout)
    unanswered = _human_review(decision, 10)
    assert not unanswered.approved and "no reviewer answered within 10 s" in unanswered.reason


def test_plan_and_gate_tasks_call_the_library(tmp_path: Path) -> None:
    from dreamshard.types import Topology
    from flows.tasks import gate_task, plan_task

    inv = tiny_inventory(tmp_path / "inv.yaml")
    topo = Topology(num_devices=2, memory_per_device_gb=1.0)
    plan = plan_task.fn(inv, topo, "size_greedy", {})
    assert set(plan.placement) == set(inv.table_names) and plan.fits_memory()
    decision = gate_task.fn(plan, {"round_robin": 1.0}, 0.0)
    assert not decision.approved and "neither measured nor predicted" in decision.reason


def test_deployments_schedule_trigger_and_pools() -> None:
    from flows.deploy import NIGHTLY_CRON, build_deployments

    deps = {d.name: d for d in build_deployments(store_uri="s3://bucket/plans", work_pools=True)}
    orch = deps["nightly-and-on-change"]
    assert orch.schedules[0].schedule.cron == NIGHTLY_CRON
    (trigger,) = orch.triggers
    assert trigger.expect == {"dreamshard.inventory.changed"}
    assert trigger.match.model_dump()["prefect.resource.id"] == "dreamshard.inventory.*"
    assert trigger.parameters["request"]["inventory_name"] == "{{ event.payload.inventory_name }}"
    assert deps["profile"].work_pool_name == "gpu" and "gpu" in deps["profile"].tags
    assert orch.work_pool_name == "default"
    declared = yaml.safe_load((ROOT / "infra" / "prefect.yaml").read_text())["deployments"]
    assert {d["name"] for d in declared} == set(deps)
    for d in declared:  # prefect.yaml and deploy.py point at the same flows
        assert d["entrypoint"] == deps[d["name"]].entrypoint


def test_dvc_yaml_stages_are_thin_cli_calls() -> None:
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    assert list(stages) == ["inventory", "tasks", "profile", "train_cost", "train_policy", "plan", "evaluate"]
    for name, st in stages.items():
        assert "dreamshard " in st["cmd"], name
    assert json.dumps(stages["train_cost"]["metrics"]) and stages["evaluate"]["plots"]
