"""The gate and the plan store: a plan verified against its inventory and a comparison (or measured against the
baselines by the gate itself), decided, then published (current) or kept as rejected (docs/architecture.md,
"The publish gate"). `plans publish` and the pipeline's publish step call this."""

from __future__ import annotations

from pathlib import Path

from dreamshard.errors import ConfigError
from dreamshard.evaluation import validate_sharders
from dreamshard.gate import GateDecision, check_margin, gate_comparison_file, measure_and_gate
from dreamshard.io import load_inventory, load_plan
from dreamshard.store import PublishedRef, get_inventory_version, publish_or_reject
from dreamshard.store.base import PlanStore
from dreamshard.types import Inventory, Plan
from dreamshard.usecases.base import Request, Result
from dreamshard.usecases.stored import open_plan_store


class PublishRequest(Request):
    plan: Path
    comparison: Path | None = None  # a comparison holding this plan and the baselines
    measure: bool = False  # the gate measures the plan and the baselines itself
    baselines: tuple[str, ...] = ()  # --measure: the baseline sharders
    inventory: Path | None = None  # None: the version pushed to the store with the plan's fingerprint
    backend: str | None = None  # --comparison: the backend it must have been measured on
    store: str | None = None  # None: publish.store_uri
    endpoint_url: str | None = None


class GateResult(Result):
    plan: Plan  # the plan to store (carrying the verified costs)
    decision: GateDecision


class PublishResult(GateResult):
    ref: PublishedRef


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


def gate(request: PublishRequest, store: PlanStore | None = None) -> GateResult:
    """Verify and decide, storing nothing."""
    if request.measure and request.comparison is not None:
        raise ConfigError("--comparison and --measure are two ways to get the costs: choose one")
    if not request.measure and request.comparison is None:
        raise ConfigError(
            "publishing needs the plan's measured costs next to the baselines': pass --comparison FILE "
            "(a comparison holding this plan) or --measure (the gate measures them itself)"
        )
    s = request.settings
    margin = check_margin(s.publish.min_improvement)
    plan = load_plan(request.plan)
    if request.inventory is not None:
        inv = load_inventory(request.inventory)
    else:
        inv = stored_inventory(store or open_plan_store(s, request.store, request.endpoint_url, existing=False), plan)
    if request.comparison is not None:
        judged, decision = gate_comparison_file(plan, inv, request.comparison, margin, backend=request.backend)
        return GateResult(plan=judged, decision=decision)
    names = validate_sharders(list(request.baselines))
    oracle = s.oracle()
    try:
        judged, decision, _ = measure_and_gate(plan, inv, oracle, names, margin, rounds=s.evaluate.rounds,
                                               seed=s.profile.seed,
                                               sharder_options={"random": {"seed": s.profile.seed}})
    finally:
        oracle.close()
    return GateResult(plan=judged, decision=decision)


def store_decision(store: PlanStore, plan: Plan, decision: GateDecision) -> PublishedRef:
    """Approved: versioned upload, verify, move `current`. Rejected: kept under rejected/ with the reason."""
    return publish_or_reject(store, plan, decision)


def run(request: PublishRequest) -> PublishResult:
    store = open_plan_store(request.settings, request.store, request.endpoint_url, existing=False)
    gated = gate(request, store)
    ref = store_decision(store, gated.plan, gated.decision)
    return PublishResult(plan=gated.plan, decision=gated.decision, ref=ref)
