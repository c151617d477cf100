"""The job's world on the pipeline's doors (docs/operations/pipeline.md, "dreamshard pipeline run"): `pipeline run
--world NAME` (its alias `--interconnect`), the orchestrator flow's `world` and the library's `PipelineRun.world`
reach the workspace's params as `world.name` (the profile, train and plan stages read that section), and the plan
stage run on those params records the world in the plan. A named world replaces the params' world whole, and the
run says so when that drops figures; an unknown name, or one the inventory's job contradicts, is refused in one
line before anything is written. The CLI runs in-process with the orchestrator replaced (the checks before it
starts); the library's run goes as far as its first step."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from dreamshard_flows.orchestrator import pipeline_run
from dreamshard_flows.requests import OrchestratorRequest
from flows_support import Orchestrator, stub_orchestrator, tiny_inventory, write_params

from dreamshard.cli.app import invoke
from dreamshard.documents import save_inventory
from dreamshard.errors import ConfigError, DreamshardError
from dreamshard.usecases import pipeline_steps as steps
from dreamshard.usecases.pipeline_run import PipelineRun, run_pipeline
from dreamshard.usecases.runner import InProcessRunner
from dreamshard.values import JobTopology, named_world

#: A world of the params' own, with its figures.
OWN = {"name": "ib200", "alpha_ms": 0.015, "intra_host_gbps": 300, "source": "nccl-tests"}


@pytest.fixture
def orchestrator(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Orchestrator:
    stub = stub_orchestrator(monkeypatch, tmp_path, "tiny")
    write_params(tmp_path / "p.yaml")
    tiny_inventory(tmp_path / "inv.yaml")
    return stub


def _run(*args: str) -> tuple[int, str, str]:
    return invoke(["pipeline", "run", "-w", "ws", "--store", "store", "--params", "p.yaml", "-i", "inv.yaml", *args])


def _workspace_params(tmp_path: Path, prepared: Any) -> dict[str, Any]:
    """The params the run writes into the workspace (what its DVC stages read), from what the CLI handed the flow."""
    setup = steps.run_setup(
        tmp_path / "ws", str(prepared.params), None, None, (None, None), prepared.allow_simulated, prepared.world
    )
    assert setup.params_text is not None
    (tmp_path / "ws-params.yaml").write_text(setup.params_text)
    return yaml.safe_load(setup.params_text)


def test_pipeline_run_world_reaches_the_workspace_params_and_the_plan(
    orchestrator: Orchestrator, tmp_path: Path
) -> None:
    code, _, err = _run("--world", "fast")
    assert code == 0, err
    (prepared,) = orchestrator.prepared
    assert prepared.world == "fast"
    assert _workspace_params(tmp_path, prepared)["world"] == {"name": "fast"}
    # the plan stage's command on those params records the world it planned for
    code, _, err = invoke(["plan", "-i", "inv.yaml", "-s", "size_greedy", "--params", "ws-params.yaml", "-o", "p.json"])
    plan = json.loads((tmp_path / "p.json").read_text())
    assert code == 0 and plan["world"]["name"] == "fast" and plan["topology"]["world"]["name"] == "fast", err
    code, _, err = _run("--interconnect", "measured")  # the alias, as the world it names
    assert code == 0 and orchestrator.prepared[-1].world == "host", err
    code, _, err = _run()
    assert code == 0 and orchestrator.prepared[-1].world is None, err
    assert _workspace_params(tmp_path, orchestrator.prepared[-1])["world"]["name"] is None  # the params' own


def test_a_world_the_inventorys_job_contradicts_is_refused_before_anything_is_written(
    orchestrator: Orchestrator, tmp_path: Path
) -> None:
    inv = tiny_inventory(tmp_path / "inv.yaml")
    job = JobTopology(world_size=2, world=named_world("nvlink-ib"))
    save_inventory(inv.model_copy(update={"job": job}), tmp_path / "job.yaml")
    code, out, err = _run("-i", "job.yaml", "--world", "fast")
    assert code == 2 and "Traceback" not in out + err and len(err.strip().splitlines()) == 1, err
    assert "records its job's world nvlink-ib" in err and "world fast cannot stand" in err
    assert orchestrator.prepared == [] and not (tmp_path / "ws").exists() and not (tmp_path / "store").exists()
    code, _, err = _run("-i", "job.yaml", "--world", "nvlink-ib")  # the job's own world: no conflict
    assert code == 0, err
    # the library's run (the flow's, whose inventory may come from the store) refuses it before preparing anything
    request = PipelineRun(
        workspace=tmp_path / "ws2",
        params=tmp_path / "p.yaml",
        inventory=inv.model_copy(update={"job": job}),
        world="fast",
    )
    runner = InProcessRunner()
    with pytest.raises(ConfigError, match="records its job's world nvlink-ib"):
        run_pipeline(request, runner)
    assert runner.steps == [] and not (tmp_path / "ws2" / "params.yaml").exists()


def test_the_flow_request_carries_the_world_to_the_library_run(tmp_path: Path) -> None:
    request = OrchestratorRequest(workspace=str(tmp_path / "ws"), params_path=None, world="nvlink-ib")
    assert pipeline_run(request).world == "nvlink-ib"
    assert OrchestratorRequest().world is None and pipeline_run(OrchestratorRequest()).world is None


def test_the_flow_and_the_library_refuse_an_unknown_world_before_the_workspace(tmp_path: Path) -> None:
    params = write_params(tmp_path / "p.yaml", publish={"store_uri": str(tmp_path / "store")})
    flow = OrchestratorRequest(workspace=str(tmp_path / "ws"), params_path=str(params), world="ib200")
    for request in (pipeline_run(flow), PipelineRun(workspace=tmp_path / "ws", params=params, world="ib200")):
        runner = InProcessRunner()
        with pytest.raises(ConfigError, match=r"^unknown world 'ib200' \(world.name\): choose fast, nvlink-ib, host"):
            run_pipeline(request, runner)
        assert runner.steps == [] and not (tmp_path / "ws").exists()  # refused before the workspace's lock


def test_a_named_world_replaces_the_workspace_params_world_whole_and_the_run_says_so(tmp_path: Path) -> None:
    """The workspace's params declare a world of their own; the run names `fast`: its figures are dropped (a
    profile takes none), the workspace gets `world: {name: fast}`, and the run's log says what was dropped."""
    ws = tmp_path / "ws"
    ws.mkdir()
    write_params(ws / "params.yaml", world=OWN, publish={"store_uri": str(tmp_path / "store")})
    setup = steps.run_setup(ws, None, None, None, (None, None), world="fast")
    assert setup.params_text is not None and yaml.safe_load(setup.params_text)["world"] == {"name": "fast"}
    note = setup.settings.world_note
    assert note == "world fast replaces the params' world 'ib200' whole: its alpha_ms, intra_host_gbps, source dropped"
    assert steps.run_setup(ws, None, None, None, (None, None)).settings.world_note is None  # no world named
    said: list[str] = []
    request = PipelineRun(workspace=ws, world="fast", inventory_name="absent", store=str(tmp_path / "store"))
    with pytest.raises(DreamshardError, match="no inventory 'absent'"):  # the run's first step: none in the store
        run_pipeline(request, InProcessRunner(log=said.append))
    assert note in said
