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

from dreamshard.config.job import JOB_KEYS
from dreamshard.config.settings import model_dir
from dreamshard.errors import ConfigError, StoreError
from dreamshard.pipeline.workspace import MODEL_DIR
from dreamshard.placement.diff import PlanDiff, plan_diff
from dreamshard.store import PlanRecord, PublishedRef, get_current_inventory, list_plans, push_inventory
from dreamshard.store.base import PlanStore
from dreamshard.usecases import plan as plan_uc
from dreamshard.usecases import publish as publish_uc
from dreamshard.usecases.base import Request, Result
from dreamshard.usecases.stored import current_or_none, job_incumbent, open_plan_store
from dreamshard.values import Inventory, Plan, Topology, Verification
from dreamshard.values.model_files import has_model

#: `fallback`: the plan was rejected and the current plan cannot serve the version (a table added, removed or
#: reshaped): the best baseline the gate measured with it became current instead (`fallback_ref`).
Outcome = Literal["published", "not-published", "fallback", "retrain-due", "current", "already-decided"]


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


class ReplanResult(Result):
    outcome: Outcome
    reason: str
    inventory_name: str
    fingerprint: str
    topology: Topology | None = None  # what the version was planned for (the job's, unless told otherwise)
    plan: Plan | None = None
    ref: PublishedRef | None = None
    fallback_ref: PublishedRef | None = None  # outcome `fallback`: the baseline plan that became current
    retrain_reasons: list[str] = Field(default_factory=list)  # why a retrain is due (empty: it is not)
    previous_plan_id: str | None = None
    # what the plan step measured (`--verify`: candidates, their rounds, the kept one); the gate stores the plan
    # without it (a plan file's verification is never trusted), so the use case reports it here
    verification: Verification | None = None
    # `published`: the new plan against the plan the job of this topology ran (the latest approved plan of the
    # inventory for its world size: what the search started from), the tables it moves (what the training job
    # reshards); None when there was none, or the new plan did not become current
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
        )
    )


def _published(
    inv: Inventory,
    current: Plan | None,
    incumbent: Plan | None,
    planned: plan_uc.PlanResult,
    published: publish_uc.PublishResult,
) -> ReplanResult:
    """What the gate made of the new plan: published, the fallback made current, or not published."""
    fallback = published.fallback_ref
    outcome: Outcome = "not-published"
    if published.ref.is_current:
        outcome = "published"
    elif fallback is not None and fallback.is_current:
        outcome = "fallback"
    diff = plan_diff(incumbent, published.plan, inv) if incumbent is not None and outcome == "published" else None
    return _result(
        inv,
        current,
        outcome=outcome,
        plan=published.plan,
        topology=published.plan.topology,
        ref=published.ref,
        fallback_ref=fallback,
        warnings=planned.warnings,
        reason=published.decision.reason,
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
    """The version becomes the store's current one: only once a decision about it is recorded (a version that
    fails to plan leaves the store as it was)."""
    push_inventory(store, inv, store_uri=request.store or request.settings.publish.store_uri)


def _told(request: ReplanRequest, topology: Topology) -> Topology | None:
    """The topology the gate checks the plan against: the one planned for when the caller said otherwise than the
    job the inventory records (None: the gate checks against the job, `gate.trust.check_topology`)."""
    return topology if any(k in JOB_KEYS for k in request.settings.told) else None


def _decide(
    request: ReplanRequest, store: PlanStore, inv: Inventory, plan: Plan, topology: Topology
) -> publish_uc.PublishResult:
    """The gate's decision on the planned `plan`, stored; the version becomes the store's current one just before it
    (`_push`). A plan id the store already decided for this version keeps its recorded decision (one decision per
    plan id per inventory version), without measuring again. The gate takes the plan as it takes a file's: through
    `gate.trusted_plan`, its costs and verification recomputed or measured, never carried over."""
    done = publish_uc.recorded(store, plan)
    if done is not None:
        _push(request, store, inv)
        return done
    gate_request = publish_uc.PublishRequest(
        settings=request.settings,
        plan=plan,
        measure=True,
        inventory=inv,  # baselines: publish.baselines
        store=request.store,
        endpoint_url=request.endpoint_url,
        topology=_told(request, topology),
    )
    gated = publish_uc.gate(gate_request, store)
    _push(request, store, inv)  # the version a decision is recorded for
    return publish_uc.store_gated(store, gated)


def run(request: ReplanRequest) -> ReplanResult:
    s = request.settings
    store = open_plan_store(s, request.store, request.endpoint_url, existing=False)
    inv = _inventory(request, store)
    topology = s.topology_for_job(inv.job)  # the job's, unless told otherwise
    current = current_or_none(store, inv.name)  # None: this replan makes the first
    settled = _settled(store, inv, current, topology, request.force)
    if settled is not None:
        return settled
    start = job_incumbent(store, inv.name, topology, current)  # what the job of this topology runs now
    planned = _planned(request, inv, start)
    if planned.plan.out_of_range:
        _push(request, store, inv)  # the retrain that is due plans the store's current version
        return _retrain_due(inv, current, planned)
    published = _decide(request, store, inv, planned.plan, topology)
    return _published(inv, current, start, planned, published)
