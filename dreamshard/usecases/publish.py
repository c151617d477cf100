"""One publish path (docs/architecture/gate.md, "One publish path"): whatever makes a plan current goes through here.

    plans publish, replan, the pipeline's publish step, the replan flow  ->  publish(PublishRequest, reviewer)
    plans rollback                                                      ->  rollback(RollbackRequest, reviewer)
    plans approve / plans decline                                       ->  answer(AnswerRequest)

`publish` reads the store's current plan once, trusts the plan once and decides once (`publish_decide`: the gate,
then the policy, constraints first, every contender charged its moves), asks the reviewer when the team's policy
wants one (publish.require_human: the Prefect UI, the terminal, or nobody, and then the change waits, pending), and
writes in one order (`publish_write`). Each returns a `Publication`. A `steps` runner (the pipeline's) runs the
decision and the write as its own steps; the use case decides the same either way.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import ParamSpec, Protocol, TypeVar

from dreamshard.documents import read_structured_digest
from dreamshard.errors import StoreError
from dreamshard.evaluation import Comparison
from dreamshard.evaluation.compare import comparison_from
from dreamshard.store import get_pointer, show
from dreamshard.store.base import PlanStore
from dreamshard.store.objects import find_plan, read_record
from dreamshard.usecases.publication import Publication
from dreamshard.usecases.publish_decide import Decided, Recorded, decide, require_human
from dreamshard.usecases.publish_request import AnswerRequest, PublishRequest, RollbackRequest
from dreamshard.usecases.publish_write import recorded_publication, write, write_answer, write_rollback
from dreamshard.usecases.review import Reviewer
from dreamshard.usecases.runner import Step
from dreamshard.usecases.stored import open_plan_store
from dreamshard.values import GateDecision, Plan
from dreamshard.values.records import CurrentPointer
from dreamshard.values.review import Review, ReviewQuestion

P = ParamSpec("P")
T = TypeVar("T")

#: The decision and the write as a runner shows them (the pipeline's publish subflow: two task runs).
GATE = Step(name="gate")
STORE = Step(name="store-decision", retries=2, retry_delay_s=2)


class Steps(Protocol):
    """What runs the use case's two steps (a `Runner`'s `step`); without one, they run here in order."""

    def step(self, step: Step, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T: ...


class _Here:
    def step(self, step: Step, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        return fn(*args, **kwargs)


def read_comparison(path: str | Path) -> tuple[Comparison, str]:
    """A comparison file (`compare --out`, the evaluate stage's data/comparison.json) and the evidence line that
    names it: its path and sha256, which go into the gate's decision."""
    p = Path(path)
    data, digest = read_structured_digest(p)  # read once: the digest is of the bytes the comparison was parsed from
    return comparison_from(data, p), f"comparison {p} (sha256 {digest[:16]})"


def _store(request: PublishRequest | RollbackRequest | AnswerRequest, existing: bool) -> PlanStore:
    return open_plan_store(request.settings, request.store, request.endpoint_url, existing=existing)


def publish(request: PublishRequest, reviewer: Reviewer, steps: Steps | None = None) -> Publication:
    """Gate the request's plan and make current what the team's policy, constraints, job and reviewer allow (module
    docstring). A plan id the store already decided for this inventory version (or holds pending) keeps that."""
    run = steps or _Here()
    store = _store(request, existing=False)
    decided: Decided | Recorded = run.step(GATE, decide, request, store)
    if isinstance(decided, Recorded):
        return recorded_publication(decided)
    review = reviewer.ask(decided.question) if decided.question is not None else None
    return run.step(STORE, write, decided, review, reviewer.where)


def _target(store: PlanStore, request: RollbackRequest) -> tuple[str | None, Plan, GateDecision]:
    """The current plan id and the rollback's target (`to`, else the version before the current one) with its
    recorded decision; StoreError naming the fix when there is none."""
    inventory = request.inventory
    pointer = get_pointer(store, inventory) if request.to is None else _readable_pointer(store, inventory)
    current = pointer.plan_id if pointer is not None else None
    to = request.to
    if to is None:
        if pointer is None:
            raise StoreError(f"no current plan for inventory '{inventory}' in {store.location}; nothing to roll back")
        if not pointer.history:
            raise StoreError(
                f"current plan '{pointer.plan_id}' of inventory '{inventory}' has no previous version to roll back to"
            )
        to = pointer.history[0].plan_id
    plan = show(store, to, inventory)  # verified first: a target the store cannot read is named as such
    if to == current:
        raise StoreError(f"plan '{to}' is already current for inventory '{inventory}'")
    pk = find_plan(store, to, inventory)
    record = read_record(store, pk) if pk is not None else None
    if pk is None or pk.status != "approved" or record is None:
        raise StoreError(f"plan '{to}' was not approved by the gate and cannot become current")
    return current, plan, record.gate


def _readable_pointer(store: PlanStore, inventory: str) -> CurrentPointer | None:
    """The pointer, or None when it cannot be read (`rollback --to` is also the repair of a corrupt pointer)."""
    try:
        return get_pointer(store, inventory)
    except StoreError:
        return None


def rollback(request: RollbackRequest, reviewer: Reviewer) -> Publication:
    """Make an earlier approved plan current again, as the team's reviewer answers (publish.require_human): nothing
    is deleted; without `to` the pointer walks back through its history one version at a time."""
    store = _store(request, existing=True)
    current, plan, decision = _target(store, request)
    question = None
    if require_human(request.settings, request.require_human):
        headline = f"roll back '{request.inventory}' to plan {plan.plan_id} (now {current or 'no plan'})"
        details = (
            f"**{headline}**\n\nIts recorded decision: {decision.reason}\n\nApprove to make plan {plan.plan_id} "
            f"current again; decline to keep {current or 'what is current'}."
        )
        timeout = request.settings.publish.approval_timeout_s
        question = ReviewQuestion(
            inventory_name=request.inventory,
            plan_id=plan.plan_id,
            change="rollback",
            current_plan_id=current,
            headline=headline,
            details=details,
            timeout_s=timeout,
        )
    review = reviewer.ask(question) if question is not None else None
    return write_rollback(
        store, request.inventory, (plan, decision), (current, request.to), (question, review, reviewer.where)
    )


def answer(request: AnswerRequest, via: str = "plans approve") -> Publication:
    """A reviewer's answer to a change kept pending (`plans approve` / `plans decline`)."""
    store = _store(request, existing=True)
    review = Review(approve=request.approve, comment=request.comment, reviewer=request.reviewer, via=via)
    return write_answer(store, request.plan_id, request.inventory, review)


__all__ = [
    "GATE",
    "STORE",
    "AnswerRequest",
    "Publication",
    "PublishRequest",
    "RollbackRequest",
    "answer",
    "publish",
    "read_comparison",
    "rollback",
]
