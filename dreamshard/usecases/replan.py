"""The fast path of the production loop: a new inventory version planned with the current production model (search
+ verification on the backend), gated against the baselines measured interleaved, and published, with no
profiling and no training (docs/architecture.md, "The production loop").

Retraining is the exception: when the new version lies outside the model's training ranges (or the model learned
on other hardware), nothing is published and the result says a retrain is due, and why; the flows turn that into
the `dreamshard.retrain.due` event the retrain deployment listens for.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Literal

from pydantic import Field

from dreamshard.config.settings import model_dir
from dreamshard.documents import load_inventory, save_inventory
from dreamshard.errors import ConfigError, StoreError
from dreamshard.learning.model_store import has_model
from dreamshard.pipeline.workspace import MODEL_DIR
from dreamshard.placement.diff import PlanDiff, plan_diff
from dreamshard.store import PlanRecord, PublishedRef, get_current_inventory, list_plans, push_inventory
from dreamshard.store.base import PlanStore
from dreamshard.usecases import plan as plan_uc
from dreamshard.usecases import publish as publish_uc
from dreamshard.usecases.base import Request, Result
from dreamshard.usecases.stored import current_or_none, open_plan_store
from dreamshard.values import Inventory, Plan, Verification

#: `fallback`: the plan was rejected and the current plan cannot serve the version (a table added, removed or
#: reshaped): the best baseline the gate measured with it became current instead (`fallback_ref`).
Outcome = Literal["published", "not-published", "fallback", "retrain-due", "current", "already-decided"]


class ReplanRequest(Request):
    inventory: Path | None = None  # a file; None: the store's current version of `inventory_name`
    inventory_name: str | None = None
    store: str | None = None  # None: publish.store_uri
    endpoint_url: str | None = None
    model: Path | None = None  # the production model (default: the workspace's, else settings.model_dir's lookup)
    workspace: Path | None = None  # a pipeline workspace: its trained model is the production model
    work_dir: Path | None = None  # where the plan file is written (default: a temporary directory)
    seed: int = 0
    force: bool = False  # re-plan a version the gate already decided on (or whose current plan is a fallback)


class ReplanResult(Result):
    outcome: Outcome
    reason: str
    inventory_name: str
    fingerprint: str
    plan: Plan | None = None
    ref: PublishedRef | None = None
    fallback_ref: PublishedRef | None = None  # outcome `fallback`: the baseline plan that became current
    retrain_reasons: list[str] = Field(default_factory=list)  # why a retrain is due (empty: it is not)
    previous_plan_id: str | None = None
    # what the plan step measured (`--verify`: candidates, their rounds, the kept one); the gate stores the plan
    # without it (a plan file's verification is never trusted), so the use case reports it here
    verification: Verification | None = None
    # `published`: the new plan against the plan that was current, the tables it moves (what the training job
    # reshards); None when nothing was current before, or the new plan did not become current
    diff: PlanDiff | None = None


def _inventory(request: ReplanRequest, store: PlanStore) -> Inventory:
    if request.inventory is not None:
        inv = load_inventory(request.inventory)
        if request.inventory_name and request.inventory_name != inv.name:
            raise ConfigError(f"--inventory-name '{request.inventory_name}' is not the file's inventory '{inv.name}'")
        return inv
    if not request.inventory_name:
        raise ConfigError("replan needs an inventory: -i FILE, or --inventory-name NAME of one pushed to the store")
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


def decided(store: PlanStore, name: str, fingerprint: str) -> PlanRecord | None:
    """The last plan the gate decided on for this inventory version (approved or not), if any."""
    records = [r for r in list_plans(store, name, fingerprint) if not r.problem]
    return records[-1] if records else None


def run(request: ReplanRequest) -> ReplanResult:
    s = request.settings
    store = open_plan_store(s, request.store, request.endpoint_url, existing=False)
    inv = _inventory(request, store)
    ref = push_inventory(store, inv, store_uri=request.store or s.publish.store_uri)  # the version a plan is for
    base = {"inventory_name": inv.name, "fingerprint": inv.fingerprint()}
    current = current_or_none(store, inv.name)  # None: this replan makes the first
    previous = current.plan_id if current is not None else None
    if current is not None and current.inventory_fingerprint == ref.fingerprint and not request.force:
        return ReplanResult(
            outcome="current",
            previous_plan_id=previous,
            plan=current,
            **base,
            reason=f"plan {current.plan_id} is already current for version {ref.fingerprint[:12]}",
        )
    last = decided(store, inv.name, ref.fingerprint) if not request.force else None
    if last is not None:
        return ReplanResult(
            outcome="already-decided",
            previous_plan_id=previous,
            **base,
            reason=f"version {ref.fingerprint[:12]} was decided: plan {last.plan_id} {last.status} "
            f"({last.reason}); --force re-plans it",
        )
    with tempfile.TemporaryDirectory(prefix="dreamshard-replan-") as tmp:
        work = request.work_dir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        inv_file, plan_file = work / "inventory.yaml", work / "plan.json"
        save_inventory(inv, inv_file)
        fast = s.model_copy(update={"plan": s.plan.model_copy(update={"refine_seconds": s.plan.replan_refine_seconds})})
        planned = plan_uc.run(
            plan_uc.PlanRequest(
                settings=fast,
                inventory=inv_file,
                out=plan_file,
                sharder=plan_uc.SEARCHING_SHARDER,
                model=model_dir(production_model(request.model, request.workspace)),
                seed=request.seed,
                incumbent=current,
            )
        )
        plan = planned.plan
        if plan.out_of_range:
            return ReplanResult(
                outcome="retrain-due",
                plan=plan,
                previous_plan_id=previous,
                verification=plan.verification,
                retrain_reasons=list(plan.out_of_range),
                warnings=planned.warnings,
                **base,
                reason=f"version {ref.fingerprint[:12]} is outside the production model's training "
                f"ranges ({'; '.join(plan.out_of_range)}): retrain before publishing",
            )
        published = publish_uc.run(
            publish_uc.PublishRequest(
                settings=s,
                plan=plan_file,
                measure=True,
                inventory=inv_file,  # baselines: publish.baselines
                store=request.store,
                endpoint_url=request.endpoint_url,
            )
        )
    decision = published.decision
    fallback = published.fallback_ref
    outcome: Outcome = (
        "published"
        if published.ref.is_current
        else "fallback"
        if fallback is not None and fallback.is_current
        else "not-published"
    )
    diff = plan_diff(current, published.plan, inv) if current is not None and outcome == "published" else None
    return ReplanResult(
        outcome=outcome,
        plan=published.plan,
        ref=published.ref,
        fallback_ref=fallback,
        previous_plan_id=previous,
        warnings=planned.warnings,
        reason=decision.reason,
        verification=plan.verification,
        diff=diff,
        **base,
    )
