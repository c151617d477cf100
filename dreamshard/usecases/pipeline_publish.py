"""The pipeline's publish step, after the DVC stages and outside DVC (docs/architecture/pipeline.md, "One stage graph"):
the workspace's data/plan.json gated against data/comparison.json with the workspace's publish params
(`usecases.publish.gate`), the run's lineage attached (the only door that attaches lineage), the decision stored
and the workspace commit tagged with it (`published/<plan id>` or `rejected/<plan id>`). A plan id the store
already decided for this inventory version keeps that decision. `publish_workspace` is the step, run under a
`Runner` (dreamshard.usecases.runner): each function below is one of its steps; a reviewer's answer is
`reviewed`."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from dreamshard.config.publish import PublishConfig
from dreamshard.config.settings import Settings, resolve
from dreamshard.documents import load_inventory, load_plan
from dreamshard.evaluation import Comparison
from dreamshard.explain.report import stats_markdown
from dreamshard.pipeline.decisions import tag_decision
from dreamshard.pipeline.workspace import COMPARISON, INVENTORY, MODEL_DIR, PARAMS, PLAN, PipelineWorkspace
from dreamshard.store import PublishedRef, open_store
from dreamshard.usecases import publish as publish_uc
from dreamshard.usecases.explain import stats_of
from dreamshard.usecases.pipeline_steps import PublishOutcome, absolute_uri
from dreamshard.usecases.runner import PublishedPlan, Runner, Step
from dreamshard.values import GateDecision, Inventory, Plan
from dreamshard.values.lineage import Lineage

#: The evaluate stage's markdown report of the comparison (dvc.yaml), what a reviewer reads.
COMPARISON_REPORT = "reports/comparison.md"

GATE = Step(name="gate")
LINEAGE = Step(name="lineage")
STORE = Step(name="publish-plan", retries=2, retry_delay_s=2)


class WorkspacePublish(BaseModel):
    """The publish step's inputs: the workspace whose data/plan.json is gated, the store (None: the workspace's
    publish.store_uri), the reviewer rule (None: publish.require_human), and the run recorded in the lineage
    (None: the runner's own)."""

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

    def reviews(self, decision: GateDecision) -> bool:
        """Whether a reviewer decides on `decision`: one that would make a plan current, when one is required."""
        return self.require_human and decision.approved


def publish_setup(
    workspace: str, store_uri: str | None, endpoint_url: str | None, require_human: bool | None
) -> PublishSetup:
    """The workspace's publish params, the store (`store_uri`, else publish.store_uri), and the reviewer rule
    (`require_human`, else publish.require_human)."""
    ws = PipelineWorkspace(workspace)
    settings = resolve(ws.path(PARAMS))
    pub = settings.publish
    return PublishSetup(
        root=str(ws.root),
        settings=settings,
        store_uri=absolute_uri(store_uri or pub.store_uri),
        endpoint_url=endpoint_url,
        require_human=pub.require_human if require_human is None else require_human,
    )


class GatedWorkspace(BaseModel):
    """A decision the gate made now on the workspace's plan, with the inventory and comparison it read (what the
    published plan's report shows: read once)."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    result: publish_uc.GateResult
    inventory: Inventory
    comparison: Comparison


def gate_workspace_plan(setup: PublishSetup) -> GatedWorkspace | publish_uc.GateResult:
    """Verify data/plan.json against the workspace inventory and data/comparison.json, then decide
    (`usecases.publish.gate`): the plan to store carries the comparison's measured costs; a rejected plan for a
    version no current plan can serve carries the fallback. When the store already holds a decision for this plan
    id and inventory version, that one is returned alone (a GateResult): one decision per plan."""
    ws = PipelineWorkspace(setup.root)
    store = open_store(setup.store_uri, endpoint_url=setup.endpoint_url)
    plan = load_plan(ws.path(PLAN))
    done = publish_uc.recorded(store, plan)
    if done is not None:
        return done
    comparison, source = publish_uc.read_comparison(ws.path(COMPARISON))
    inventory = load_inventory(ws.path(INVENTORY))
    request = publish_uc.PublishRequest(
        settings=setup.settings, plan=plan, comparison=comparison, comparison_source=source, inventory=inventory
    )
    return GatedWorkspace(result=publish_uc.gate(request, store), inventory=inventory, comparison=comparison)


def recorded_outcome(gated: publish_uc.GateResult, store_uri: str) -> PublishOutcome:
    """The outcome of a plan the store had decided already: nothing re-measured, reviewed or stored."""
    judged, decision = gated.plan, gated.decision
    lin = judged.lineage
    return PublishOutcome(
        plan_id=judged.plan_id,
        approved=decision.approved,
        reason=f"already decided: {decision.reason}",
        outcome=decision.outcome,
        already_decided=True,
        store=store_uri,
        overall_ms=decision.plan_cost_ms,
        best_baseline=decision.best_baseline,
        best_baseline_ms=decision.best_baseline_ms,
        model_md5=lin.model_md5 if lin else None,
        git_revision=lin.git_revision if lin else None,
    )


def review_description(root: str, plan_id: str, decision: GateDecision) -> str:
    """What a reviewer sees in the Prefect UI's pause (publish.require_human), in markdown: the plan, what the gate
    decided and why (the interval, its width, the evidence), and where the plan's reports are in the workspace."""
    ws = PipelineWorkspace(root)
    lines = [
        f"**Publish gate: `{decision.shown}`** for plan `{plan_id}` of inventory version "
        f"`{decision.inventory_fingerprint[:12]}`.",
        "",
        decision.reason,
    ]
    if decision.ratio_low is not None and decision.ratio_high is not None:
        lines += [
            "",
            f"plan / {decision.decided_by}: [{decision.ratio_low:.4f}, {decision.ratio_high:.4f}] "
            f"over {decision.rounds} round(s) at {decision.confidence or 0:.0%}",
        ]
    lines += [
        "",
        f"Evidence: {decision.evidence or 'none recorded'}",
        "",
        f"The plan: `{ws.path(PLAN)}`; the comparison with every baseline: `{ws.path(COMPARISON_REPORT)}`.",
        "Approve to make it current; reject (or no answer in time) keeps it as rejected.",
    ]
    return "\n".join(lines)


def reviewed(decision: GateDecision, approve: bool | None, comment: str = "", timeout_s: int = 0) -> GateDecision:
    """A reviewer's answer on a decision that would make a plan current (publish.require_human): `approve` None
    means nobody answered within `timeout_s` (the plan is kept as rejected rather than lost). The reviewer's
    comment is recorded in the reason."""
    note = f"; reviewer: {comment}" if comment else ""
    if approve is None:
        return decision.overruled(f"no reviewer answered within {timeout_s} s ({decision.reason})")
    if approve:
        return decision.revised(reason=f"{decision.reason}; approved by a human{note}")
    return decision.overruled(f"rejected by a human reviewer{note} ({decision.reason})")


def lineage(root: str, flow_run_id: str | None) -> Lineage:
    """What produced the workspace's current outputs (read after the run's commit)."""
    return PipelineWorkspace(root).lineage(flow_run_id)


def store_decision(
    store_uri: str, endpoint_url: str | None, plan: Plan, decision: GateDecision, lineage: Lineage | None
) -> PublishedRef:
    """The plan with the run's `lineage`, stored: approved, versioned upload, verify, move `current`; rejected /
    inconclusive, kept under rejected/ with the reason. A plan id the store already decided for this inventory
    version keeps that decision."""
    store = open_store(store_uri, endpoint_url=endpoint_url)
    return publish_uc.store_decision(store, plan.model_copy(update={"lineage": lineage}), decision)


def tag_decisions(root: str, plan_id: str, decision: GateDecision, fallback: PublishedRef | None) -> None:
    """Tag the workspace commit with the plan's decision (and the fallback's, when it became current)."""
    tag_decision(root, plan_id, decision.approved, decision.reason)
    if fallback is not None and fallback.is_current:
        tag_decision(root, fallback.plan_id, True, fallback.reason)


def published_outcome(
    ref: PublishedRef, decision: GateDecision, store_uri: str, lineage: Lineage, fallback: PublishedRef | None
) -> PublishOutcome:
    """The outcome of a plan the publish step decided now."""
    return PublishOutcome(
        plan_id=ref.plan_id,
        approved=decision.approved,
        reason=decision.reason,
        outcome=decision.outcome,
        key=ref.key,
        store=store_uri,
        is_current=ref.is_current,
        overall_ms=decision.plan_cost_ms,
        best_baseline=decision.best_baseline,
        best_baseline_ms=decision.best_baseline_ms,
        model_md5=lineage.model_md5,
        git_revision=lineage.git_revision,
        fallback_plan_id=fallback.plan_id if fallback is not None and fallback.is_current else None,
    )


def _store_reviewed(
    plan: Plan, decision: GateDecision, lineage: Lineage | None, setup: PublishSetup, runner: Runner
) -> tuple[PublishedRef, GateDecision]:
    """One write of the gate's result (`GateResult.writes`: the fallback, then the judged plan), with the run's
    lineage; a reviewer, when one is required, decides first on any decision that would make a plan current."""
    if setup.reviews(decision):
        timeout_s = setup.rules.approval_timeout_s
        answer = runner.review(review_description(setup.root, plan.plan_id, decision), timeout_s)
        decision = reviewed(decision, answer.approve if answer else None, answer.comment if answer else "", timeout_s)
    ref = runner.step(STORE, store_decision, setup.store_uri, setup.endpoint_url, plan, decision, lineage)
    return ref, decision


def publish_workspace(request: WorkspacePublish, runner: Runner) -> PublishOutcome:
    """The publish step under `runner`: gate, lineage, each write reviewed when required and stored, the workspace
    commit tagged, the report shown. A plan the store had decided keeps that decision."""
    setup = publish_setup(str(request.workspace), request.store, request.endpoint_url, request.require_human)
    gate = runner.step(GATE, gate_workspace_plan, setup)
    if isinstance(gate, publish_uc.GateResult):  # decided once per plan id and version: nothing measured or stored
        runner.log(f"already decided: {gate.decision.outcome} plan {gate.plan.plan_id}: {gate.decision.reason}")
        return recorded_outcome(gate, setup.store_uri)
    gated = gate.result
    lin = runner.step(LINEAGE, lineage, setup.root, request.run_id or runner.run_id())
    stored = [_store_reviewed(plan, decided, lin, setup, runner) for plan, decided in gated.writes()]
    ref, decision = stored[-1]
    fallback = stored[0][0] if len(stored) > 1 else None
    tag_decisions(setup.root, gated.plan.plan_id, decision, fallback)
    plan = gated.plan.model_copy(update={"lineage": lin})
    stats = stats_of(gate.inventory, plan, PipelineWorkspace(setup.root).path(MODEL_DIR))
    runner.show(
        PublishedPlan(
            plan=plan,
            comparison=gate.comparison,
            decision=decision,
            ref=ref,
            store_uri=setup.store_uri,
            stats_markdown=stats_markdown(stats),
            inventory=gate.inventory,
        )
    )
    done = decision.label or ("published" if decision.approved else decision.outcome)
    runner.log(f"{done} plan {plan.plan_id}: {decision.reason}")
    if fallback is not None:
        runner.log(f"fallback {fallback.plan_id}: {fallback.reason}")
    return published_outcome(ref, decision, setup.store_uri, lin, fallback)
