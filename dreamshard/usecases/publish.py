"""The gate and the plan store: a plan verified against its inventory and a comparison (or measured against the
baselines by the gate itself), decided, then published (current) or kept as rejected / inconclusive
(docs/architecture.md, "The publish gate"). `plans publish` and the pipeline's publish step call this."""

from __future__ import annotations

from pathlib import Path

from dreamshard.documents import load_inventory, load_plan
from dreamshard.errors import ConfigError, StoreError
from dreamshard.evaluation import validate_sharders
from dreamshard.gate import GateDecision, fallback_plan, gate_comparison_file, measure_and_gate, trusted_plan
from dreamshard.learning.model_store import load_card
from dreamshard.store import (
    PublishedRef,
    already_decided,
    get_current,
    get_inventory_version,
    get_pointer,
    publish_or_reject,
)
from dreamshard.store.base import PlanStore
from dreamshard.store.inventories import schema_of
from dreamshard.usecases.base import Request, Result
from dreamshard.usecases.stored import open_plan_store
from dreamshard.values import Inventory, Plan


class PublishRequest(Request):
    plan: Path
    comparison: Path | None = None  # a comparison holding this plan and the baselines
    measure: bool = False  # the gate measures the plan and the baselines itself
    baselines: tuple[str, ...] = ()  # baselines added to publish.baselines (--sharders); never fewer
    inventory: Path | None = None  # None: the version pushed to the store with the plan's fingerprint
    model: Path | None = None  # the model that made the plan: its out-of-range check is added to the plan's
    backend: str | None = None  # --comparison: the backend it must have been measured on
    store: str | None = None  # None: publish.store_uri
    endpoint_url: str | None = None


class GateResult(Result):
    plan: Plan  # the plan to store (carrying the verified costs)
    decision: GateDecision
    # rejected, for a version nothing current can serve: the best measured baseline becomes current instead
    fallback: Plan | None = None
    fallback_decision: GateDecision | None = None


class PublishResult(GateResult):
    ref: PublishedRef
    fallback_ref: PublishedRef | None = None  # where the fallback plan was published (now current)


def stored_inventory(store: PlanStore, plan: Plan) -> Inventory:
    """The inventory version the plan names, from the store's inventory versions (`dreamshard inventory push`)."""
    inv = get_inventory_version(store, plan.inventory_name, plan.inventory_fingerprint)
    if inv is None:
        raise ConfigError(
            f"the gate verifies a plan against its inventory: pass -i INVENTORY, or push it first "
            f"(`dreamshard inventory push FILE --store ...`); the store has no version "
            f"{plan.inventory_fingerprint[:12]} of inventory '{plan.inventory_name}'"
        )
    return inv


def _check_request(request: PublishRequest) -> None:
    if request.measure and request.comparison is not None:
        raise ConfigError("--comparison and --measure are two ways to get the costs: choose one")
    if not request.measure and request.comparison is None:
        raise ConfigError(
            "publishing needs the plan's measured costs next to the baselines': pass --comparison FILE "
            "(a comparison holding this plan) or --measure (the gate measures them itself)"
        )


def gate(request: PublishRequest, store: PlanStore | None = None) -> GateResult:
    """Verify and decide, storing nothing. The plan file is taken through `gate.trusted_plan`: its costs,
    lineage, model version and verification are never taken from it."""
    _check_request(request)
    s = request.settings
    extra = tuple(validate_sharders(list(request.baselines))) if request.baselines else ()
    plan = trusted_plan(load_plan(request.plan))
    if request.inventory is not None:
        inv = load_inventory(request.inventory)
    else:
        inv = stored_inventory(store or open_plan_store(s, request.store, request.endpoint_url, existing=False), plan)
    if request.model is not None:
        card = load_card(request.model)
        plan = trusted_plan(plan, lambda p: card.out_of_range(inv.tables, p.topology))
    seed = s.profile.seed
    if request.comparison is not None:
        judged, decision, cmp = gate_comparison_file(
            plan, inv, request.comparison, s.publish, extra_baselines=extra, seed=seed, backend=request.backend
        )
    else:
        oracle = s.oracle()
        try:
            judged, decision, cmp = measure_and_gate(
                plan, inv, oracle, s.publish, extra_baselines=extra, rounds=s.evaluate.rounds, seed=seed
            )
        finally:
            oracle.close()
    store = store or open_plan_store(s, request.store, request.endpoint_url, existing=False)
    why = nothing_to_keep(store, judged) if decision.outcome in ("inconclusive", "rejected") else ""
    decision = first_plan(store, judged, decision, why)
    found = fallback_plan(decision, cmp, why, inv) if why and decision.outcome == "rejected" else None
    if found is None:
        return GateResult(plan=judged, decision=decision)
    fallback, fallback_decision = found
    decision = decision.model_copy(
        update={
            "reason": f"{decision.reason}; the best measured baseline "
            f"{fallback_decision.best_baseline} becomes current instead "
            f"(plan {fallback.plan_id}: {why})"
        }
    )
    return GateResult(plan=judged, decision=decision, fallback=fallback, fallback_decision=fallback_decision)


def nothing_to_keep(store: PlanStore, plan: Plan) -> str:
    """Why no current plan can serve the training job `plan` is for ("" when one can): none is current, or the
    current one places another table schema or topology. An unreadable current plan (`plans fsck` reports it)
    counts as one that can: nothing replaces it by noise or by fallback."""
    if get_pointer(store, plan.inventory_name) is None:
        return f"no plan is current for '{plan.inventory_name}'"
    try:
        current = get_current(store, plan.inventory_name)
        return cannot_serve(current, plan, schema_of(store, current))
    except StoreError:
        return ""


def first_plan(store: PlanStore, plan: Plan, decision: GateDecision, why: str | None = None) -> GateDecision:
    """Inside the noise the current plan stays, when it can: with no current plan, or one that cannot serve the
    training job this plan is for (another table schema: a table added, removed or reshaped; another topology),
    there is nothing to keep, and a plan the measurements cannot tell from the best baseline (inconclusive, never
    clearly slower) becomes current. `why`: `nothing_to_keep(store, plan)` when the caller has it already."""
    if decision.outcome != "inconclusive":
        return decision
    why = nothing_to_keep(store, plan) if why is None else why
    if not why:
        return _same_as_current(store, plan, decision)
    return decision.model_copy(
        update={
            "approved": True,
            "outcome": "approved",
            "reason": decision.reason.replace(
                "the current plan stays (measure more rounds)", f"{why}: it becomes current"
            ),
        }
    )


def _same_as_current(store: PlanStore, plan: Plan, decision: GateDecision) -> GateDecision:
    """An inconclusive plan that places every unit as the current plan does (a re-plan that kept the current plan's
    candidate): more rounds could not tell the two apart, so the reason says that instead of "measure more"."""
    try:
        current = get_current(store, plan.inventory_name)
    except StoreError:
        return decision
    if current.units() != plan.units():  # every unit (table, shard, replica) on the same device
        return decision
    return decision.model_copy(
        update={
            "reason": decision.reason.replace(
                "the current plan stays (measure more rounds)",
                f"the current plan {current.plan_id} stays (this plan places every table as it does: the job keeps its "
                f"state, and no number of rounds could tell the two apart)",
            )
        }
    )


def cannot_serve(current: Plan, plan: Plan, current_schema: str | None = None) -> str:
    """Why the current plan cannot serve the job `plan` is for ("" when it can: same table schema, same topology;
    a statistics-only change keeps the schema). `plan`'s schema is the gate's (recomputed from its inventory);
    `current_schema`, the store's for the current plan (`store.inventories.schema_of`), else the plan's own."""
    schema = current_schema or current.schema_fingerprint
    if schema is not None and plan.schema_fingerprint is not None and schema != plan.schema_fingerprint:
        return (
            f"the current plan {current.plan_id} places another table schema "
            f"({schema[:12]}, this version's is {plan.schema_fingerprint[:12]}) and cannot serve it"
        )
    if schema is None and set(current.table_names) != set(plan.table_names):
        return f"the current plan {current.plan_id} places other tables and cannot serve this version"
    if current.topology != plan.topology:
        t = current.topology
        return (
            f"the current plan {current.plan_id} is for {t.num_devices} x {t.device_type} (batch {t.batch_size}) "
            f"and cannot serve this topology"
        )
    return ""


def recorded(store: PlanStore, plan_file: Path) -> PublishResult | None:
    """The decision the store already holds for this plan file's id and inventory version (one decision per plan
    id per inventory version: publishing again neither re-measures nor records a second one); None if none."""
    found = already_decided(store, trusted_plan(load_plan(plan_file)))
    if found is None:
        return None
    ref, stored, decision = found
    return PublishResult(plan=stored, decision=decision, ref=ref)


def store_decision(store: PlanStore, plan: Plan, decision: GateDecision) -> PublishedRef:
    """Approved: versioned upload, verify, move `current`. Rejected / inconclusive: kept under rejected/ with the
    reason. A plan id already decided for this inventory version keeps its recorded decision."""
    return publish_or_reject(store, plan, decision)


def run(request: PublishRequest) -> PublishResult:
    _check_request(request)
    store = open_plan_store(request.settings, request.store, request.endpoint_url, existing=False)
    done = recorded(store, request.plan)
    if done is not None:
        return done
    gated = gate(request, store)
    return store_gated(store, gated)


def store_gated(store: PlanStore, gated: GateResult) -> PublishResult:
    """Store the gate's decision, and the fallback first when there is one: the rejected plan's decision is the
    last write, so a run that stops between the two is gated again (a new fallback id) rather than left with a
    rejection and nothing current."""
    fallback_ref = None
    if gated.fallback is not None and gated.fallback_decision is not None:
        fallback_ref = store_decision(store, gated.fallback, gated.fallback_decision)
    ref = store_decision(store, gated.plan, gated.decision)
    return PublishResult(
        plan=gated.plan,
        decision=gated.decision,
        ref=ref,
        fallback=gated.fallback,
        fallback_decision=gated.fallback_decision,
        fallback_ref=fallback_ref,
    )
