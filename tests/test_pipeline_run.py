"""The pipeline as a library use case (dreamshard.usecases.pipeline_run) under the in-process runner: what it
refuses before any stage, from the library and from the CLI (`dreamshard pipeline run --runner in-process`), and
its terminal reviewer. Its whole runs (every stage, publish, then nothing to do) are the first version of
test_orchestrator_integration.py, run by the CLI in a process whose Prefect API is a closed port; the Prefect
runner's own behaviour (task runs, the pause, workers) is tested there and in test_flows_operations.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from flows_support import tiny_inventory, write_params

from dreamshard.cli.app import invoke
from dreamshard.errors import ConfigError
from dreamshard.usecases.pipeline_run import PipelineRun, run_pipeline
from dreamshard.usecases.review import NoReviewer, ScriptedReviewer
from dreamshard.usecases.runner import InProcessRunner

pytestmark = pytest.mark.integration


def _request(tmp_path: Path, **fields: object) -> PipelineRun:
    params = write_params(tmp_path / "params.yaml", publish={"store_uri": str(tmp_path / "store")})
    inventory = tiny_inventory(tmp_path / "inv.yaml")
    return PipelineRun(
        workspace=tmp_path / "ws",
        params=params,
        inventory=inventory,
        dvc_remote=str(tmp_path / "remote"),
        **fields,  # type: ignore[arg-type]
    )


def test_what_the_runner_cannot_do_is_refused_before_any_stage(tmp_path: Path) -> None:
    """Dispatch `workers` needs an orchestration API: refused in one line naming the setting, with no stage run.
    A runner with no reviewer is no error: a change that needs one waits, pending (tests/test_publish_path.py)."""
    runner = InProcessRunner()
    with pytest.raises(ConfigError, match="pipeline.dispatch 'workers'"):
        run_pipeline(_request(tmp_path, dispatch="workers"), runner)
    assert runner.steps == [] and not (tmp_path / "ws").exists()  # refused before the workspace's lock
    scripted = ScriptedReviewer()
    assert InProcessRunner(reviewer=scripted).reviewer is scripted and isinstance(runner.reviewer, NoReviewer)


def test_the_cli_refuses_what_the_in_process_runner_cannot_do_before_writing_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`dreamshard pipeline run --runner in-process` with `--dispatch workers`, an unknown runner, or
    publish.require_human and no terminal: one line each, exit 2, before the run takes the workspace. (Its runs
    themselves: the first version of test_orchestrator_integration.py, in a process with no Prefect API.)"""
    params = write_params(tmp_path / "params.yaml", publish={"store_uri": str(tmp_path / "store")})
    tiny_inventory(tmp_path / "inv.yaml")
    monkeypatch.chdir(tmp_path)
    args = ["pipeline", "run", "-i", "inv.yaml", "-w", "ws", "--params", str(params), "--dvc-remote", "remote"]
    code, out, err = invoke([*args, "--runner", "in-process", "--dispatch", "workers"])
    assert code == 2 and "--dispatch workers needs --runner prefect" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "ws").exists()
    code, out, err = invoke([*args, "--runner", "sideways"])
    assert code == 2 and "--runner must be prefect or in-process" in err
    assert not (tmp_path / "ws" / ".pipeline.lock").exists()  # refused before the run took the workspace


def test_the_terminal_reviewer_answers_or_times_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """At a terminal the question is shown and answered there, within publish.approval_timeout_s as the UI's pause:
    an answer is the review, silence past the timeout is none (the change waits, pending)."""
    import time

    import typer

    from dreamshard.cli.review import TerminalReviewer
    from dreamshard.values.review import ReviewQuestion

    def question(timeout_s: int) -> ReviewQuestion:
        return ReviewQuestion(
            inventory_name="tiny",
            plan_id="p",
            change="approval",
            headline="make plan p current",
            details="**x**",
            timeout_s=timeout_s,
        )

    monkeypatch.setattr(typer, "confirm", lambda *a, **k: True)
    monkeypatch.setattr(typer, "prompt", lambda *a, **k: "looks right")
    got = TerminalReviewer().ask(question(5))
    assert got is not None and got.approve and got.comment == "looks right" and got.via == "the terminal"

    def silent(*a: object, **k: object) -> bool:
        time.sleep(5)
        return True

    monkeypatch.setattr(typer, "confirm", silent)
    started = time.monotonic()
    assert TerminalReviewer().ask(question(1)) is None
    assert time.monotonic() - started < 4
