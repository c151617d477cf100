"""plan_and_publish_flow: plan with DreamShard, compare with heuristics, gate, optional human approval, publish."""

from __future__ import annotations

from typing import Any

from prefect import flow, get_run_logger
from prefect.input import RunInput
from pydantic import BaseModel, ConfigDict

from dreamshard.evaluation import Comparison, write_comparison_outputs
from dreamshard.io import load_inventory
from dreamshard.sharders import LEARNED
from flows.artifacts import publish_plan_artifacts
from flows.requests import PublishRequest, Workspace
from flows.tasks import compare_task, gate_task, plan_task, publish_task
from flows.train_flows import load_configs


class ApprovalInput(RunInput):
    """What a reviewer answers in the Prefect UI when publish.require_human is true."""

    approve: bool = False
    comment: str = ""


class PublishOutcome(BaseModel):
    model_config = ConfigDict(extra="forbid")

    plan_id: str
    approved: bool
    reason: str
    key: str | None = None
    store: str
    is_current: bool = False
    overall_ms: float | None = None
    best_heuristic: str | None = None
    best_heuristic_ms: float | None = None


def write_comparison_report(comparison: Comparison, ws: Workspace) -> None:
    """comparison.json / .md / .png and every contender's plan under plans/ in the workspace."""
    write_comparison_outputs(comparison, json_path=ws.comparison, markdown_path=ws.comparison.with_suffix(".md"),
                             plot_path=ws.comparison.with_suffix(".png"), plans_dir=ws.plans_dir)


def _human_review(decision: Any, timeout_s: int) -> Any:
    """Pause for a reviewer; a rejection (or a comment) is recorded in the decision's reason."""
    from prefect.exceptions import FlowPauseTimeout
    from prefect.flow_runs import pause_flow_run

    try:
        answer: ApprovalInput = pause_flow_run(wait_for_input=ApprovalInput, timeout=timeout_s, poll_interval=2)
    except FlowPauseTimeout:
        # No answer in time: keep the plan as rejected with that reason rather than losing it.
        return decision.model_copy(
            update={"approved": False, "reason": f"no reviewer answered within {timeout_s} s ({decision.reason})"}
        )
    note = f"; reviewer: {answer.comment}" if answer.comment else ""
    if answer.approve:
        return decision.model_copy(update={"reason": decision.reason + f"; approved by a human{note}"})
    return decision.model_copy(update={"approved": False, "reason": f"rejected by a human reviewer{note} ({decision.reason})"})


@flow(name="plan-and-publish", log_prints=True)
def plan_and_publish_flow(request: PublishRequest) -> PublishOutcome:
    """Plan the workspace inventory with the trained model, measure it against every heuristic, gate, publish."""
    log = get_run_logger()
    ws = request.workspace
    cfg = load_configs(request)
    pub = cfg.publish
    store_uri = request.store_uri or pub.store_uri
    inventory = load_inventory(ws.inventory)
    topology = cfg.topology.topology(cfg.plan_devices)
    options: dict[str, Any] = {"model_dir": str(ws.model_dir), "seed": cfg.profile.seed}
    if cfg.plan.samples:
        options["samples"] = cfg.plan.samples

    # The learned sharders (the RL policy and LPT on the cost net's predictions) are all measured with the
    # baselines; the one that measured fastest is the candidate the gate judges.
    learned = [s for s in LEARNED if s in cfg.evaluate.sharders] or ["dreamshard"]
    candidates = [plan_task(inventory, topology, name, options) for name in learned]
    contenders = [s for s in cfg.evaluate.sharders if s not in learned]
    comparison = compare_task(
        inventory, topology, contenders, cfg.profile, cfg.evaluate.rounds, {},
        extra_plans=candidates,
    )
    write_comparison_report(comparison, ws)
    ids = {p.plan_id for p in candidates}
    measured = min((r for r in comparison.results if r.plan.plan_id in ids), key=lambda r: r.overall_ms).plan
    decision = gate_task(measured, comparison.baselines(), pub.min_improvement)
    require_human = pub.require_human if request.require_human is None else request.require_human
    if decision.approved and require_human:
        decision = _human_review(decision, timeout_s=pub.approval_timeout_s)
    ref = publish_task(store_uri, request.endpoint_url, measured, decision)
    publish_plan_artifacts(measured, comparison, decision, ref, store_uri)
    log.info("%s plan %s: %s", "published" if decision.approved else "rejected", measured.plan_id, decision.reason)
    return PublishOutcome(
        plan_id=measured.plan_id,
        approved=decision.approved,
        reason=decision.reason,
        key=ref.key,
        store=store_uri,
        is_current=ref.is_current,
        overall_ms=decision.plan_cost_ms,
        best_heuristic=decision.best_heuristic,
        best_heuristic_ms=decision.best_heuristic_ms,
    )
