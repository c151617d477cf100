"""The fast path of the production loop: a new inventory version planned with the current production model (search
+ verification on the backend), gated against the baselines measured interleaved, and published, with no
profiling and no training (docs/architecture/pipeline.md, "The production loop").

Retraining is the exception: when the new version lies outside the model's training ranges (or the model learned
on other hardware), nothing is published and the result says a retrain is due, and why; the flows turn that into
the `dreamshard.retrain.due` event the retrain deployment listens for.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from dreamshard.config.job import told_topology
from dreamshard.config.settings import model_dir
from dreamshard.errors import ConfigError, StoreError
from dreamshard.pipeline.workspace import MODEL_DIR
from dreamshard.placement.diff import PlanDiff, plan_diff
from dreamshard.store import PlanRecord, get_current_inventory, list_plans, push_inventory
from dreamshard.store.base import PlanStore
from dreamshard.usecases import plan as plan_uc
from dreamshard.usecases import publish as publish_uc
from dreamshard.usecases.base import Request, Result
from dreamshard.usecases.publication import Publication
from dreamshard.usecases.review import NoReviewer, Reviewer
from dreamshard.usecases.stored import current_or_none, job_incumbent, open_plan_store
from dreamshard.values import Inventory, Plan, Topology, Verification
from dreamshard.values.model_files import has_model
from dreamshard.values.progress import Progress, prefixed

#: `fallback`: the plan did not become current and the current plan cannot serve the version (a table added, removed
#: or reshaped, a constraint it breaks): the incumbent extended, or the best baseline the gate measured with it,
#: became current instead; `pending`: the change waits for a reviewer (publish.require_human, `plans approve`);
#: `declined`: a reviewer said no.
Outcome = Literal[
    "published", "not-published", "fallback", "pending", "declined", "retrain-due", "current", "already-decided"
]
#: The outcome of each status of the publish use case.
OUTCOME_OF: dict[str, Outcome] = {
    "published": "published",
    "fallback": "fallback",
    "kept": "not-published",
    "pending": "pending",
    "already-pending": "pending",
    "declined": "declined",
    "already-decided": "already-decided",
    "rolled-back": "published",
}


class ReplanRequest(Request):
    """A new version to plan; the topology is the job's the inventory records, unless the settings were told
    otherwise (`--devices/--hosts/--devices-per-host/--memory-gb`: dreamshard.config.job)."""

    inventory: Inventory | None = None  # None: the store's current version of `inventory_name`
    inventory_name: str | None = None
    store: str | None = None  # None: publish.store_uri
    endpoint_url: str | None = None
    model: Path | None = None  # the production model (default: the workspace's, else settings.model_dir's lookup)
    workspace: Path | None = None  # a pipeline workspace: its trained model is the production model
    seed: int = 0
    force: bool = False  # re-plan a version the gate already decided on (or whose current plan is a fallback)
    require_human: bool | None = None  # True asks a reviewer on top of publish.require_human (never removes one)
    # what planning and the gate are measuring, a line at a time (dreamshard.values.progress)
    progress: Progress | None = Field(default=None, exclude=True)


class ReplanResult(Result):
    outcome: Outcome
    reason: str
    inventory_name: str
    fingerprint: str
    topology: Topology | None = None  # what the version was planned for (the job's, unless told otherwise)
    plan: Plan | None = None
    publication: Publication | None = None  # what the publish use case did with the plan (None: it was not gated)
    retrain_reasons: list[str] = Field(default_factory=list)  # why a retrain is due (empty: it is not)
    previous_plan_id: str | None = None
    # what the plan step measured (`--verify`: candidates, their rounds, the kept one); the gate stores the plan
    # without it (a plan file's verification is never trusted), so the use case reports it here
    verification: Verification | None = None
    # the new plan against the plan that was current (else the plan the job of this topology ran, what the search
    # started from): each table it moves, from -> to; whether or not it became current; None when there was none
    diff: PlanDiff | None = None


def _inventory(request: ReplanRequest, store: PlanStore) -> Inventory:
    if request.inventory is not None:
        inv = request.inventory
        if request.inventory_name and request.inventory_name != inv.name:
            raise ConfigError(f"the inventory name '{request.inventory_name}' is not the file's inventory '{inv.name}'")
        return inv
    if not request.inventory_name:
        raise ConfigError("replan needs an inventory: an inventory file, or the inventory name of one in the store")
    found = get_current_inventory(store, request.inventory_name)
    if found is None:
        raise StoreError(
            f"no inventory '{request.inventory_name}' in {store.location}: push one with "
            f"`dreamshard inventory push INV --store URI`"
        )
    return found[0]


def production_model(model: Path | None, workspace: Path | None) -> Path | None:
    """The model the fast path plans with: `model`, else the pipeline workspace's trained model, else None (the
    packaged one)."""
    if model is not None:
        return model
    candidate = workspace / MODEL_DIR if workspace is not None else None
    return candidate if candidate is not None and has_model(candidate) else None


def decided(store: PlanStore, name: str, fingerprint: str, topology: Topology | None = None) -> PlanRecord | None:
    """The last plan the gate decided on for this inventory version (approved or not), if any; given `topology`,
    only a plan for it counts (a decision for 4 ranks decides nothing for 2)."""
    records = [r for r in list_plans(store, name, fingerprint) if not r.problem]
    if topology is not None:
        records = [r for r in records if r.topology == topology]
    return records[-1] if records else None


def _result(inv: Inventory, current: Plan | None, **fields: Any) -> ReplanResult:
    """A result about version `inv`, with the plan that was current before it (`current`)."""
    previous = current.plan_id if current is not None else None
    return ReplanResult(inventory_name=inv.name, fingerprint=inv.fingerprint(), previous_plan_id=previous, **fields)


def _settled(
    store: PlanStore, inv: Inventory, current: Plan | None, topology: Topology, force: bool
) -> ReplanResult | None:
    """The version needs no new plan for `topology` (None: it does): its plan for it is current already, or the
    gate decided on one for it."""
    fingerprint = inv.fingerprint()
    if force:
        return None
    if current is not None and current.inventory_fingerprint == fingerprint and current.topology == topology:
        reason = f"plan {current.plan_id} is already current for version {fingerprint[:12]}"
        return _result(inv, current, outcome="current", plan=current, reason=reason, topology=topology)
    last = decided(store, inv.name, fingerprint, topology)
    if last is None:
        return None
    reason = (
        f"version {fingerprint[:12]} was decided for this topology: plan {last.plan_id} {last.status} "
        f"({last.reason}); a forced re-plan plans it again"
    )
    return _result(inv, current, outcome="already-decided", reason=reason, topology=topology)


def _planned(request: ReplanRequest, inv: Inventory, current: Plan | None) -> plan_uc.PlanResult:
    """The version planned with the production model from the current plan (refined for replan_refine_seconds)."""
    s = request.settings
    fast = s.model_copy(update={"plan": s.plan.model_copy(update={"refine_seconds": s.plan.replan_refine_seconds})})
    return plan_uc.run(
        plan_uc.PlanRequest(
            settings=fast,
            inventory=inv,
            sharder=plan_uc.SEARCHING_SHARDER,
            model=model_dir(production_model(request.model, request.workspace)),
            seed=request.seed,
            incumbent=current,
            progress=prefixed(request.progress, "plan: "),
        )
    )


def _published(
    inv: Inventory, current: Plan | None, incumbent: Plan | None, planned: plan_uc.PlanResult, done: Publication
) -> ReplanResult:
    """What the publish use case made of the new plan: published, the fallback made current, pending a reviewer,
    declined, or not published."""
    plan = done.plan or planned.plan
    diff = done.diff or (plan_diff(incumbent, plan, inv) if incumbent is not None else None)
    return _result(
        inv,
        current,
        outcome=OUTCOME_OF[done.status],
        plan=plan,
        topology=plan.topology,
        publication=done,
        warnings=planned.warnings,
        reason=done.reason,
        verification=planned.plan.verification,
        diff=diff,
    )


def _retrain_due(inv: Inventory, current: Plan | None, planned: plan_uc.PlanResult) -> ReplanResult:
    plan = planned.plan
    reason = (
        f"version {inv.fingerprint()[:12]} is outside the production model's training ranges "
        f"({'; '.join(plan.out_of_range)}): retrain before publishing"
    )
    return _result(
        inv,
        current,
        outcome="retrain-due",
        plan=plan,
        topology=plan.topology,
        verification=plan.verification,
        retrain_reasons=list(plan.out_of_range),
        warnings=planned.warnings,
        reason=reason,
    )


def _push(request: ReplanRequest, store: PlanStore, inv: Inventory) -> None:
    """The version becomes the store's current one once a decision about it is recorded (or it is found decided
    already, or due a retrain): a version that fails to plan or to gate leaves the store as it was."""
    push_inventory(store, inv, store_uri=request.store or request.settings.publish.store_uri)


def _told(request: ReplanRequest, topology: Topology) -> Topology | None:
    """The topology the gate checks the plan against: the one planned for when the caller said otherwise than the
    job the inventory records (None: the gate checks against the job, `gate.trust.check_topology`)."""
    return topology if told_topology(request.settings.told) else None


def _decide(request: ReplanRequest, inv: Inventory, plan: Plan, topology: Topology, reviewer: Reviewer) -> Publication:
    """The one publish use case on the planned `plan`, the gate measuring it and the baselines itself (its
    verification is recomputed, never carried over); a plan id the store already decided for this version keeps
    its decision."""
    gate_request = publish_uc.PublishRequest(
        settings=request.settings,
        plan=plan,
        measure=True,
        inventory=inv,  # baselines: publish.baselines
        store=request.store,
        endpoint_url=request.endpoint_url,
        topology=_told(request, topology),
        require_human=request.require_human,
        progress=prefixed(request.progress, "gate: "),
    )
    return publish_uc.publish(gate_request, reviewer)


def run(request: ReplanRequest, reviewer: Reviewer | None = None) -> ReplanResult:
    """Plan the version with the production model from what the job runs, then the one publish use case (its
    reviewer `reviewer`; None: nobody can answer, a change that needs one waits, pending)."""
    s = request.settings
    store = open_plan_store(s, request.store, request.endpoint_url, existing=False)
    inv = _inventory(request, store)
    topology = s.topology_for_job(inv.job)  # the job's, unless told otherwise
    current = current_or_none(store, inv.name)  # None: this replan makes the first
    settled = _settled(store, inv, current, topology, request.force)
    if settled is not None:
        if settled.outcome == "already-decided":
            _push(request, store, inv)  # idempotent: a run stopped between the decision and the push
        return settled
    start = job_incumbent(store, inv.name, topology, current)  # what the job of this topology runs now
    planned = _planned(request, inv, start)
    if planned.plan.out_of_range:
        _push(request, store, inv)  # the retrain that is due plans the store's current version
        return _retrain_due(inv, current, planned)
    done = _decide(request, inv, planned.plan, topology, reviewer or NoReviewer())
    _push(request, store, inv)  # the version a decision is recorded for
    return _published(inv, current, start, planned, done)
