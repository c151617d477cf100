"""One orchestrator run, `retrain-on-inventory-change` (docs/architecture/pipeline.md, "One stage graph"): the
stages of dvc.yaml in a workspace repository, with DVC's change detection only, then the publish step.

    prepare the workspace (stage graph, params, input inventory, remote; a new inventory: the current plan as the
                           incumbent the plan stage starts from)
    for each stage in dvc.yaml order that `dvc status` reports changed:   dvc repro --single-item STAGE  (one step)
    git commit dvc.lock  ->  dvc push  ->  publish (gate, lineage, store; tags the commit)

`run_pipeline` holds the stage loop, the dispatch choice and the decide-once rule (`pipeline_steps.next_step`);
a `Runner` (dreamshard.usecases.runner) executes each step: Prefect's flows/runner.py, or `InProcessRunner`.
`force` re-runs every stage; `reprofile` (the drift trigger) re-measures: profile and what follows.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from dreamshard.errors import ConfigError
from dreamshard.usecases import pipeline_steps as steps
from dreamshard.usecases.pipeline_publish import WorkspacePublish, publish_workspace
from dreamshard.usecases.pipeline_steps import Dispatch, RunSetup, RunSummary
from dreamshard.usecases.runner import ProfiledBatches, Runner, Step, TrainMetrics
from dreamshard.values import Inventory
from dreamshard.values.run_names import run_name

#: What a stage's command reads to name the step it runs in (the parent of the profiling batches' runs).
PARENT_STEP_ENV = "DREAMSHARD_PARENT_TASK_RUN_ID"

PREPARE = Step(name="prepare-workspace")
STATUS = Step(name="dvc-status")
COMMIT = Step(name="git-commit")
PUSH = Step(name="dvc-push", retries=2, retry_delay_s=5)
INVENTORY = Step(name="current-inventory")
INCUMBENT = Step(name="current-plan")
PUSH_INVENTORY = Step(name="push-inventory", retries=2, retry_delay_s=2)
PUBLISH = Step(name="publish-plan")


class PipelineRun(BaseModel):
    """One orchestrator run's inputs: the workspace, the params file layered over the pipeline's own (None: the
    workspace's), the inventory (None: the store's current version of `inventory_name`, else of
    params.inventory.name), where plans and data go, and the run's choices."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    workspace: Path
    params: Path | None = None
    inventory: Inventory | None = None
    inventory_name: str | None = None
    store: str | None = None
    endpoint_url: str | None = None
    dvc_remote: str | None = None
    dvc_remote_endpoint: str | None = None
    backend: str | None = None
    allow_simulated: bool = False
    world: str | None = None  # the job's world (world.name: fast, nvlink-ib, host, measured), replacing the params'
    dispatch: Dispatch = "auto"
    force: bool = False
    reprofile: bool = False
    require_human: bool | None = None  # True asks a reviewer on top of publish.require_human (never removes one)
    reason: str = "manual run"  # why the run started: the schedule, a retrain that is due, drift, a person


def stage_step(stage: str, inventory: str, version: str) -> Step:
    """A stage's step, labelled `<inventory>-<stage>-<version>`."""
    return Step(name="dvc-stage", label=run_name(inventory, stage, version), tags=("dvc",))


def run_stage(runner: Runner, root: str, stage: str, force: bool, env: dict[str, str]) -> str:
    """One stage's step (`pipeline_steps.run_stage`): each line of its output reaches the runner's log as the stage
    writes it, with a heartbeat line when it is silent; the running step is the parent of its batches' runs."""
    env = {**env, PARENT_STEP_ENV: runner.step_id() or ""}
    out = steps.run_stage(root, stage, force, env, on_line=runner.log)
    runner.log(f"stage {stage} done")
    return out


def _start(root: str, request: PipelineRun, setup: RunSetup, runner: Runner) -> tuple[RunSummary, dict[str, str]]:
    """Prepare the workspace for the run's inventory: the summary so far and the stages' environment."""
    name = request.inventory_name or setup.settings.inventory.name
    inventory = request.inventory or runner.step(
        INVENTORY, steps.run_inventory, None, setup.store_uri, request.endpoint_url, name
    )
    steps.check_job_world(request.world, inventory)  # before the workspace is prepared
    job = setup.settings.topology_for_job(inventory.job)  # what the plan stage plans for
    incumbent = runner.step(INCUMBENT, steps.current_plan, setup.store_uri, request.endpoint_url, inventory.name, job)
    changed = runner.step(PREPARE, steps.prepare_workspace, root, setup.params_text, inventory, setup.remote, incumbent)
    campaign = runner.run_id() or "local"
    deployment = setup.settings.pipeline.profile_deployment
    api = runner.api_url()
    dispatch = steps.dispatch_for(request.dispatch, api, lambda: runner.workers_alive(deployment))
    runner.step(PUSH_INVENTORY, steps.store_inventory, setup.store_uri, request.endpoint_url, inventory)
    runner.log(f"workspace {root} ({', '.join(changed) or 'unchanged'}); profiling batches run {dispatch}")
    runner.rename(run_name(inventory.name, "pipeline", inventory.fingerprint()))
    summary = RunSummary(
        inventory_name=inventory.name,
        inventory_fingerprint=inventory.fingerprint(),
        workspace=root,
        dispatch=dispatch,
        campaign=campaign,
        why=request.reason,
    )
    workers_api = api if dispatch == "workers" else None
    return summary, steps.stage_env(setup.store_uri, request.endpoint_url, campaign, dispatch, workers_api)


def _run_stages(root: str, request: PipelineRun, env: dict[str, str], summary: RunSummary, runner: Runner) -> list[str]:
    """Every stage that `dvc status` says changed (or that the request forces), in dvc.yaml order."""
    ran: list[str] = []
    stale = runner.step(STATUS, steps.stale_stages, root)
    for stage in steps.stages(root):
        if steps.runs(stage, stale, request.force, request.reprofile):
            forced = steps.forced(stage, request.force, request.reprofile)
            step = stage_step(stage, summary.inventory_name, summary.inventory_fingerprint)
            runner.step(step, run_stage, runner, root, stage, forced, env)
            ran.append(stage)
            stale = steps.stale_stages(root)  # what this stage's new outputs made stale downstream
    return ran


def _reports(summary: RunSummary, setup: RunSetup, endpoint_url: str | None, runner: Runner) -> None:
    if "profile" in summary.ran:
        shards = steps.campaign_shards(setup.store_uri, endpoint_url, summary.campaign)
        runner.show(ProfiledBatches(inventory_name=summary.inventory_name, shards=shards))
    if "train" in summary.ran and (metrics := steps.train_metrics(summary.workspace)) is not None:
        runner.show(TrainMetrics(inventory_name=summary.inventory_name, metrics=metrics))


def check_runner(request: PipelineRun, runner: Runner, setup: RunSetup) -> None:
    """What the runner must offer the run, checked before any stage runs: an orchestration API for dispatch
    `workers`. (A run whose runner has no reviewer while publish.require_human is on is no error: its plan waits,
    pending, for `dreamshard plans approve`.)"""
    if request.dispatch == "workers" and runner.api_url() is None:
        raise ConfigError(
            "pipeline.dispatch 'workers' needs a runner with a Prefect server the workers poll; this runner has none"
        )


def _setup(request: PipelineRun, root: Path) -> RunSetup:
    params = str(request.params) if request.params is not None else None
    remote = (request.dvc_remote, request.dvc_remote_endpoint)
    return steps.run_setup(root, params, request.backend, request.store, remote, request.allow_simulated, request.world)


def run_pipeline(request: PipelineRun, runner: Runner) -> RunSummary:
    """One orchestrator run under `runner`: the stages DVC says changed, commit, push, and the publish step for a
    plan not decided yet (a plan is decided once)."""
    root = request.workspace.resolve()
    check_runner(request, runner, _setup(request, root))  # before the lock: a refusal leaves no workspace behind
    runner.log(f"why: {request.reason}")
    with steps.workspace_lock(root / steps.LOCK_FILE):
        setup = _setup(request, root)  # read again under the lock: the workspace's params are this run's
        if setup.settings.world_note is not None:
            runner.log(setup.settings.world_note)  # a named world dropped the params' own figures
        summary, env = _start(str(root), request, setup, runner)
        summary.ran = _run_stages(str(root), request, env, summary, runner)
        _reports(summary, setup, request.endpoint_url, runner)
        committed = None
        if steps.uncommitted(str(root)):
            committed = runner.step(COMMIT, steps.commit, str(root), steps.commit_message(summary))
        summary.git_revision = steps.revision(str(root))
        step = steps.next_step(str(root), summary, committed)
        summary.current_plan_id = step.current_plan_id
        if step.action != "stop":
            runner.step(PUSH, steps.push, str(root))
            summary.pushed = True
        if step.action != "publish":
            summary.reason = step.reason
            runner.log(summary.reason)
            return summary
        publish = WorkspacePublish(
            workspace=root,
            store=setup.store_uri,
            endpoint_url=request.endpoint_url,
            require_human=request.require_human,
            run_id=summary.campaign,
        )
        outcome = runner.nested(PUBLISH, publish_workspace, publish, runner)
        summary = steps.published(summary, committed, outcome)
        runner.log(summary.reason)
        return summary
