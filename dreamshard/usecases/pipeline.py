"""The pipeline workspace's use cases (`dreamshard pipeline init | status | run`; docs/architecture/pipeline.md, "One
stage graph"): create a workspace, say what it would run and what was decided last, and one orchestrator run: its
pre-flight (every input checked in one line before anything is written), the orchestrator itself (handed in by
the door: the Prefect flow), and what the run leaves for the user (the comparison, a copy of the model). The
orchestrator's own steps are `pipeline_steps.py`, its publish step `pipeline_publish.py`."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from dreamshard.config.settings import installed_pipeline_file, params_text, pipeline_base, resolve
from dreamshard.documents import load_inventory, save_inventory
from dreamshard.errors import ConfigError, DreamshardError, PipelineError, first_line
from dreamshard.evaluation import Comparison, load_comparison
from dreamshard.pipeline.decisions import plan_decision
from dreamshard.pipeline.incumbent import NoIncumbent, read_incumbent
from dreamshard.pipeline.workspace import (
    COMPARISON,
    INPUT_INCUMBENT,
    INPUT_INVENTORY,
    MODEL_DIR,
    PARAMS,
    PipelineWorkspace,
    RemoteSpec,
    check_directory_path,
)
from dreamshard.store import open_store
from dreamshard.usecases.base import Request, Result
from dreamshard.usecases.pipeline_run import PipelineRun
from dreamshard.usecases.pipeline_steps import Dispatch, RunSummary, check_job_world, check_run, run_setup
from dreamshard.usecases.pipeline_steps import run_overrides as run_overrides  # a run's options over its params


class InitRequest(Request):
    directory: Path
    inventory: Path | None = None  # None: the synthetic pool of params.inventory (an existing input stays)
    params: Path | None = None  # layered over the installed params.yaml; None: the workspace's, else the installed one
    dvc_remote: str | None = None  # None: the workspace's remote, else pipeline.dvc_remote
    dvc_remote_endpoint: str | None = None


class InitResult(Result):
    directory: Path
    created: bool  # False: an existing workspace (a clone) was completed
    remote: str  # the DVC remote's URL


def init(request: InitRequest) -> InitResult:
    """Create a workspace repository (git + DVC, dvc.yaml and params.yaml, the input inventory, the DVC remote,
    the code link, a note that no plan is current yet); on a clone of one, add only what is missing."""
    check_directory_path(request.directory, "workspace")  # a file at (or above) it: one line, nothing created
    ws = PipelineWorkspace(request.directory)
    source = request.params or (ws.path(PARAMS) if ws.path(PARAMS).is_file() else pipeline_base())
    base = pipeline_base() if request.params is not None else None  # a file given layers over the pipeline's own
    cfg = resolve(source, base=base)  # one-line errors before anything is created
    inv = load_inventory(request.inventory) if request.inventory is not None else None
    existing = ws.remote() if ws.exists() else None
    remote = (
        RemoteSpec(url=request.dvc_remote, endpoint_url=request.dvc_remote_endpoint)
        if request.dvc_remote
        else existing or RemoteSpec(url=cfg.pipeline.dvc_remote, endpoint_url=cfg.pipeline.dvc_remote_endpoint)
    )
    created = ws.init(installed_pipeline_file("dvc.yaml").read_text(), params_text(source, base=base), remote)
    if inv is not None or not ws.path(INPUT_INVENTORY).is_file():
        ws.write_inventory(inv if inv is not None else cfg.inventory.synthesize())
    name = load_inventory(ws.path(INPUT_INVENTORY)).name
    ws.write_incumbent(None, name, replace=False)  # `plans incumbent --inventory NAME -o inputs/incumbent.json`
    ws.commit("workspace: input inventory")
    return InitResult(directory=request.directory, created=created, remote=remote.resolved().url)


class StageStatus(BaseModel):
    """One stage as `dvc status` sees it: what changed (empty: up to date)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    stage: str
    changes: list[str]


class StatusResult(Result):
    workspace: Path
    stages: list[StageStatus]
    incumbent: str  # what the plan stage starts from (`incumbent_file`), in one line
    incumbent_file: str = INPUT_INCUMBENT
    revision: str | None  # the workspace's last commit
    plan_id: str | None  # data/plan.json's (None before the plan stage ran)
    decision: str | None  # its decision tag (None: not decided yet)


def describe_changes(entries: object) -> list[str]:
    """One stage's `dvc status` entries as `path (modified)` items (what changed, not Python's repr)."""
    parts: list[str] = []
    for entry in entries if isinstance(entries, list) else [entries]:
        if isinstance(entry, dict):
            for kind, what in entry.items():
                if isinstance(what, dict):
                    parts += [f"{path} ({how})" for path, how in what.items()]
                else:
                    parts.append(f"{kind}: {what}")
        else:
            parts.append(str(entry))
    return parts or ["changed"]


def describe_incumbent(path: Path) -> str:
    """What the plan stage starts from (inputs/incumbent.json), in one line; a file that does not check says why."""
    if not path.is_file():
        return f"none yet ({path.name} is written with the next inventory)"
    try:
        doc = read_incumbent(path)
    except DreamshardError as e:
        return f"unreadable: {first_line(e)}"
    if isinstance(doc, NoIncumbent):
        return f"none: {doc.reason}"
    return (
        f"plan {doc.plan_id} ({doc.inventory_name} {doc.inventory_fingerprint[:12]}, "
        f"{doc.topology.num_devices} devices): the plan stage searches from it"
    )


def status(workspace: Path) -> StatusResult:
    """What would run (`dvc status`), what the plan stage starts from, and the decision recorded for the
    workspace's last plan."""
    ws = PipelineWorkspace(workspace)
    if not ws.exists():
        raise PipelineError(
            f"{workspace} is not a pipeline workspace: create it with `dreamshard pipeline init {workspace}`"
        )
    stale = ws.status()
    stages = [StageStatus(stage=s, changes=describe_changes(stale[s]) if s in stale else []) for s in ws.stages()]
    plan_id, tag = plan_decision(workspace)
    return StatusResult(
        workspace=workspace,
        stages=stages,
        incumbent=describe_incumbent(ws.path(INPUT_INCUMBENT)),
        revision=ws.head(),
        plan_id=plan_id,
        decision=tag,
    )


class RunRequest(Request):
    """One orchestrator run; `settings` are the run's params (`params`, layered over the pipeline's own:
    `settings.pipeline_base()`) with the door's overrides (`run_overrides`)."""

    workspace: Path
    params: Path | None  # the params file the run copies into the workspace
    inventory: Path | None = None  # None: the workspace's input, else the synthetic pool of params.inventory
    store: str | None = None  # None: publish.store_uri
    endpoint_url: str | None = None
    dvc_remote: str | None = None
    dvc_remote_endpoint: str | None = None
    backend: str | None = None
    allow_simulated: bool = False  # a plan measured on the simulator may become current (publish.allow_simulated)
    world: str | None = None  # the job's world (world.name), replacing the params' world section whole
    dispatch: str = "auto"
    force: bool = False
    reprofile: bool = False
    export_model: Path | None = None  # also copy the trained model here
    api_url: str | None = None  # the Prefect API the workers poll (PREFECT_API_URL); None: an ephemeral one
    runner: str = "prefect"  # what runs the steps: prefect, or in-process (no Prefect server, no workers)


class PreparedRun(BaseModel):
    """What the orchestrator is handed once every input checked out."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    workspace: Path
    params: Path | None
    inventory: Path
    inventory_name: str  # the inventory's name in `inventory` (the run is named after it from its start)
    store: str | None
    endpoint_url: str | None
    dvc_remote: str | None
    dvc_remote_endpoint: str | None
    backend: str | None
    allow_simulated: bool
    world: str | None
    dispatch: Dispatch
    force: bool
    reprofile: bool


class RunResult(Result):
    summary: RunSummary
    comparison: Comparison | None = None  # the plan vs the baselines, when the run published
    exported_model: Path | None = None  # where the trained model was copied (--export-model)


#: The dispatch choices a run takes, by name.
DISPATCHES: dict[str, Dispatch] = {"auto": "auto", "local": "local", "workers": "workers"}
#: What can run the orchestrator's steps.
RUNNERS = ("prefect", "in-process")


def _dispatch(request: RunRequest) -> Dispatch:
    dispatch = DISPATCHES.get(request.dispatch)
    if dispatch is None:
        raise ConfigError(f"--dispatch must be auto, local or workers, got '{request.dispatch}'")
    if request.runner not in RUNNERS:
        raise ConfigError(f"--runner must be prefect or in-process, got '{request.runner}'")
    if dispatch == "workers" and request.runner != "prefect":
        raise ConfigError("--dispatch workers needs --runner prefect: the in-process runner has no work pool")
    if dispatch == "workers" and not request.api_url:
        raise ConfigError(
            "--dispatch workers needs a Prefect server the workers poll: start infra/start-prefect.sh "
            "and export PREFECT_API_URL=http://127.0.0.1:4200/api"
        )
    return dispatch


def prepare(request: RunRequest) -> PreparedRun:
    """The run's pre-flight: bad input fails here in one line, before the orchestrator starts and before anything
    is written (a simulator backend the gate would refuse at the end among it, `check_run`; the settings and
    remote the run itself will read, an unknown world among them, `run_setup`; a world the inventory's job
    contradicts, `check_job_world`); then the store is checked (a new local one is created) and a new workspace's
    input inventory (the synthetic pool of params.inventory) is written."""
    dispatch = _dispatch(request)
    cfg = request.settings
    if request.allow_simulated:
        cfg = cfg.model_copy(update={"publish": cfg.publish.model_copy(update={"allow_simulated": True})})
    check_run(cfg)
    remote = (request.dvc_remote, request.dvc_remote_endpoint)
    params = str(request.params) if request.params is not None else None
    root = request.workspace.resolve()
    run_setup(  # refuses first: the settings and remote the run itself will read
        root, params, request.backend, request.store, remote, request.allow_simulated, request.world
    )
    inventory = request.inventory
    if inventory is None and (request.workspace / INPUT_INVENTORY).is_file():
        inventory = request.workspace / INPUT_INVENTORY  # the workspace keeps its input unless told otherwise
    inv = load_inventory(inventory) if inventory is not None else cfg.inventory.synthesize()
    check_job_world(request.world, inv)
    out = request.export_model
    if out is not None and out.exists() and not out.is_dir():
        raise ConfigError(f"--export-model {out} is a file; give a directory")
    open_store(request.store or cfg.publish.store_uri, endpoint_url=request.endpoint_url).check()  # last: may create it
    if inventory is None:
        inventory = request.workspace / INPUT_INVENTORY
        save_inventory(inv, inventory)
    fields: dict[str, Any] = request.model_dump(
        include={
            "workspace",
            "params",
            "store",
            "endpoint_url",
            "dvc_remote",
            "dvc_remote_endpoint",
            "backend",
            "allow_simulated",
            "world",
        }
    )
    return PreparedRun(
        **fields,
        inventory=inventory,
        inventory_name=inv.name,
        dispatch=dispatch,
        force=request.force,
        reprofile=request.reprofile,
    )


def pipeline_run(prepared: PreparedRun) -> PipelineRun:
    """A prepared run as the pipeline's request (`run_pipeline`), its inventory read."""
    fields = prepared.model_dump(exclude={"inventory"})
    return PipelineRun(**fields, inventory=load_inventory(prepared.inventory))


def run(request: RunRequest, orchestrate: Callable[[PreparedRun], RunSummary]) -> RunResult:
    """Pre-flight, the orchestrator (`orchestrate`: the retrain-on-inventory-change flow), then the comparison
    of a run that published and a copy of the trained model (`export_model`)."""
    summary = orchestrate(prepare(request))
    ws = PipelineWorkspace(request.workspace)
    comparison = None
    if summary.outcome is not None and ws.path(COMPARISON).is_file():
        comparison = load_comparison(ws.path(COMPARISON))
    copied = None
    if request.export_model is not None and ws.path(MODEL_DIR).is_dir():
        shutil.rmtree(request.export_model, ignore_errors=True)
        shutil.copytree(ws.path(MODEL_DIR), request.export_model)
        copied = request.export_model
    return RunResult(summary=summary, comparison=comparison, exported_model=copied)
