"""`dreamshard pipeline ...` inputs that used to fail late or loudly:

- a simulator backend is refused before any stage runs unless `--allow-simulated` (or `publish.allow_simulated`)
  says so; with it, the workspace's params carry it to the gate;
- a `--params` file holding only the keys a user changes layers over the pipeline's own params (the installed
  params.yaml), and the workspace gets the whole layered file its DVC stages read alone;
- a known error (DreamshardError) failing a flow's task is logged as its one line, not a traceback.

The CLI runs in-process with the orchestrator replaced: these are the checks before it starts."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest
import yaml
from flows_support import Orchestrator, stub_orchestrator

from dreamshard.cli.app import invoke
from dreamshard.config.settings import pipeline_base, resolve
from dreamshard.errors import ConfigError, StoreError
from dreamshard.usecases import pipeline_steps as steps

#: A params file of the keys a user changes (the rest: the pipeline's own params).
PARTIAL = "plan: {verify: 2}\ntrain: {iterations: 2}\n"


@pytest.fixture
def orchestrator(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Orchestrator:
    # no ./params.yaml in tmp_path: the installed one is the default
    stub = stub_orchestrator(monkeypatch, tmp_path, "pool")
    return stub


def _run(*args: str) -> tuple[int, str, str]:
    return invoke(["pipeline", "run", "--workspace", "ws", "--store", "store", *args])


def _one_line(res: tuple[int, str, str]) -> str:
    code, out, err = res
    assert code == 2 and "Traceback" not in out + err, (code, err[-2000:])
    (line,) = err.strip().splitlines()
    return line


def test_a_simulator_backend_is_refused_before_any_stage(orchestrator: Orchestrator, tmp_path: Path) -> None:
    line = _one_line(_run("--backend", "simulator"))
    assert line.startswith("error: ConfigError: profile.backend is simulator") and "--allow-simulated" in line
    assert "publish.allow_simulated" in line
    (tmp_path / "sim.yaml").write_text("profile: {backend: simulator}\n")  # the params say it, not an option
    assert "--allow-simulated" in _one_line(_run("--params", "sim.yaml"))
    assert orchestrator.prepared == [] and not (tmp_path / "ws").exists()  # nothing ran, nothing written


@pytest.mark.parametrize(
    ("args", "params"),
    [(["--allow-simulated"], None), ([], "publish: {allow_simulated: true}\n")],
    ids=["--allow-simulated", "publish.allow_simulated"],
)
def test_a_simulator_backend_runs_when_asked(
    orchestrator: Orchestrator, tmp_path: Path, args: list[str], params: str | None
) -> None:
    if params is not None:
        (tmp_path / "p.yaml").write_text(params)
        args = [*args, "--params", "p.yaml"]
    code, _, err = _run("--backend", "simulator", *args)
    assert code == 0, err
    (prepared,) = orchestrator.prepared
    assert prepared.allow_simulated is bool(not params) and prepared.backend == "simulator"
    # What the flow does with it: the workspace's params (which the gate reads) allow a simulated basis.
    setup = steps.run_setup(
        tmp_path / "ws",
        str(prepared.params),
        prepared.backend,
        str(tmp_path / "store"),
        (None, None),
        allow_simulated=prepared.allow_simulated,
    )
    assert setup.params_text is not None
    written = yaml.safe_load(setup.params_text)
    assert written["profile"]["backend"] == "simulator" and written["publish"]["allow_simulated"] is True


def test_the_flow_refuses_a_simulator_backend_before_any_stage(tmp_path: Path) -> None:
    """A flow run started elsewhere (a deployment, a trigger) is refused by the same rule."""
    params = tmp_path / "p.yaml"
    params.write_text("profile: {backend: simulator}\n")
    with pytest.raises(ConfigError, match="publish.allow_simulated"):
        steps.run_setup(tmp_path / "ws", str(params), None, str(tmp_path / "store"), (None, None))
    with pytest.raises(ConfigError, match="publish.allow_simulated"):
        steps.run_setup(tmp_path / "ws", None, "simulator", str(tmp_path / "store"), (None, None))
    assert steps.run_setup(tmp_path / "ws", str(params), None, None, (None, None), allow_simulated=True)


def test_a_partial_params_file_layers_over_the_pipelines_own(orchestrator: Orchestrator, tmp_path: Path) -> None:
    (tmp_path / "partial.yaml").write_text(PARTIAL)
    code, _, err = _run("--params", "partial.yaml")
    assert code == 0, err  # was: evaluate.rounds 3 is below publish.min_rounds 5
    (prepared,) = orchestrator.prepared
    setup = steps.run_setup(tmp_path / "ws", str(prepared.params), None, None, (None, None))
    own = resolve(pipeline_base())
    cfg = setup.settings
    assert cfg.plan.verify == 2 and cfg.train.iterations == 2  # the file's
    assert cfg.evaluate == own.evaluate and cfg.publish == own.publish and cfg.profile == own.profile  # the rest
    assert cfg.plan.verify_rounds == own.plan.verify_rounds and cfg.train.seed == own.train.seed
    # The workspace gets the whole layered file: its DVC stages read it alone, with no base.
    assert setup.params_text is not None
    (tmp_path / "ws-params.yaml").write_text(setup.params_text)
    alone = resolve(tmp_path / "ws-params.yaml")
    alone.check_pipeline()
    assert alone.plan == cfg.plan and alone.evaluate == own.evaluate and alone.train == cfg.train


def test_a_full_params_file_is_copied_as_it_is(tmp_path: Path) -> None:
    """A file that says everything itself reaches the workspace unchanged (its comments kept)."""
    setup = steps.run_setup(tmp_path / "ws", str(pipeline_base()), None, str(tmp_path / "store"), (None, None))
    assert setup.params_text == pipeline_base().read_text()


def test_layering_merges_nested_sections_and_a_bad_key_still_fails_in_one_line(tmp_path: Path) -> None:
    partial = tmp_path / "p.yaml"
    partial.write_text("pretrain: {loop: {iterations: 1}}\n")
    cfg = resolve(partial, base=pipeline_base())
    own = resolve(pipeline_base())
    assert cfg.pretrain.loop.iterations == 1 and cfg.pretrain.loop.cost == own.pretrain.loop.cost
    partial.write_text("evaluate: {rounds: 3}\n")  # said by the user: still below publish.min_rounds
    with pytest.raises(ConfigError, match="evaluate.rounds 3 is below publish.min_rounds 5"):
        steps.check_run(resolve(partial, base=pipeline_base()))
    partial.write_text("plan: {verify: -1}\n")
    with pytest.raises(ConfigError, match=r"p\.yaml: plan\.verify"):
        resolve(partial, base=pipeline_base())


def test_pipeline_drift_layers_its_params_file(tmp_path: Path) -> None:
    from dreamshard_flows.drift import library_request
    from dreamshard_flows.requests import DriftRequest

    partial = tmp_path / "p.yaml"
    partial.write_text("drift: {threshold: 0.5}\n")
    lib = library_request(DriftRequest(inventory_name="pool", params_path=str(partial)))
    assert lib.settings.drift.threshold == 0.5 and lib.settings.profile == resolve(pipeline_base()).profile


def _formatted(logger_name: str, exc: BaseException) -> str:
    """What a handler on `logger_name` writes for a failed run's record carrying `exc` (as Prefect logs it)."""
    import dreamshard_flows.runner  # noqa: F401  the flows' module: what a flow process imports

    logger = logging.getLogger(logger_name)
    stream: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            stream.append(self.format(record))

    handler = Collect(level=logging.ERROR)
    handler.setFormatter(logging.Formatter("%(message)s"))
    saved = logger.handlers, logger.propagate
    logger.handlers, logger.propagate = [handler], False  # this handler alone (no API, no console)
    try:
        try:
            raise exc
        except BaseException:
            logger.error(f"Task run failed with exception: {exc!r}", exc_info=sys.exc_info())
    finally:
        logger.handlers, logger.propagate = saved
    return "\n".join(stream)


@pytest.mark.parametrize("logger_name", ["prefect.task_runs", "prefect.flow_runs"])
def test_a_known_error_in_a_flow_is_logged_as_its_one_line(logger_name: str) -> None:
    known = _formatted(logger_name, StoreError("no inventory 'x' in /s: push one with `dreamshard inventory push`"))
    assert known == "StoreError: no inventory 'x' in /s: push one with `dreamshard inventory push`"
    other = _formatted(logger_name, ValueError("a bug"))
    assert "Traceback" in other and "ValueError: a bug" in other  # anything else keeps its traceback
