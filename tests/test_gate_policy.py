"""The publish policy (dreamshard.gate.publish_policy) on hand-set values: what the gate's decision means for the
store's current plan. Constraints and the job come first; the fallback starts from the current plan extended.
Every reason the policy gives starts with the gate's own finding: no sentence is edited to change a decision."""

from __future__ import annotations

from store_helpers import LAYOUTS, hand_judgement, make_plan

from dreamshard.gate import Incumbent, evaluate_gate
from dreamshard.gate.publish_policy import publish_verdict
from dreamshard.sharders.extend import EXTENDED
from dreamshard.values import GateDecision, Inventory, Table, TableConstraints, Topology


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
    nothing = Incumbent(inventory_name="inv")
    v = publish_verdict(hand_judgement(d, {"size_greedy": [9.0, 11.0, 10.0]}), nothing)
    assert v.outcome == "first-plan" and v.change == "first-plan" and v.decision.approved
    assert v.decision.outcome == "approved" and v.decision.label == "current: first plan, inconclusive"
    assert v.decision.reason == f"{d.finding}, no plan is current for 'inv': it becomes current"
    assert v.fallback is None


def test_inside_the_noise_a_current_plan_that_can_serve_stays() -> None:
    d = _inconclusive()
    old = make_plan(overall=9.0).model_copy(update={"plan_id": "p-old", "placement": LAYOUTS[5]})
    serves = Incumbent(inventory_name="inv", plan_id="p-old", plan=old, contender=old)
    v = publish_verdict(hand_judgement(d, {"size_greedy": [9.0, 11.0, 10.0]}), serves)
    assert v.outcome == "inconclusive" and v.decision == d and v.change is None


def test_inside_the_noise_the_same_placement_says_no_round_could_tell_them_apart() -> None:
    d = _inconclusive()
    old = make_plan(overall=10.0).model_copy(update={"plan_id": "p-old", "placement": LAYOUTS[0]})
    serves = Incumbent(inventory_name="inv", plan_id="p-old", plan=old, contender=old)
    v = publish_verdict(hand_judgement(d, {"size_greedy": [9.0, 11.0, 10.0]}), serves)
    assert v.outcome == "same-as-current" and not v.decision.approved and v.change is None
    assert v.decision.reason.startswith(f"{d.finding}, the current plan p-old stays (this plan places every table")
    assert "measure more rounds" not in v.decision.reason


def test_a_current_plan_that_cannot_serve_is_replaced() -> None:
    d = _inconclusive()
    why = "the current plan p-old is for 4 x cpu (batch 2048) and cannot serve this topology"
    cannot = Incumbent(inventory_name="inv", plan_id="p-old", cannot_serve=why)
    v = publish_verdict(hand_judgement(d, {"size_greedy": [9.0, 11.0, 10.0]}), cannot)
    assert v.outcome == "replaces" and v.change == "replaces" and v.decision.approved
    assert v.decision.reason == f"{d.finding}, {why}: it becomes current"
    assert v.decision.label == "current: replaces, inconclusive"


def test_approvals_pass_through_and_a_rejection_with_nothing_measured_to_fall_back_on_stays_one() -> None:
    approved = evaluate_gate(make_plan(overall=8.0), {"size_greedy": 10.0}, 0.0)
    rejected = evaluate_gate(make_plan(overall=12.0), {"size_greedy": 10.0}, 0.0)
    nothing = Incumbent(inventory_name="inv")
    v = publish_verdict(hand_judgement(approved, {}), nothing)
    assert v.decision == approved and v.change == "approval"
    v = publish_verdict(hand_judgement(rejected, {}), nothing)  # size_greedy's plan was not measured here
    assert v.outcome == "rejected" and v.decision == rejected and v.fallback is None and v.change is None


def _pinned_inventory(pin: bool) -> Inventory:
    tables = [Table(name=f"t{i}", num_embeddings=1000, embedding_dim=16, pooling_factor=1.0) for i in range(4)]
    if pin:
        tables[0] = tables[0].model_copy(update={"constraints": TableConstraints(sharding_types=("data_parallel",))})
    return Inventory(name="inv", tables=tuple(tables))


def test_a_current_plan_that_breaks_a_new_constraint_never_stays_and_the_reason_names_it() -> None:
    """The team pinned t0 to data_parallel: the gate found the new plan equivalent, yet the current plan goes."""
    from dreamshard.gate import incumbent_for
    from dreamshard.sharders import get_sharder

    topo = Topology(num_devices=2, memory_per_device_gb=1.0)
    old = get_sharder("size_greedy").shard(_pinned_inventory(False), topo)
    new_version = _pinned_inventory(True)
    inc = incumbent_for("inv", old.plan_id, old, None, new_version, topo)
    assert not inc.serves and "table 't0' breaks its constraint sharding_types ['data_parallel']" in inc.cannot_serve
    d = _inconclusive().revised(outcome="equivalent", reason="equivalent", finding="equivalent: as fast")
    v = publish_verdict(hand_judgement(d, {"size_greedy": [10.0, 10.0, 10.0]}), inc)
    assert v.change == "replaces" and v.decision.approved
    assert "sharding_types ['data_parallel']" in v.decision.reason and "it becomes current" in v.decision.reason


def test_the_current_plan_extended_stands_in_for_it() -> None:
    """Nothing can stay as it is, but the current plan extended to the version was measured: it stays in the current
    plan's place (moving none of the job's tables), whatever the baselines measure; only an approval replaces it."""
    ext = make_plan(overall=10.2).model_copy(update={"sharder": EXTENDED})
    inc = Incumbent(inventory_name="inv", plan_id="p-old", cannot_serve="another table schema", contender=ext)
    rejected = evaluate_gate(make_plan(overall=12.0), {"size_greedy": 10.0}, 0.0)
    for baseline in ([10.0, 10.3, 9.9], [8.0, 8.1, 8.0]):  # as fast as it, or clearly faster
        v = publish_verdict(hand_judgement(rejected, {"size_greedy": baseline, EXTENDED: [10.2, 10.1, 10.2]}), inc)
        assert v.outcome == "fallback" and v.change == "fallback" and v.fallback is not None
        assert v.fallback.sharder == EXTENDED
        assert "the current plan extended to this version becomes current instead" in v.decision.reason
    undecided = publish_verdict(
        hand_judgement(_inconclusive(), {"size_greedy": [9.0, 11.0, 10.0], EXTENDED: [12.0] * 3}), inc
    )
    assert undecided.outcome == "fallback"  # not approved: the extension stays, as a serving current plan would
    approved = evaluate_gate(make_plan(overall=8.0), {"size_greedy": 10.0, EXTENDED: 10.2}, 0.0)
    assert publish_verdict(hand_judgement(approved, {EXTENDED: [10.2] * 3}), inc).change == "approval"
