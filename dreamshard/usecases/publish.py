"""The gate and the plan store: a plan verified against its inventory and a comparison (or measured against the
baselines by the gate itself), decided, then published (current) or kept as rejected / inconclusive
(docs/architecture/gate.md, "The publish gate"). `plans publish`, the pipeline's publish step and `replan` call this,
with the plan, its inventory and a comparison as values: the doors read the files (`read_comparison` for a
comparison file and its digest)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import model_validator

from dreamshard.documents import read_structured_digest
from dreamshard.errors import ConfigError, StoreError
from dreamshard.evaluation import Comparison, validate_sharders
from dreamshard.evaluation.compare import comparison_from
from dreamshard.gate import gate_plan, measure_and_gate, trusted_plan
from dreamshard.gate.current import serving_contender
from dreamshard.gate.publish_policy import CurrentPlan, PolicyOutcome, current_plan, publish_verdict
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
from dreamshard.usecases.sharders import expand
from dreamshard.usecases.stored import open_plan_store
from dreamshard.values import UNDECIDED, GateDecision, Inventory, Plan, Topology


class PublishRequest(Request):
    plan: Plan  # as read: a plan file is data, taken through `gate.trusted_plan`
    comparison: Comparison | None = None  # a comparison holding this plan and the baselines
    comparison_source: str = "comparison"  # where it was read (`read_comparison`): the decision's evidence
    measure: bool = False  # the gate measures the plan and the baselines itself
    baselines: tuple[str, ...] = ()  # baselines added to publish.baselines; never fewer
    baseline_spec: str | None = None  # `--sharders`: more baselines, a comma list, 'heuristics' or 'all'
    inventory: Inventory | None = None  # None: the version pushed to the store with the plan's fingerprint
    model: Path | None = None  # the model that made the plan: its out-of-range check is added to the plan's
    backend: str | None = None  # --comparison: the backend it must have been measured on
    store: str | None = None  # None: publish.store_uri
    endpoint_url: str | None = None
    # the topology the caller plans for (a replan told --devices); None: the job the inventory records, if any
    topology: Topology | None = None


class GateResult(Result):
    plan: Plan  # the plan to store (carrying the verified costs)
    decision: GateDecision
    outcome: PolicyOutcome = "rejected"  # what the publish policy made of the decision (default: the decision's)
    # rejected, for a version nothing current can serve: the best measured baseline becomes current instead
    fallback: Plan | None = None
    fallback_decision: GateDecision | None = None

    @model_validator(mode="before")
    @classmethod
    def _outcome(cls, data: Any) -> Any:
        if isinstance(data, dict) and "outcome" not in data and isinstance(data.get("decision"), GateDecision):
            data = {**data, "outcome": data["decision"].outcome}
        return data

    def writes(self) -> list[tuple[Plan, GateDecision]]:
        """What the store gets for this result, in order: the fallback first when there is one, the judged plan's
        decision last, so a run that stops between the two is gated again (a new fallback id) rather than left with
        a rejection and nothing current. Every door that stores a result stores these, in this order."""
        first = [(self.fallback, self.fallback_decision)] if self.fallback and self.fallback_decision else []
        return [*first, (self.plan, self.decision)]


class PublishResult(GateResult):
    ref: PublishedRef
    fallback_ref: PublishedRef | None = None  # where the fallback plan was published (now current)


def read_comparison(path: str | Path) -> tuple[Comparison, str]:
    """A comparison file (`compare --out`, the evaluate stage's data/comparison.json) and the evidence line that
    names it: its path and sha256, which go into the gate's decision."""
    p = Path(path)
    data, digest = read_structured_digest(p)  # read once: the digest is of the bytes the comparison was parsed from
    return comparison_from(data, p), f"comparison {p} (sha256 {digest[:16]})"


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
    if request.baseline_spec:
        expand(request.baseline_spec)  # a bad name is one line before the store is opened
    if request.measure and request.comparison is not None:
        raise ConfigError("a comparison file and the gate's own measurement are two ways to get the costs: choose one")
    if not request.measure and request.comparison is None:
        raise ConfigError(
            "publishing needs the plan's measured costs next to the baselines': give a comparison file "
            "(one holding this plan) or ask for the gate's own measurement"
        )


def stored_current(store: PlanStore, name: str) -> tuple[str | None, Plan | None, str | None]:
    """The store's current plan of inventory `name`: its id (None: none is current), the plan and the table schema
    the store records for it; the plan and schema are None when they cannot be read (`plans fsck` reports it)."""
    pointer = get_pointer(store, name)
    if pointer is None:
        return None, None, None
    try:
        current = get_current(store, name)
        return pointer.plan_id, current, schema_of(store, current)
    except StoreError:
        return pointer.plan_id, None, None


def servable_current(store: PlanStore, plan: Plan, inventory: Inventory) -> Plan | None:
    """The store's current plan of `inventory` as a contender of this version (`gate.current.serving_contender`),
    when it can serve the job `plan` is for and places otherwise; None when none is current, it cannot serve,
    it places as `plan` does, or it is unreadable (`plans fsck` reports it)."""
    _, current, schema = stored_current(store, inventory.name)
    if current is None or current.units() == plan.units():
        return None
    return serving_contender(current, inventory, plan.topology, schema)


def _judge(request: PublishRequest, store: PlanStore) -> tuple[Plan, GateDecision, Comparison, Inventory]:
    """The gate's decision on the request's plan, with the verified comparison it was decided on and the inventory
    (storing nothing). The store's current plan, when it can serve the job, is one more contender to beat."""
    s = request.settings
    extra = tuple(validate_sharders(list(request.baselines))) if request.baselines else ()
    if request.baseline_spec:
        extra = tuple(dict.fromkeys((*extra, *expand(request.baseline_spec))))
    plan = trusted_plan(request.plan)
    inv = request.inventory if request.inventory is not None else stored_inventory(store, plan)
    if request.model is not None:
        card = load_card(request.model)
        plan = trusted_plan(plan, lambda p: card.out_of_range(inv.tables, p.topology))
    seed = s.profile.seed
    current = servable_current(store, plan, inv)
    if request.comparison is not None:
        judged, decision = gate_plan(
            plan,
            inv,
            request.comparison,
            s.publish,
            extra_baselines=extra,
            seed=seed,
            backend=request.backend,
            source=request.comparison_source,
            topology=request.topology,
            current=current,
        )
        return judged, decision, request.comparison, inv
    oracle = s.oracle()
    try:
        judged, decision, cmp = measure_and_gate(
            plan,
            inv,
            oracle,
            s.publish,
            extra_baselines=extra,
            rounds=s.evaluate.rounds,
            seed=seed,
            topology=request.topology,
            current=current,
        )
    finally:
        oracle.close()
    return judged, decision, cmp, inv


def gate(request: PublishRequest, store: PlanStore | None = None) -> GateResult:
    """Verify and decide, storing nothing. The plan file is taken through `gate.trusted_plan`: its costs,
    lineage, model version and verification are never taken from it. What the decision means for the store's
    current plan is the gate's publish policy (`gate.publish_policy.publish_verdict`)."""
    _check_request(request)
    store = store or open_plan_store(request.settings, request.store, request.endpoint_url, existing=False)
    judged, decision, cmp, inv = _judge(request, store)
    current = read_current(store, judged) if decision.outcome in (*UNDECIDED, "rejected") else None
    if current is None:
        return GateResult(plan=judged, decision=decision, outcome=decision.outcome)
    verdict = publish_verdict(decision, current, cmp, inv)
    return GateResult(
        plan=judged,
        decision=verdict.decision,
        outcome=verdict.outcome,
        fallback=verdict.fallback,
        fallback_decision=verdict.fallback_decision,
    )


def read_current(store: PlanStore, plan: Plan) -> CurrentPlan:
    """What the store's current plan of `plan`'s inventory can serve of the job `plan` is for. An unreadable
    current plan (`plans fsck` reports it) counts as one that can: nothing replaces it by noise or by fallback."""
    name = plan.inventory_name
    plan_id, current, schema = stored_current(store, name)
    if plan_id is not None and current is None:
        return CurrentPlan(inventory_name=name, plan_id=plan_id)
    return current_plan(name, current, plan, schema)


def first_plan(store: PlanStore, plan: Plan, decision: GateDecision) -> GateDecision:
    """The decision the store records for `plan` by the publish policy, without a fallback (no comparison): a plan
    inside the noise or equivalent becomes current when nothing current can serve its job (`gate.publish_policy`)."""
    if decision.outcome not in UNDECIDED:
        return decision
    return publish_verdict(decision, read_current(store, plan)).decision


def recorded(store: PlanStore, plan: Plan) -> PublishResult | None:
    """The decision the store already holds for this plan's id and inventory version (one decision per plan id per
    inventory version: publishing again neither re-measures nor records a second one); None if none."""
    found = already_decided(store, trusted_plan(plan))
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
    """Store the gate's decision, and the fallback first when there is one (`GateResult.writes`)."""
    refs = [store_decision(store, plan, decision) for plan, decision in gated.writes()]
    ref, fallback_ref = refs[-1], (refs[0] if len(refs) > 1 else None)
    return PublishResult(
        plan=gated.plan,
        decision=gated.decision,
        ref=ref,
        fallback=gated.fallback,
        fallback_decision=gated.fallback_decision,
        fallback_ref=fallback_ref,
        outcome=gated.outcome,
    )
