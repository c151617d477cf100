"""The orchestrator's steps (`retrain-on-inventory-change`, docs/architecture/pipeline.md, "One stage graph"): each one
a use-case call a Prefect task wraps, and the rules between them: the workspace lock, where the run's params come
from, which stages run, and that each plan is decided once."""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from dreamshard.config.settings import Settings, installed_pipeline_file, params_text, pipeline_base, resolve
from dreamshard.config.world import world_overrides
from dreamshard.documents import load_inventory
from dreamshard.errors import ConfigError, StoreError
from dreamshard.pipeline.decisions import plan_decision
from dreamshard.pipeline.params_sections import topped_up
from dreamshard.pipeline.workspace import PARAMS, PipelineWorkspace, RemoteSpec
from dreamshard.profiling.batches import ProfileShard, list_shards
from dreamshard.store import InventoryRef, get_current_inventory, open_store, push_inventory
from dreamshard.usecases.publication import Publication
from dreamshard.usecases.stored import current_or_none, job_incumbent
from dreamshard.values import Inventory, Plan, Topology

#: Where the workspace lock lives inside a workspace (git-ignored).
LOCK_FILE = ".pipeline.lock"
#: How the profile stage runs its batches: `workers` = one run of the profile-batch deployment per batch (a work
#: pool's workers pull them), `local` = in the stage's own process, `auto` = workers when a Prefect server is
#: configured and a worker of the deployment's pool is alive, else local.
Dispatch = Literal["auto", "local", "workers"]


@contextmanager
def workspace_lock(path: str | Path) -> Iterator[None]:
    """Exclusive advisory lock on `path`: two pipeline runs never work in one workspace at once (DVC's own lock
    would fail the second one instead of waiting). Blocks until the holder releases it; released on exit."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with open(p, "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            fh.seek(0)
            fh.truncate()
            fh.write(f"{os.getpid()}\n")
            fh.flush()
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def absolute_uri(uri: str, base: Path | None = None) -> str:
    """A local store or remote path made absolute (stage commands run with the workspace as working directory)."""
    if "://" in uri and not uri.startswith("file://"):
        return uri
    p = Path(uri.removeprefix("file://")).expanduser()
    return str(p if p.is_absolute() else ((base or Path.cwd()) / p).resolve())


class RunSummary(BaseModel):
    """What one orchestrator run did, and why it ran."""

    model_config = ConfigDict(extra="forbid")

    inventory_name: str
    inventory_fingerprint: str
    workspace: str
    ran: list[str] = Field(default_factory=list)  # stages run, in order
    dispatch: str = "local"  # where profiling batches ran
    campaign: str = ""  # the profiling campaign (this flow run's id)
    git_revision: str | None = None
    pushed: bool = False
    outcome: Publication | None = None  # what the publish step did (None: the run did not publish)
    current_plan_id: str | None = None
    reason: str = ""
    why: str = ""  # what started the run (the schedule, a retrain that is due, drift, a person)

    @property
    def published(self) -> bool:
        return self.outcome is not None


class RunSetup(BaseModel):
    """A run's settings and where it writes: the params lookup (the request's file layered over the pipeline's own
    params, `settings.pipeline_base()`; else the workspace's own params.yaml, which its stages read), the plan
    store, the DVC remote, the params text the workspace gets."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    settings: Settings
    store_uri: str  # absolute
    remote: RemoteSpec  # resolved
    params_text: str | None  # None: the workspace keeps its params.yaml


def run_overrides(backend: str | None, allow_simulated: bool, world: str | None = None) -> dict[str, Any]:
    """What a run's options say over its params: the backend, a simulated basis allowed, and the job's world (a
    name of `WORLD_NAMES`; it replaces the params' world section whole), None: not said. ConfigError naming the
    known worlds for any other name."""
    return {
        "profile.backend": backend,
        "publish.allow_simulated": True if allow_simulated else None,
        **world_overrides(world),
    }


def check_run(settings: Settings) -> None:
    """What a pipeline run needs of its settings, checked before any stage runs (each refusal one line): the
    rules across sections (`Settings.check_pipeline`), and a backend whose plans the publish gate would take. The
    gate refuses a plan measured only on the simulator unless publish.allow_simulated says so; a run that would
    profile, train, plan and evaluate only to be refused at the end is refused here instead."""
    settings.check_pipeline()
    if settings.profile.backend == "simulator" and not settings.publish.allow_simulated:
        raise ConfigError(
            "profile.backend is simulator: the publish gate refuses a plan whose only basis is the simulator; "
            "set publish.allow_simulated to publish it, or measure on cpu or cuda"
        )


def run_setup(
    root: Path,
    params_path: str | None,
    backend: str | None,
    store_uri: str | None,
    remote: tuple[str | None, str | None],
    allow_simulated: bool = False,
    world: str | None = None,
) -> RunSetup:
    """The run's settings (checked for a pipeline run, `check_run`) and destinations; `remote` is (url, endpoint),
    each None for the pipeline section's. A params file given layers over the pipeline's own params
    (`pipeline_base()`); without one, the workspace's params.yaml (already whole: its stages read it alone) is
    read as it is, else the pipeline's own. The options (`run_overrides`) are set in the params text the
    workspace gets."""
    ws_params = PipelineWorkspace(root).path(PARAMS)
    overrides = run_overrides(backend, allow_simulated, world)
    source: Path | str = params_path or (ws_params if ws_params.is_file() else pipeline_base())
    base = pipeline_base() if params_path else None
    cfg = resolve(source, overrides, base=base)
    check_run(cfg)
    told = any(v is not None for v in overrides.values())
    url, endpoint = remote
    return RunSetup(
        settings=cfg,
        store_uri=absolute_uri(store_uri or cfg.publish.store_uri),
        remote=RemoteSpec(
            url=url or cfg.pipeline.dvc_remote, endpoint_url=endpoint or cfg.pipeline.dvc_remote_endpoint
        ).resolved(),
        # the workspace keeps its params.yaml unless the run was given a file or told otherwise (the gate reads it)
        params_text=params_text(source, overrides, base=base) if params_path or told or source != ws_params else None,
    )


def check_job_world(world: str | None, inventory: Inventory) -> None:
    """A world named for a run must be the one the inventory's job records, when it records one: the plan stage
    plans for the job (its world over the params'), and the gate checks the plan against it. ConfigError naming
    both otherwise."""
    recorded = inventory.job.world if inventory.job is not None else None
    if world is None or recorded is None or recorded.name == world:
        return
    raise ConfigError(
        f"inventory '{inventory.name}' records its job's world {recorded.name}: the pipeline plans for the job and "
        f"the gate checks it, so world {world} cannot stand; drop it, or record the job's world in the inventory"
    )


def run_inventory(inventory_path: str | None, store_uri: str, endpoint_url: str | None, name: str) -> Inventory:
    """The inventory a run plans for: the file given, else the store's current version of `name`."""
    if inventory_path:
        return load_inventory(inventory_path)
    found = get_current_inventory(open_store(store_uri, endpoint_url=endpoint_url), name)
    if found is None:
        raise StoreError(
            f"no inventory '{name}' in {store_uri}: push one with `dreamshard inventory push INV --store URI`"
        )
    return found[0]


def current_plan(
    store_uri: str, endpoint_url: str | None, inventory_name: str, topology: Topology | None = None
) -> Plan | None:
    """The incumbent a new version is planned from (None: none yet): the plan current for the inventory now; given
    the `topology` the run plans for (its job's), the plan that job runs now (`stored.job_incumbent`)."""
    store = open_store(store_uri, endpoint_url=endpoint_url)
    if topology is None:
        return current_or_none(store, inventory_name)
    return job_incumbent(store, inventory_name, topology)


def store_inventory(store_uri: str, endpoint_url: str | None, inventory: Inventory) -> InventoryRef:
    """The inventory version a run plans for goes to the store (`inventories/<name>/<fingerprint>.yaml`, current):
    the store's current inventory and current plan never disagree because a run forgot to push it."""
    return push_inventory(open_store(store_uri, endpoint_url=endpoint_url), inventory, store_uri=store_uri)


def prepare_workspace(
    root: str, params: str | None, inventory: Inventory, remote: RemoteSpec, incumbent: Plan | None = None
) -> list[str]:
    """Create or update the workspace: the installed stage graph, the run's params, the input inventory, the
    remote, the code link, and, when the inventory changed, the incumbent (`incumbent`, the plan current now, the
    new version is planned from; dreamshard.pipeline.incumbent). Returns what changed."""
    dvc_yaml = installed_pipeline_file("dvc.yaml").read_text()
    ws = PipelineWorkspace(root)
    default_params = installed_pipeline_file("params.yaml").read_text()
    changed = ["created"] if ws.init(dvc_yaml, params or default_params, remote) else []
    if ws.sync_text("dvc.yaml", dvc_yaml):
        changed.append("dvc.yaml")
    if params is not None and ws.sync_text("params.yaml", params):
        changed.append("params.yaml")
    elif params is None:
        text, added = topped_up(ws.kept_text("params.yaml"), default_params)
        if added and ws.sync_text("params.yaml", text):
            changed.append(f"params.yaml: added {', '.join(added)} at the defaults")
    ws.set_remote(remote)
    new_inventory = ws.write_inventory(inventory)
    if new_inventory:
        changed.append("inventory")
    if ws.write_incumbent(incumbent, inventory.name, replace=new_inventory):
        changed.append(f"incumbent {incumbent.plan_id}" if incumbent is not None else "incumbent (none current)")
    return changed


def stages(root: str) -> list[str]:
    """The stages of the workspace's dvc.yaml, in the order they run."""
    return PipelineWorkspace(root).stages()


def stale_stages(root: str) -> dict[str, Any]:
    """`dvc status`: the stages whose dependencies, params or outputs changed."""
    return PipelineWorkspace(root).status()


def forced(stage: str, force: bool, reprofile: bool) -> bool:
    """Whether a stage runs whatever DVC says: every stage is forced, or the run re-measures (`reprofile`: profile
    is forced, and what follows runs because its input changed)."""
    return force or (reprofile and stage == "profile")


def runs(stage: str, stale: dict[str, Any], force: bool, reprofile: bool) -> bool:
    """Whether a stage runs: DVC says it changed, or it is forced."""
    return forced(stage, force, reprofile) or stage in stale


def run_stage(
    root: str, stage: str, force: bool, env: dict[str, str], on_line: Callable[[str], None] | None = None
) -> str:
    """`dvc repro --single-item STAGE`: the stage's command from dvc.yaml, recorded in dvc.lock; its output (each
    line also to `on_line` as the stage writes it, with a heartbeat line while it is silent)."""
    return PipelineWorkspace(root).repro(stage, force=force, env=env, on_line=on_line)


def uncommitted(root: str) -> bool:
    """Whether the workspace holds changes to commit (this run's lock, or one a crashed run left uncommitted)."""
    return PipelineWorkspace(root).dirty()


def commit_message(summary: RunSummary) -> str:
    ran = ", ".join(summary.ran) or "no stage"
    return f"pipeline run {summary.campaign}: {ran} ({summary.inventory_name} {summary.inventory_fingerprint[:12]})"


def commit(root: str, message: str) -> str | None:
    """Commit what the run changed; None: nothing changed."""
    return PipelineWorkspace(root).commit(message)


def revision(root: str) -> str | None:
    return PipelineWorkspace(root).head()


def push(root: str) -> str:
    """`dvc push`: the run's data and model reach the remote before a plan that depends on them is published."""
    return PipelineWorkspace(root).push()


def dispatch_for(requested: str, api_url: str | None, workers_alive: Callable[[], bool]) -> str:
    """Where the profiling batches run: as requested, except `auto`: the workers when a Prefect server is
    configured (`api_url`) and one of the deployment's workers is alive (else the batches would wait for nobody)."""
    if requested == "workers" and not api_url:
        raise ConfigError(
            "dispatch 'workers' needs a Prefect server the workers poll: start infra/start-prefect.sh "
            "and export PREFECT_API_URL=http://127.0.0.1:4200/api, or dispatch the batches locally"
        )
    if requested != "auto":
        return requested
    return "workers" if api_url and workers_alive() else "local"


def stage_env(
    store_uri: str, endpoint_url: str | None, campaign: str, dispatch: str, api_url: str | None = None
) -> dict[str, str]:
    """What a stage's command needs beyond dvc.yaml: where profiling shards go and how batches run (read by
    `dreamshard profile-stage`; nothing here changes a stage's result); the workers' API with `workers`."""
    env = {
        "DREAMSHARD_PROFILE_STORE": store_uri,
        "DREAMSHARD_PROFILE_CAMPAIGN": campaign,
        "DREAMSHARD_PROFILE_DISPATCH": dispatch,
    }
    if endpoint_url:
        env["DREAMSHARD_PROFILE_ENDPOINT"] = endpoint_url
    if dispatch == "workers" and api_url:
        env["PREFECT_API_URL"] = api_url
    return env


def campaign_shards(store_uri: str, endpoint_url: str | None, campaign: str) -> list[ProfileShard]:
    """Every shard the run's profiling campaign wrote: who measured which batch."""
    return list_shards(open_store(store_uri, endpoint_url=endpoint_url), campaign)


def train_metrics(root: str) -> JsonValue:
    """The train stage's metrics (None when it wrote none)."""
    ws = PipelineWorkspace(root)
    for rel in ("metrics/train.json", "models/dreamshard/metrics.json"):
        p = ws.path(rel)
        if p.is_file():
            return json.loads(p.read_text())
    return None


class NextStep(BaseModel):
    """After the stages: what the run does next. A plan is decided once (plan ids are unique in the store): the
    publish step runs for a plan with no decision tag yet (after the plan stage ran, or when a run stopped
    before publishing); a run that changed nothing and committed nothing stops; one that changed something but
    whose plan was decided pushes and stops."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    action: Literal["stop", "push", "publish"]
    plan_id: str | None = None
    tag: str | None = None  # the plan's decision tag (None: undecided)
    current_plan_id: str | None = None  # the decided plan, when its decision made it current
    reason: str = ""


def next_step(root: str, summary: RunSummary, committed: str | None) -> NextStep:
    """The decide-once rule on the workspace's data/plan.json and its decision tags."""
    plan_id, tag = plan_decision(root)
    if tag is None:
        return NextStep(action="publish", plan_id=plan_id)
    current = plan_id if tag.startswith("published/") else None
    if not summary.ran and committed is None:
        reason = (
            f"inventory {summary.inventory_fingerprint[:12]}: no stage changed; plan {plan_id} "
            f"was decided ({tag}) at {(summary.git_revision or '')[:12]}; nothing to do"
        )
        return NextStep(action="stop", plan_id=plan_id, tag=tag, current_plan_id=current, reason=reason)
    reason = (
        f"ran {', '.join(summary.ran) or 'no stage'}; committed and pushed; plan {plan_id} was "
        f"already decided ({tag}): nothing to publish (a forced run re-plans for a new decision)"
    )
    return NextStep(action="push", plan_id=plan_id, tag=tag, current_plan_id=current, reason=reason)


def published(summary: RunSummary, committed: str | None, outcome: Publication) -> RunSummary:
    """The summary of a run whose publish step decided on its plan (published, rejected, or pending a reviewer)."""
    reason = (
        (f"ran {', '.join(summary.ran)}; " if summary.ran else "no stage changed; ")
        + ("committed, " if committed else "")
        + f"pushed; {outcome.status} plan {outcome.plan_id}: "
        + outcome.reason
    )
    return summary.model_copy(update={"outcome": outcome, "current_plan_id": outcome.current_plan_id, "reason": reason})
