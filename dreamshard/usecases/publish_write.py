"""The publish use case's writes, in one order (docs/architecture/gate.md, "One publish path"): the only module that
moves a store's `current` pointer (through dreamshard.store's publish, rollback) or keeps a change pending for a
reviewer (hold). Every door reaches it through dreamshard.usecases.publish.

Order: a fallback (or its pending change) before the judged plan's decision, so a run that stops between the two is
gated again rather than left with a rejection and nothing current; the pointer moves only if it still names the
plan the change was decided against (a concurrent publish in between refuses it, in one line); a pending change is
cleared only after its answer is recorded.
"""

from __future__ import annotations

from dreamshard.errors import StoreError
from dreamshard.store import clear_pending, get_pointer, hold, pending_record, publish, reject, rollback
from dreamshard.store.base import PlanStore
from dreamshard.store.plans import Guard
from dreamshard.usecases.publication import Publication, Status
from dreamshard.usecases.publish_decide import Decided, Recorded
from dreamshard.usecases.publish_explain import explain_moves
from dreamshard.values import GateDecision, Plan
from dreamshard.values.records import CurrentPointer, PublishedRef
from dreamshard.values.review import Change, PendingChange, Review, ReviewQuestion


def guard(inventory: str, expected: str | None) -> Guard:
    """The check inside the pointer's compare-and-swap: it still names `expected` (None: nothing is current)."""

    def check(old: CurrentPointer | None) -> None:
        now = old.plan_id if old is not None else None
        if now != expected:
            was = expected or "no plan"
            raise StoreError(
                f"the current plan of '{inventory}' changed from {was} to {now or 'no plan'} while this change was "
                f"decided: nothing was made current; publish again to decide against what is current now"
            )

    return check


def _reviewed(decision: GateDecision, review: Review | None) -> GateDecision:
    """`decision` with the reviewer's yes in its reason (unchanged without one)."""
    return decision.revised(reason=f"{decision.reason}; {review.said()}") if review is not None else decision


def _declined(decision: GateDecision, review: Review) -> GateDecision:
    return decision.overruled(f"{review.said()} ({decision.reason})")


def write(decided: Decided, review: Review | None, reviewer: str) -> Publication:
    """Store what `decided` decided, as the reviewer answered (`review`; None: nobody answered, or none was asked)."""
    store, v, plan = decided.store, decided.verdict, decided.plan
    state, asked = decided.state, decided.question is not None
    keep = guard(plan.inventory_name, state.plan_id)
    fallback, fb_decision = v.fallback, v.fallback_decision
    fb_ref: PublishedRef | None = None
    pending: PublishedRef | None = None
    if v.change is None:
        status: Status = "kept"
        ref = reject(store, plan, v.decision)
    elif asked and review is None:
        status = "pending"
        waiting = _pending(decided.question, v.change, state.plan_id)
        if fallback is not None and fb_decision is not None:
            pending = hold(store, fallback, fb_decision, waiting)
            ref = reject(store, plan, v.decision)
        else:
            pending = ref = hold(store, plan, v.decision, waiting)
    elif review is not None and not review.approve:
        status = "declined"
        if fallback is not None and fb_decision is not None:
            fb_ref = reject(store, fallback, _declined(fb_decision, review), review)
            ref = reject(store, plan, v.decision)
        else:
            ref = reject(store, plan, _declined(v.decision, review), review)
    elif fallback is not None and fb_decision is not None:
        status = "fallback"
        fb_ref = publish(store, fallback, _reviewed(fb_decision, review), review, keep)
        ref = reject(store, plan, v.decision)
    else:
        status = "published"
        ref = publish(store, plan, _reviewed(v.decision, review), review, keep)
    diff, why = explain_moves(state.plan, plan, decided.judgement, decided.incumbent, _horizon(decided))
    now = fb_ref.plan_id if status == "fallback" and fb_ref else plan.plan_id if status == "published" else None
    return Publication(
        inventory_name=plan.inventory_name,
        status=status,
        reason=_reason(status, ref, fb_ref, pending, reviewer),
        plan_id=plan.plan_id,
        decision=_recorded(ref, v.decision, review),
        outcome=v.outcome,
        change=v.change,
        ref=ref,
        fallback_ref=fb_ref if fb_ref is not None else (pending if fallback is not None else None),
        fallback_decision=fb_decision,
        pending_ref=pending,
        review=review,
        asked=asked,
        reviewer=reviewer if asked else "",
        previous_plan_id=state.plan_id,
        current_plan_id=now or state.plan_id,
        diff=diff,
        moves_why=why,
        plan=plan,
        comparison=decided.judgement.comparison,
        inventory=decided.judgement.inventory,
    )


def _horizon(decided: Decided) -> int:
    return decided.settings.publish.move_horizon_steps


def _pending(question: ReviewQuestion | None, change: Change, against: str | None) -> PendingChange:
    headline = question.headline if question is not None else change
    return PendingChange(change=change, against_plan_id=against, headline=headline)


def _recorded(ref: PublishedRef, decision: GateDecision, review: Review | None) -> GateDecision:
    """The judged plan's decision as stored (a reviewer's no turns an approval into a rejection)."""
    if ref.status == "rejected" and decision.approved and review is not None:
        return _declined(decision, review)
    if ref.status == "approved":
        return _reviewed(decision, review)
    return decision


def _reason(
    status: Status, ref: PublishedRef, fb: PublishedRef | None, pending: PublishedRef | None, reviewer: str
) -> str:
    if status == "pending" and pending is not None:
        return (
            f"waiting for a reviewer (publish.require_human; {reviewer} answered): plan {pending.plan_id} is kept "
            f"pending, nothing current changed; approve it with `dreamshard plans approve {pending.plan_id}`"
        )
    if status == "fallback" and fb is not None:
        return fb.reason
    return ref.reason


def recorded_publication(found: Recorded) -> Publication:
    """The decision (or pending change) the store already held for a plan: nothing measured or written."""
    ref = found.ref
    pending = ref.status == "pending"
    status: Status = "already-pending" if pending else "already-decided"
    reason = (
        f"plan {ref.plan_id} is waiting for a reviewer already: `dreamshard plans approve {ref.plan_id}`"
        if pending
        else f"already decided: {found.decision.outcome} {ref.plan_id} for this inventory version "
        f"({found.decision.reason})"
    )
    return Publication(
        inventory_name=ref.inventory,
        status=status,
        reason=reason,
        plan_id=ref.plan_id,
        decision=found.decision,
        ref=ref,
        pending_ref=ref if pending else None,
        current_plan_id=ref.plan_id if ref.is_current else None,
        plan=found.plan,
    )


def write_rollback(
    store: PlanStore,
    inventory: str,
    target: tuple[Plan, GateDecision],
    state: tuple[str | None, str | None],
    answer: tuple[ReviewQuestion | None, Review | None, str],
) -> Publication:
    """Make `target` (an approved plan and its decision) current again, as the reviewer answered: `state` is (the
    current plan id, the `--to` asked: None walks the history back); `answer` is (the question, its answer, who
    could answer)."""
    plan, decision = target
    current, to = state
    question, review, reviewer = answer
    base = Publication(
        inventory_name=inventory,
        status="declined",
        reason="",
        plan_id=plan.plan_id,
        change="rollback",
        review=review,
        asked=question is not None,
        reviewer=reviewer if question is not None else "",
        previous_plan_id=current,
        current_plan_id=current,
    )
    if question is not None and review is None:
        ref = hold(store, plan, decision, _pending(question, "rollback", current))
        reason = (
            f"waiting for a reviewer (publish.require_human; {reviewer} answered): the rollback to {plan.plan_id} is "
            f"kept pending, nothing current changed; approve it with `dreamshard plans approve {plan.plan_id}`"
        )
        return base.model_copy(update={"status": "pending", "reason": reason, "pending_ref": ref})
    if review is not None and not review.approve:
        return base.model_copy(
            update={"reason": f"rollback to {plan.plan_id} {review.said()}: {current} stays current"}
        )
    pointer = rollback(store, inventory, to, guard(inventory, current), review)
    said = f"; {review.said()}" if review is not None else ""
    reason = f"rolled back: {pointer.plan_id} is current again for '{inventory}' (was {current}){said}"
    return base.model_copy(update={"status": "rolled-back", "reason": reason, "current_plan_id": pointer.plan_id})


def write_answer(store: PlanStore, plan_id: str, inventory: str | None, review: Review) -> Publication:
    """A reviewer's answer to the change kept pending for `plan_id`: recorded (the pointer moved only if it still
    names the plan the change was decided against), then the pending change cleared."""
    found = pending_record(store, plan_id, inventory)
    if found is None:
        raise StoreError(
            f"no change is waiting for a reviewer for plan '{plan_id}' in {store.location}; see `dreamshard plans "
            f"list` (status pending)"
        )
    pk, record, plan = found
    waiting = record.pending
    assert waiting is not None  # pending_record refuses a pending plan without its change
    pointer = get_pointer(store, pk.inventory)
    now = pointer.plan_id if pointer is not None else None
    if review.approve and now != waiting.against_plan_id:
        raise StoreError(
            f"plan {plan_id} was decided against the current plan {waiting.against_plan_id or '(none)'}, and "
            f"{now or 'no plan'} is current now: decline it (`dreamshard plans decline {plan_id}`) and publish "
            f"again to decide against what is current"
        )
    base = Publication(
        inventory_name=pk.inventory,
        status="declined",
        reason="",
        plan_id=plan_id,
        decision=record.gate,
        change=waiting.change,
        review=review,
        asked=True,
        reviewer=review.via,
        previous_plan_id=now,
        current_plan_id=now,
        plan=plan,
    )
    if not review.approve:
        if waiting.change != "rollback":
            reject(store, plan, _declined(record.gate, review), review)
        clear_pending(store, pk)
        reason = f"{waiting.change} of plan {plan_id} {review.said()}: {now or 'no plan'} stays current"
        return base.model_copy(update={"reason": reason})
    if waiting.change == "rollback":
        rollback(store, pk.inventory, plan_id, guard(pk.inventory, now), review)
        status: Status = "rolled-back"
    else:
        publish(store, plan, _reviewed(record.gate, review), review, guard(pk.inventory, now))
        status = "fallback" if record.gate.outcome == "fallback" else "published"
    clear_pending(store, pk)
    reason = f"plan {plan_id} is current for '{pk.inventory}' ({waiting.change}, {review.said()})"
    return base.model_copy(update={"status": status, "reason": reason, "current_plan_id": plan_id})
