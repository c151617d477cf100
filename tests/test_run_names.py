"""What the Prefect UI lists, without a server: run names keep the whole minute, a CLI pipeline's run is named after
its inventory from its start, a profiling batch's run names its inventory, and the batch artifact credits the run
that completed a batch (a retry), not a run marked Crashed before it."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from dreamshard.documents import save_inventory
from dreamshard.inventory.synth import synth_inventory


def test_a_run_name_keeps_the_whole_minute_and_cuts_a_fingerprint() -> None:
    from dreamshard_flows.naming import run_name

    assert run_name("all", "drift", "20261207t1600") == "all-drift-20261207t1600"
    assert run_name("all", "drift", "20261207t1600") != run_name("all", "drift", "20261207t1609")
    assert run_name("pool", "pipeline", "ab" * 32) == "pool-pipeline-abababababab"


def test_a_cli_pipeline_run_is_named_after_its_inventory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`pipeline run -i inv.yaml`: the flow run's request names the inventory, so its first name is
    `<inventory>-pipeline-<minute>`, never `current-pipeline-...`."""
    import dreamshard_flows.orchestrator as orchestrator
    from dreamshard_flows.orchestrator import pipeline_run_name

    from dreamshard.cli.app import invoke

    save_inventory(synth_inventory(4, seed=0, name="clicks"), tmp_path / "inv.yaml")
    seen: list[Any] = []

    def orchestrate(request: Any) -> Any:
        seen.append(request)
        raise SystemExit(0)  # named; nothing to run

    monkeypatch.setattr(orchestrator, "retrain_on_inventory_change", orchestrate)
    monkeypatch.chdir(tmp_path)
    argv = ["pipeline", "run", "-i", "inv.yaml", "-w", "ws", "--store", "store", "--backend", "cpu"]
    code, _, err = invoke(argv)
    assert code == 0 and [r.inventory_name for r in seen] == ["clicks"], err
    monkeypatch.setattr(orchestrator, "request_field", lambda field: seen[0].model_dump().get(field))
    assert pipeline_run_name().startswith("clicks-pipeline-")
    by_file = {"inventory_path": str(tmp_path / "inv.yaml")}  # a deployment run given a file only
    monkeypatch.setattr(orchestrator, "request_field", by_file.get)
    assert pipeline_run_name().startswith("clicks-pipeline-")


class _Client:
    """The Prefect client calls `_Watch.submit` makes, recorded."""

    def __init__(self) -> None:
        self.created: list[dict[str, Any]] = []

    def create_flow_run_from_deployment(self, deployment_id: object, **kwargs: Any) -> Any:
        self.created.append(kwargs)
        return SimpleNamespace(id=f"run-{len(self.created)}")


def test_a_batch_run_names_its_inventory_and_attempt(tmp_path: Path) -> None:
    from dreamshard_flows.fanout import _Watch

    from dreamshard.profiling.batches import ProfileJob, plan_batches
    from dreamshard.profiling.settings import ProfileConfig
    from dreamshard.store import open_store
    from dreamshard.usecases.profile_batches import Batches
    from dreamshard.values import Topology

    job = ProfileJob(
        inventory=synth_inventory(6, seed=0, name="clicks"),
        topology=Topology(num_devices=2, memory_per_device_gb=1.0, batch_size=256),
        profile=ProfileConfig(backend="simulator", num_placements=2, warmup=0, repeats=1),
    )
    specs = plan_batches(job, 4, "camp-1")
    batches = Batches(open_store(str(tmp_path / "store")), specs)
    client = _Client()
    watch = _Watch(client, batches, (str(tmp_path / "store"), None), SimpleNamespace(id="dep"), None)
    [first, *_] = batches.all()
    assert first.inventory == "clicks"
    watch.submit(first)
    watch.submit(first)
    names = [c["name"] for c in client.created]
    assert names == [f"clicks-profile-{first.batch_id}-try1", f"clicks-profile-{first.batch_id}-try2"]
    assert {"camp-1", "clicks", "profile-batch"} <= set(client.created[0]["tags"])


def test_the_batch_artifact_credits_the_retry_that_completed_a_batch() -> None:
    """try1 wrote the shard and was marked Crashed (its worker stopped heartbeating); try2 found the shard written
    and completed: the row names try2 as the run that completed the batch and lists both attempts."""
    from dreamshard_flows.artifacts import batch_rows

    t0 = datetime(2026, 12, 7, 16, 0, tzinfo=timezone.utc)
    shard = SimpleNamespace(
        batch_id="b0001-0123456789abcdef",
        records=[object()] * 66,
        worker=SimpleNamespace(worker="gpu-a", host="h1", pid=42, flow_run_id="id-of-try1"),
        started_at=t0,
        finished_at=t0 + timedelta(seconds=30),
    )
    runs = {
        "b0001-0123456789abcdef": [("clicks-profile-b0001-try1", "Crashed"), ("clicks-profile-b0001-try2", "Completed")]
    }
    [row] = batch_rows([shard], runs)
    assert row["completed_by"] == "clicks-profile-b0001-try2" and row["flow_run"] == "id-of-try1"
    assert row["attempts"] == "clicks-profile-b0001-try1 Crashed, clicks-profile-b0001-try2 Completed"
    assert row["records"] == 66 and row["worker"] == "gpu-a" and row["seconds"] == 30.0
    [local] = batch_rows([shard], {})
    assert local["completed_by"] == "-" and local["attempts"] == "-"
