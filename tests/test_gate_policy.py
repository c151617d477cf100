"""The publish policy (dreamshard.gate.publish_policy) on hand-set values: what the gate's decision means given what the
store's current plan can serve. Every reason the policy gives starts with the gate's own finding: no sentence is
edited to change a decision."""

from __future__ import annotations

from store_helpers import make_plan

from dreamshard.gate import evaluate_gate
from dreamshard.gate.publish_policy import CurrentPlan, cannot_serve, current_plan, publish_verdict
from dreamshard.values import GateDecision, Topology


def _inconclusive() -> GateDecision:
    """Paired rounds that straddle the threshold: plan / baseline 0.9 to 1.1."""
    d = evaluate_gate(make_plan(overall=10.0), {"size_greedy": [9.0, 11.0, 10.0]}, 0.0, plan_samples=[10.0, 10.0, 10.0])
    assert d.outcome == "inconclusive", d.reason
    return d


def test_the_gates_inconclusive_reason_is_its_finding_then_the_current_plan_staying() -> None:
    d = _inconclusive()
    assert d.finding.startswith("inconclusive: measured 10 ms vs best baseline size_greedy 10 ms")
    assert d.finding.endswith("within the noise")
    assert d.reason == f"{d.finding}, the current plan stays (measure more rounds)"


def test_inside_the_noise_with_nothing_current_the_plan_becomes_the_first() -> None:
    d = _inconclusive()
    v = publish_verdict(d, CurrentPlan(inventory_name="inv"))
    assert v.outcome == "first-plan" and v.decision.approved and v.decision.outcome == "approved"
    assert v.decision.reason == f"{d.finding}, no plan is current for 'inv': it becomes current"
    assert v.fallback is None


def test_inside_the_noise_a_current_plan_that_can_serve_stays() -> None:
    d = _inconclusive()
    v = publish_verdict(d, CurrentPlan(inventory_name="inv", plan_id="p-old"))
    assert v.outcome == "inconclusive" and v.decision == d


def test_inside_the_noise_the_same_placement_says_no_round_could_tell_them_apart() -> None:
    d = _inconclusive()
    v = publish_verdict(d, CurrentPlan(inventory_name="inv", plan_id="p-old", same_placement=True))
    assert v.outcome == "same-as-current" and not v.decision.approved
    assert v.decision.reason.startswith(f"{d.finding}, the current plan p-old stays (this plan places every table")
    assert "measure more rounds" not in v.decision.reason


def test_a_current_plan_that_cannot_serve_leaves_nothing_to_keep() -> None:
    d = _inconclusive()
    why = "the current plan p-old is for 4 x cpu (batch 2048) and cannot serve this topology"
    v = publish_verdict(d, CurrentPlan(inventory_name="inv", plan_id="p-old", cannot_serve=why))
    assert v.outcome == "first-plan" and v.decision.reason == f"{d.finding}, {why}: it becomes current"


def test_approvals_and_rejections_pass_through_without_a_comparison() -> None:
    approved = evaluate_gate(make_plan(overall=8.0), {"size_greedy": 10.0}, 0.0)
    rejected = evaluate_gate(make_plan(overall=12.0), {"size_greedy": 10.0}, 0.0)
    nothing = CurrentPlan(inventory_name="inv")
    assert publish_verdict(approved, nothing).decision == approved
    v = publish_verdict(rejected, nothing)  # no comparison: no baseline to fall back on
    assert v.outcome == "rejected" and v.decision == rejected and v.fallback is None


def test_what_the_current_plan_can_serve() -> None:
    plan = make_plan(overall=10.0)
    assert current_plan("inv", None, plan, None) == CurrentPlan(inventory_name="inv")
    same = current_plan("inv", plan.model_copy(update={"plan_id": "p-old"}), plan, None)
    assert same.plan_id == "p-old" and same.cannot_serve == "" and same.same_placement
    wider = plan.model_copy(update={"plan_id": "p-4", "topology": Topology(num_devices=4, memory_per_device_gb=1.0)})
    assert "p-4 is for 4 x cpu (batch 2048) and cannot serve this topology" in cannot_serve(wider, plan)
    judged = plan.model_copy(update={"schema_fingerprint": "a" * 64})  # the gate's, from the plan's inventory
    old = plan.model_copy(update={"plan_id": "p-s"})
    assert "p-s places another table schema (bbbbbbbbbbbb" in cannot_serve(old, judged, "b" * 64)
    assert cannot_serve(old, judged, "a" * 64) == ""  # a statistics-only change keeps the schema
