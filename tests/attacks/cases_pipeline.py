"""Attacks on the pipeline's doors (issue 39, defects 12 and 13): `dreamshard pipeline run` with a simulator
backend the publish gate would refuse at the end (refused before any stage runs, unless `--allow-simulated` or
`publish.allow_simulated` says so), `--params` files holding only the keys a user changes (they layer over the
pipeline's own params), a known error inside a flow (logged as its one line), and the deployments' registered
paths (absolute, from the registering directory; a worker runs each flow in a temporary one). The world is empty:
no ./params.yaml, so the installed one is the pipeline's params.

Every `pipeline run` case holds the orchestrator off (`no_orchestrator`): a refusal that came only after the
stages started fails at once instead of running the pipeline. The runs that go through (the simulator allowed,
a partial file) are tests/test_pipeline_inputs.py's, with the orchestrator stubbed; the replan deployment on a
worker started from another directory is tests/test_orchestrator_integration.py's."""

from __future__ import annotations

import logging
import sys
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
    import dreamshard_flows.stage_tasks  # noqa: F401  what a flow process imports

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


CASES: list[Case] = [
    Refused(
        "pipeline run --backend simulator without --allow-simulated is refused before any stage",
        f"{RUN} --backend simulator",
        ("profile.backend is simulator", "--allow-simulated", "publish.allow_simulated"),
        guard=no_orchestrator,
        seconds=30,
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
        ("evaluate.rounds 3 is below publish.min_rounds 5",),
        setup=written("partial.yaml", "evaluate: {rounds: 3}\n"),
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
]

TABLE = Table(surface="pipeline", cases=CASES)
