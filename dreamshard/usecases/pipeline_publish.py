"""The pipeline's publish step, after the DVC stages and outside DVC (docs/architecture/pipeline.md, "One stage graph"):
the workspace's data/plan.json handed to the one publish use case (`usecases.publish.publish`) with
data/comparison.json, the workspace's publish params and the run's lineage (the only door that attaches lineage),
and the workspace commit tagged with the decision (`published/<plan id>` or `rejected/<plan id>`). A plan id the
store already decided for this inventory version keeps that decision. `publish_workspace` is the step, run under a
`Runner` (dreamshard.usecases.runner): the use case's decision and write are its steps, its reviewer the runner's."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from dreamshard.config.publish import PublishConfig
from dreamshard.config.settings import Settings, resolve
from dreamshard.documents import load_inventory, load_plan
from dreamshard.explain.report import stats_markdown
from dreamshard.pipeline.decisions import tag_decision
from dreamshard.pipeline.workspace import COMPARISON, INVENTORY, MODEL_DIR, PARAMS, PLAN, PipelineWorkspace
from dreamshard.usecases import publish as publish_uc
from dreamshard.usecases.explain import stats_of
from dreamshard.usecases.pipeline_steps import absolute_uri
from dreamshard.usecases.publication import Publication
from dreamshard.usecases.runner import PublishedPlan, Runner, Step
from dreamshard.values.lineage import Lineage

#: The evaluate stage's markdown report of the comparison (dvc.yaml), what a reviewer reads.
COMPARISON_REPORT = "reports/comparison.md"

LINEAGE = Step(name="lineage")


class WorkspacePublish(BaseModel):
    """The publish step's inputs: the workspace whose data/plan.json is gated, the store (None: the workspace's
    publish.store_uri), a reviewer asked for on top of publish.require_human (True adds one; nothing removes the
    team's), and the run recorded in the lineage (None: the runner's own)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    workspace: Path
    store: str | None = None
    endpoint_url: str | None = None
    require_human: bool | None = None
    run_id: str | None = None


class PublishSetup(BaseModel):
    """The publish step's settings (the workspace's params.yaml), its store, and whether a reviewer decides."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    root: str
    settings: Settings
    store_uri: str  # absolute
    endpoint_url: str | None = None
    require_human: bool

    @property
    def rules(self) -> PublishConfig:
        return self.settings.publish


def publish_setup(
    workspace: str, store_uri: str | None, endpoint_url: str | None, require_human: bool | None
) -> PublishSetup:
    """The workspace's publish params, the store (`store_uri`, else publish.store_uri), and the reviewer rule
    (publish.require_human, or `require_human` True)."""
    ws = PipelineWorkspace(workspace)
    settings = resolve(ws.path(PARAMS))
    pub = settings.publish
    return PublishSetup(
        root=str(ws.root),
        settings=settings,
        store_uri=absolute_uri(store_uri or pub.store_uri),
        endpoint_url=endpoint_url,
        require_human=pub.require_human or bool(require_human),
    )


def review_note(root: str) -> str:
    """What a reviewer reads besides the decision: where the run's plan and its comparison report are."""
    ws = PipelineWorkspace(root)
    return f"The plan: `{ws.path(PLAN)}`; the comparison with every baseline: `{ws.path(COMPARISON_REPORT)}`."


def lineage(root: str, flow_run_id: str | None) -> Lineage:
    """What produced the workspace's current outputs (read after the run's commit)."""
    return PipelineWorkspace(root).lineage(flow_run_id)


def publish_request(setup: PublishSetup, asked: bool | None, lin: Lineage) -> publish_uc.PublishRequest:
    """The publish use case's request for the workspace's data/plan.json, its inventory and data/comparison.json
    (each read once), with the run's lineage."""
    ws = PipelineWorkspace(setup.root)
    comparison, source = publish_uc.read_comparison(ws.path(COMPARISON))
    return publish_uc.PublishRequest(
        settings=setup.settings,
        plan=load_plan(ws.path(PLAN)),
        inventory=load_inventory(ws.path(INVENTORY)),
        comparison=comparison,
        comparison_source=source,
        store=setup.store_uri,
        endpoint_url=setup.endpoint_url,
        require_human=asked,
        lineage=lin,
        review_note=review_note(setup.root),
    )


def tag_decisions(root: str, done: Publication) -> None:
    """Tag the workspace commit with the judged plan's decision, and the fallback's when it became current (a
    change waiting for a reviewer is no decision yet: untagged, and the next run finds it pending)."""
    if done.status in ("pending", "already-pending", "already-decided") or done.plan_id is None:
        return
    tag_decision(root, done.plan_id, done.status == "published", done.reason)
    f = done.fallback_ref
    if done.status == "fallback" and f is not None:
        tag_decision(root, f.plan_id, True, f.reason)


def publish_workspace(request: WorkspacePublish, runner: Runner) -> Publication:
    """The publish step under `runner`: the run's lineage, then the one publish use case (its decision and its write
    as two of the runner's steps, the runner's reviewer asked in between), the workspace commit tagged, the report
    shown. A plan the store had decided (or holds pending) keeps that."""
    setup = publish_setup(str(request.workspace), request.store, request.endpoint_url, request.require_human)
    lin = runner.step(LINEAGE, lineage, setup.root, request.run_id or runner.run_id())
    done = publish_uc.publish(publish_request(setup, request.require_human, lin), runner.reviewer, runner)
    tag_decisions(setup.root, done)
    if done.plan is not None and done.comparison is not None and done.inventory is not None:
        model = PipelineWorkspace(setup.root).path(MODEL_DIR)
        stats = stats_markdown(stats_of(done.inventory, done.plan, model))
        runner.show(PublishedPlan(publication=done, store_uri=setup.store_uri, stats_markdown=stats))
    runner.log(f"{done.status} plan {done.plan_id}: {done.reason}")
    return done
