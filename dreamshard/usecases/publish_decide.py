"""The publish use case's decision (docs/architecture/gate.md, "One publish path"): the store's current plan read
once, the plan trusted once, decided once. Stores nothing: `publish_write` writes what is decided here, after the
reviewer answered (`usecases.review`)."""

from __future__ import annotations

from dataclasses import dataclass

from dreamshard.config.settings import Settings
from dreamshard.errors import ConfigError, StoreError
from dreamshard.evaluation import Comparison, validate_sharders
from dreamshard.gate import Incumbent, Judgement, TrustedPlan, gate_plan, incumbent_for, measure_and_gate, trust_plan
from dreamshard.gate.publish_policy import PublishVerdict, publish_verdict
from dreamshard.learning.model_store import load_card
from dreamshard.store import already_decided, get_current, get_inventory_version, get_pointer, pending_record
from dreamshard.store.base import PlanStore
from dreamshard.store.inventories import schema_of
from dreamshard.usecases.publish_explain import question_for
from dreamshard.usecases.publish_request import PublishRequest
from dreamshard.usecases.sharders import expand
from dreamshard.values import GateDecision, Inventory, Plan
from dreamshard.values.records import PublishedRef
from dreamshard.values.review import ReviewQuestion


@dataclass(frozen=True)
class CurrentState:
    """The store's current plan of an inventory, read once: what the pointer names (None: nothing is current), the
    plan (None when it cannot be read: `plans fsck` reports it) and the table schema the store records for it."""

    inventory_name: str
    plan_id: str | None = None
    plan: Plan | None = None
    schema: str | None = None


@dataclass(frozen=True)
class Decided:
    """What the decision phase leaves for the write: the trusted, judged plan (with the request's lineage), the
    incumbent, the judgement and the policy's verdict, and the question a reviewer must answer (None: none must)."""

    settings: Settings
    store: PlanStore
    state: CurrentState
    incumbent: Incumbent
    plan: Plan
    judgement: Judgement
    verdict: PublishVerdict
    question: ReviewQuestion | None


@dataclass(frozen=True)
class Recorded:
    """The store held this plan's decision (or its pending change) already: nothing is measured or written."""

    ref: PublishedRef
    plan: Plan  # as stored
    decision: GateDecision


def read_state(store: PlanStore, name: str) -> CurrentState:
    """The current plan of inventory `name`, read once (`CurrentState`)."""
    pointer = get_pointer(store, name)
    if pointer is None:
        return CurrentState(inventory_name=name)
    try:
        current = get_current(store, name)
        return CurrentState(name, pointer.plan_id, current, schema_of(store, current))
    except StoreError:
        return CurrentState(name, pointer.plan_id)


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


def check_request(request: PublishRequest) -> None:
    """One line for a request that cannot be gated, before the store is opened."""
    if request.baseline_spec:
        expand(request.baseline_spec)
    if request.measure and request.comparison is not None:
        raise ConfigError("a comparison file and the gate's own measurement are two ways to get the costs: choose one")
    if not request.measure and request.comparison is None:
        raise ConfigError(
            "publishing needs the plan's measured costs next to the baselines': give a comparison file "
            "(one holding this plan) or ask for the gate's own measurement"
        )


def _trusted(request: PublishRequest, store: PlanStore) -> TrustedPlan:
    """The request's plan taken by its authorities, once (`gate.trust.trust_plan`)."""
    plan = request.plan
    inventory = request.inventory if request.inventory is not None else stored_inventory(store, plan)
    check = None
    if request.model is not None:
        card = load_card(request.model)
        check = lambda p: card.out_of_range(inventory.tables, p.topology)  # noqa: E731
    return trust_plan(plan, inventory, request.topology, check)


def recorded(store: PlanStore, trusted: TrustedPlan) -> Recorded | None:
    """The decision the store holds for this plan id and inventory version (one decision per plan id per version),
    or its pending change; None when it has neither."""
    found = already_decided(store, trusted.plan)
    if found is not None:
        return Recorded(*found)
    waiting = pending_record(store, trusted.plan_id, trusted.plan.inventory_name)
    if waiting is None or waiting[0].fingerprint != trusted.plan.inventory_fingerprint:
        return None
    pk, record, plan = waiting
    ref = PublishedRef(
        plan_id=pk.plan_id,
        inventory=pk.inventory,
        fingerprint=pk.fingerprint,
        key=pk.key,
        sha256=record.sha256,
        status="pending",
        is_current=False,
        store=store.location,
        reason=record.gate.reason,
        outcome=record.gate.outcome,
        already_decided=True,
    )
    return Recorded(ref, plan, record.gate)


def _judge(request: PublishRequest, trusted: TrustedPlan, incumbent: Incumbent) -> Judgement:
    s = request.settings
    extra = tuple(validate_sharders(list(request.baselines))) if request.baselines else ()
    if request.baseline_spec:
        extra = tuple(dict.fromkeys((*extra, *expand(request.baseline_spec))))
    if request.comparison is not None:
        return gate_plan(
            trusted,
            request.comparison,
            s.publish,
            extra_baselines=extra,
            seed=s.profile.seed,
            backend=request.backend,
            source=request.comparison_source,
            incumbent=incumbent,
        )
    oracle = s.oracle()
    try:
        return measure_and_gate(
            trusted,
            oracle,
            s.publish,
            extra_baselines=extra,
            rounds=s.evaluate.rounds,
            seed=s.profile.seed,
            incumbent=incumbent,
            progress=request.progress,
        )
    finally:
        oracle.close()


def require_human(settings: Settings, asked: bool | None) -> bool:
    """Whether a reviewer must answer before anything becomes current: publish.require_human, or the caller asking
    for one (`asked` True). A caller can add a reviewer, never remove the team's."""
    return settings.publish.require_human or bool(asked)


def decide(request: PublishRequest, store: PlanStore) -> Decided | Recorded:
    """The decision phase (module docstring): trust once, read the current plan once, decide once."""
    check_request(request)
    trusted = _trusted(request, store)
    done = recorded(store, trusted)
    if done is not None:
        return done
    name = trusted.plan.inventory_name
    state = read_state(store, name)
    incumbent = incumbent_for(name, state.plan_id, state.plan, state.schema, trusted.inventory, trusted.plan.topology)
    judgement = _judge(request, trusted, incumbent)
    verdict = publish_verdict(judgement, incumbent)
    plan = judgement.plan.model_copy(update={"lineage": request.lineage}) if request.lineage else judgement.plan
    needs = verdict.change is not None and require_human(request.settings, request.require_human)
    question = question_for(plan, verdict, judgement, incumbent, request) if needs else None
    return Decided(request.settings, store, state, incumbent, plan, judgement, verdict, question)


def comparison_of(decided: Decided) -> Comparison:
    return decided.judgement.comparison
