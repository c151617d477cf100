"""publish-plan: the step after the DVC stages, outside DVC (dreamshard.usecases.pipeline_publish). It gates the
workspace's data/plan.json against data/comparison.json with the workspace's publish params, optionally waits for
a reviewer (the Prefect UI's pause), attaches the plan's lineage, publishes it (or keeps it as rejected /
inconclusive) and tags the workspace commit with the decision. A plan id the store already decided for this
inventory version keeps that decision."""

from __future__ import annotations

from dreamshard_flows.artifacts import publish_plan_artifacts
from dreamshard_flows.logs import one_line_known_errors
from dreamshard_flows.requests import WorkspacePublishRequest
from dreamshard_flows.stage_tasks import gate_task, lineage_task, publish_task
from prefect import flow, get_run_logger
from prefect.exceptions import FlowPauseTimeout
from prefect.input import RunInput
from prefect.runtime import flow_run

from dreamshard.usecases import pipeline_publish as publish_uc
from dreamshard.usecases.pipeline_publish import PublishSetup, reviewed
from dreamshard.usecases.pipeline_steps import PublishOutcome
from dreamshard.values import GateDecision, Plan
from dreamshard.values.lineage import Lineage
from dreamshard.values.records import PublishedRef

one_line_known_errors()  # a DreamshardError in a task or flow is logged as its one line (dreamshard_flows.logs)

__all__ = ["ApprovalInput", "PublishOutcome", "publish_workspace_plan"]


class ApprovalInput(RunInput):
    """What a reviewer answers in the Prefect UI when publish.require_human is true."""

    approve: bool = False
    comment: str = ""


def _human_review(decision: GateDecision, timeout_s: int, description: str = "") -> GateDecision:
    """Pause for a reviewer, showing them `description` (the gate's decision and where the reports are:
    `review_description`); their answer (or none in time) is the publish step's `reviewed`."""
    from prefect.flow_runs import pause_flow_run  # looked up per call: tests replace it

    asked = ApprovalInput.with_initial_data(description=description) if description else ApprovalInput
    try:
        answer: ApprovalInput = pause_flow_run(wait_for_input=asked, timeout=timeout_s, poll_interval=2)
    except FlowPauseTimeout:
        return reviewed(decision, None, timeout_s=timeout_s)
    return reviewed(decision, answer.approve, answer.comment)


@flow(name="publish-plan", log_prints=True)
def publish_workspace_plan(request: WorkspacePublishRequest) -> PublishOutcome:
    log = get_run_logger()
    setup = publish_uc.publish_setup(request.workspace, request.store_uri, request.endpoint_url, request.require_human)
    gated, already = gate_task(setup)
    if already:  # one decision per plan id and inventory version: nothing re-measured, reviewed or stored
        log.info("already decided: %s plan %s: %s", gated.decision.outcome, gated.plan.plan_id, gated.decision.reason)
        return publish_uc.recorded_outcome(gated, setup.store_uri)
    lineage = lineage_task(setup.root, request.flow_run_id or str(flow_run.id or "") or None)
    stored = [_store_reviewed(plan, decided, lineage, setup) for plan, decided in gated.writes()]
    ref, decision = stored[-1]
    fallback = stored[0][0] if len(stored) > 1 else None
    publish_uc.tag_decisions(setup.root, gated.plan.plan_id, decision, fallback)
    plan = gated.plan.model_copy(update={"lineage": lineage})
    report = publish_uc.publish_report(setup.root, plan)
    publish_plan_artifacts(
        plan, report.comparison, decision, ref, setup.store_uri, report.stats_markdown, report.inventory
    )
    done = decision.label or ("published" if decision.approved else decision.outcome)
    log.info("%s plan %s: %s", done, plan.plan_id, decision.reason)
    if fallback is not None:
        log.info("fallback %s: %s", fallback.plan_id, fallback.reason)
    return publish_uc.published_outcome(ref, decision, setup.store_uri, lineage, fallback)


def _store_reviewed(
    plan: Plan, decision: GateDecision, lineage: Lineage | None, setup: PublishSetup
) -> tuple[PublishedRef, GateDecision]:
    """One write of the gate's result (`GateResult.writes`: the fallback, then the judged plan), with the run's
    lineage; a reviewer, when one is required, decides first on any decision that would make a plan current."""
    if setup.reviews(decision):
        shown = publish_uc.review_description(setup.root, plan.plan_id, decision)
        decision = _human_review(decision, setup.rules.approval_timeout_s, shown)
    return publish_task(setup.store_uri, setup.endpoint_url, plan, decision, lineage), decision
