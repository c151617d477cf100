"""publish-plan: the step after the DVC stages, outside DVC. It gates the workspace's data/plan.json against
data/comparison.json (the library gate verifies the plan against the inventory and the comparison, with the
workspace's publish params: required baselines, confidence, min_rounds, allow_simulated), optionally waits for a
reviewer, attaches the plan's lineage (from dvc.lock; the only door that attaches lineage), publishes it (or keeps
it as rejected / inconclusive) and tags the workspace commit with the decision (`published/<plan id>` or
`rejected/<plan id>`). A plan id the store already decided for this inventory version keeps that decision."""

from __future__ import annotations

from typing import Any

from dreamshard_flows.artifacts import publish_plan_artifacts
from dreamshard_flows.requests import PublishRequest
from dreamshard_flows.stage_tasks import absolute_uri, gate_task, lineage_task, publish_task
from prefect import flow, get_run_logger
from prefect.exceptions import FlowPauseTimeout
from prefect.input import RunInput
from prefect.runtime import flow_run
from pydantic import BaseModel, ConfigDict

from dreamshard.config.settings import resolve
from dreamshard.documents import load_inventory, load_plan
from dreamshard.evaluation import load_comparison
from dreamshard.explain.stats import stats_markdown
from dreamshard.pipeline.workspace import COMPARISON, INVENTORY, MODEL_DIR, PARAMS, PLAN, PipelineWorkspace
from dreamshard.usecases.explain import stats_of

#: Tags on the workspace commit a decision was made for (the orchestrator's "already published" check).
DECISION_TAGS = ("published/", "rejected/")


class ApprovalInput(RunInput):
    """What a reviewer answers in the Prefect UI when publish.require_human is true."""

    approve: bool = False
    comment: str = ""


class PublishOutcome(BaseModel):
    model_config = ConfigDict(extra="forbid")

    plan_id: str
    approved: bool
    reason: str
    outcome: str = ""  # approved / rejected / inconclusive (the current plan stays)
    already_decided: bool = False  # the store held a decision for this plan id and inventory version
    key: str | None = None
    store: str
    is_current: bool = False
    overall_ms: float | None = None
    best_baseline: str | None = None
    best_baseline_ms: float | None = None
    model_md5: str | None = None
    git_revision: str | None = None
    fallback_plan_id: str | None = None  # rejected for a version nothing current could serve: the baseline made current


def _human_review(decision: Any, timeout_s: int) -> Any:
    """Pause for a reviewer; a rejection (or a comment) is recorded in the decision's reason."""
    from prefect.flow_runs import pause_flow_run  # looked up per call: tests replace it

    try:
        answer: ApprovalInput = pause_flow_run(wait_for_input=ApprovalInput, timeout=timeout_s, poll_interval=2)
    except FlowPauseTimeout:
        # No answer in time: keep the plan as rejected with that reason rather than losing it.
        return decision.overruled(f"no reviewer answered within {timeout_s} s ({decision.reason})")
    note = f"; reviewer: {answer.comment}" if answer.comment else ""
    if answer.approve:
        return decision.model_copy(update={"reason": decision.reason + f"; approved by a human{note}"})
    return decision.overruled(f"rejected by a human reviewer{note} ({decision.reason})")


def decision_tag(tags: list[str]) -> str | None:
    """The decision tag among some tags (None: none is a decision)."""
    return next((t for t in tags if t.startswith(DECISION_TAGS)), None)


def plan_decision(ws: Any) -> tuple[str | None, str | None]:
    """(plan id of the workspace's data/plan.json, its decision tag); (None, None) before the plan stage ran."""
    if not ws.path(PLAN).is_file():
        return None, None
    plan_id = load_plan(ws.path(PLAN)).plan_id
    return plan_id, decision_tag(ws.tags(*(f"{t}{plan_id}" for t in DECISION_TAGS)))


@flow(name="publish-plan", log_prints=True)
def publish_workspace_plan(request: PublishRequest) -> PublishOutcome:
    log = get_run_logger()
    ws = PipelineWorkspace(request.workspace)
    settings = resolve(ws.path(PARAMS))
    pub = settings.publish
    store_uri = absolute_uri(request.store_uri or pub.store_uri)
    gated, already = gate_task(str(ws.root), settings, store_uri, request.endpoint_url)
    judged, decision = gated.plan, gated.decision
    if already:  # one decision per plan id and inventory version: nothing re-measured, reviewed or stored
        log.info("already decided: %s plan %s: %s", decision.outcome, judged.plan_id, decision.reason)
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
    require_human = pub.require_human if request.require_human is None else request.require_human
    if decision.approved and require_human:
        decision = _human_review(decision, timeout_s=pub.approval_timeout_s)
    lineage = lineage_task(str(ws.root), request.flow_run_id or str(flow_run.id or "") or None)
    plan = judged.model_copy(update={"lineage": lineage})
    fallback = (
        _publish_fallback(gated, lineage, store_uri, request.endpoint_url, require_human, pub.approval_timeout_s)
        if gated.fallback is not None
        else None
    )
    ref = publish_task(store_uri, request.endpoint_url, plan, decision)
    ws.tag(f"{'published' if decision.approved else 'rejected'}/{plan.plan_id}", decision.reason)
    if fallback is not None and fallback.is_current:
        ws.tag(f"published/{fallback.plan_id}", fallback.reason)
    comparison = load_comparison(ws.path(COMPARISON))
    inventory = load_inventory(ws.path(INVENTORY))
    stats = stats_of(inventory, plan, ws.path(MODEL_DIR))
    publish_plan_artifacts(plan, comparison, decision, ref, store_uri, stats_markdown(stats), inventory)
    log.info("%s plan %s: %s", "published" if decision.approved else "rejected", plan.plan_id, decision.reason)
    if fallback is not None:
        log.info("fallback %s: %s", fallback.plan_id, fallback.reason)
    return PublishOutcome(
        plan_id=plan.plan_id,
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


def _publish_fallback(
    gated: Any, lineage: Any, store_uri: str, endpoint_url: str | None, require_human: bool, timeout_s: int
) -> Any:
    """The fallback (the best measured baseline, for a version the current plan cannot serve), with the run's
    lineage, published before the rejection is recorded (usecases.publish.store_gated); a reviewer, when one is
    required, decides on it like on any plan that would become current."""
    decision = gated.fallback_decision
    if require_human:
        decision = _human_review(decision, timeout_s=timeout_s)
    return publish_task(store_uri, endpoint_url, gated.fallback.model_copy(update={"lineage": lineage}), decision)
