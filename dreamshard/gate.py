"""The publish gate: verifies a plan, then approves it only if it beats the best baseline by a margin.

The gate trusts nothing in the plan file (docs/architecture.md, "The publish gate"):

* the plan is checked against its inventory: fingerprint recomputed, every table placed exactly once (whole or
  as column shards that tile it), devices in range, memory recomputed (`dreamshard.memory.check_plan`);
* costs never come from the plan: they come from a Comparison (every contender measured interleaved in one
  run) that holds this very plan (same id, same placement) and was made for the same inventory fingerprint,
  topology and backend; its figures are checked for internal consistency. `plans publish --measure` makes
  that comparison itself on the backend, so nothing supplied by the user is taken on trust;
* the published plan carries the comparison's figures (`measured`, `measured_by`) and the decision records
  the evidence (which comparison, sha256, backend, rounds).

`evaluate_gate` is the decision rule alone (costs vs baselines with a margin) on figures already verified.
"""

from __future__ import annotations

import hashlib
import math
import statistics
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from dreamshard.errors import ConfigError, PlanError
from dreamshard.evaluation import (
    BASELINE_SHARDERS,
    Comparison,
    SharderResult,
    check_plan_for,
    compare_sharders,
    load_comparison,
)
from dreamshard.inventory.validation import check_key_part
from dreamshard.types import CostBasis, Inventory, Plan, renamed_fields, utcnow

if TYPE_CHECKING:  # pragma: no cover
    from dreamshard.profiling import Oracle

#: Kept for callers that import the name from here.
Basis = CostBasis
#: Relative tolerance for figures that must agree inside a comparison (JSON round-trips floats exactly).
_REL_TOL = 1e-9


class GateDecision(BaseModel):
    """The outcome of the gate for one plan, with the figures behind it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    approved: bool
    reason: str
    plan_id: str = ""
    plan_cost_ms: float | None = None
    best_baseline: str | None = None  # the fastest baseline (BASELINE_SHARDERS: heuristics, TorchRec's planner)
    best_baseline_ms: float | None = None
    improvement: float | None = None  # (best - plan) / best; positive = plan is faster
    min_improvement: float = 0.0
    basis: Basis | None = None
    inventory_fingerprint: str = ""  # the inventory the plan was verified against
    evidence: str = ""  # where the costs come from (comparison file + sha256, or the gate's own measurement)
    checked_at: datetime = Field(default_factory=utcnow)

    @model_validator(mode="before")
    @classmethod
    def _old_names(cls, data: Any) -> Any:  # records written before the rename say best_heuristic
        return renamed_fields(data, {"best_heuristic": "best_baseline", "best_heuristic_ms": "best_baseline_ms"})


class PublishConfig(BaseModel):
    """The `publish` section of params.yaml."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    min_improvement: float = Field(default=0.0, ge=0.0, lt=1.0)
    require_human: bool = False
    approval_timeout_s: int = Field(default=3600, ge=1, le=7 * 24 * 3600)
    store_uri: str = "runs/plan-store"


def check_margin(min_improvement: float) -> float:
    if isinstance(min_improvement, bool) or not (0.0 <= min_improvement < 1.0) or math.isnan(min_improvement):
        raise ConfigError(f"min_improvement must be a fraction in [0, 1), got {min_improvement}")
    return float(min_improvement)


def evaluate_gate(plan: Plan, baselines: Mapping[str, float], min_improvement: float) -> GateDecision:
    """The decision rule: `plan`'s costs (Plan.cost_basis) vs the best baseline's overall ms, with a margin.

    Approved iff plan_cost <= best_baseline * (1 - min_improvement) (a tie passes with a margin of 0).
    A baseline with the plan's own sharder name is ignored (a plan does not compete with itself). It takes
    its inputs as given: `gate_plan` verifies them first and is what the CLI and the flows call.
    """
    check_margin(min_improvement)
    base = {k: float(v) for k, v in baselines.items() if k != plan.sharder}
    for name, v in base.items():
        if not math.isfinite(v) or v <= 0:
            raise ConfigError(f"baseline '{name}' has cost {v} ms; baseline costs must be positive numbers")

    costs, basis = plan.best_costs, plan.cost_basis
    common: dict[str, Any] = {"plan_id": plan.plan_id, "min_improvement": min_improvement}
    if costs is not None:
        common.update(plan_cost_ms=costs.overall_ms, basis=basis)
    if base:
        best_name = min(base, key=base.__getitem__)
        common.update(best_baseline=best_name, best_baseline_ms=base[best_name])
        if costs is not None:
            common["improvement"] = (base[best_name] - costs.overall_ms) / base[best_name]

    if not plan.fits_memory():
        return GateDecision(approved=False, reason="plan does not fit memory: " + _overflow(plan), **common)
    if costs is None:
        return GateDecision(
            approved=False, reason="plan has neither measured nor predicted costs; evaluate it first", **common
        )
    if plan.out_of_range and basis == "predicted":
        return GateDecision(
            approved=False,
            reason=(
                f"plan has {len(plan.out_of_range)} input(s) outside the model's training ranges "
                f"({plan.out_of_range[0]}); predicted costs are not enough: measure it (plans publish --measure)"
            ),
            **common,
        )
    if not base:
        return GateDecision(
            approved=False, reason="no baseline costs to compare against; measure the baselines with the plan", **common
        )
    best_name, best_ms, plan_ms = common["best_baseline"], common["best_baseline_ms"], costs.overall_ms
    threshold = best_ms * (1.0 - min_improvement)
    margin = f"{min_improvement:.1%}"
    if plan_ms <= threshold + 1e-12 * max(1.0, best_ms):
        reason = (
            f"approved: {basis} {plan_ms:.4g} ms vs best baseline {best_name} {best_ms:.4g} ms "
            f"({common['improvement']:+.1%}, required {margin}); fits memory on all "
            f"{plan.topology.num_devices} devices"
        )
        return GateDecision(approved=True, reason=reason, **common)
    reason = (
        f"{basis} cost {plan_ms:.4g} ms does not beat best baseline {best_name} {best_ms:.4g} ms by {margin} "
        f"(needs <= {threshold:.4g} ms; improvement {common['improvement']:+.1%})"
    )
    return GateDecision(approved=False, reason=reason, **common)


def _overflow(plan: Plan) -> str:
    cap = plan.topology.memory_per_device_gb
    d, used = max(enumerate(plan.memory_per_device_gb), key=lambda x: x[1])
    return f"device {d} holds {used:.3f} GB, over its {cap:g} GB memory limit"


# -- verification -----------------------------------------------------------------------------------------
def verify_plan(plan: Plan, inventory: Inventory) -> None:
    """PlanError unless `plan` is a legal plan of exactly this inventory (fingerprint recomputed, every table
    placed once, devices in range, memory recomputed and equal to the plan's figures), and its names can be
    used as storage keys."""
    check_key_part(plan.plan_id, "plan id")
    check_key_part(plan.inventory_name, "inventory name")
    if plan.inventory_name != inventory.name:
        raise PlanError(
            f"plan {plan.plan_id} is for inventory '{plan.inventory_name}', not '{inventory.name}'; "
            f"pass the plan's own inventory"
        )
    check_plan_for(inventory, plan)


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=_REL_TOL, abs_tol=1e-12)


def _check_result(r: SharderResult, cmp: Comparison, inventory: Inventory, where: str) -> None:
    """One contender of a comparison: a legal plan of this inventory on the comparison's topology, and figures
    that agree with each other (overall = median of the rounds' samples = the plan's measured overall)."""
    label = f"{where}: contender '{r.sharder}'"
    if r.plan.sharder != r.sharder:
        raise PlanError(f"{label} holds a plan made by '{r.plan.sharder}'")
    try:
        check_plan_for(inventory, r.plan, cmp.topology)
    except PlanError as e:
        raise PlanError(f"{label}: {e}") from None
    if len(r.samples_ms) != cmp.rounds or not r.samples_ms:
        raise PlanError(f"{label} has {len(r.samples_ms)} samples for {cmp.rounds} round(s)")
    if any(v <= 0 for v in r.samples_ms) or not _close(statistics.median(r.samples_ms), r.overall_ms):
        raise PlanError(f"{label}: overall {r.overall_ms:g} ms is not the median of its samples {r.samples_ms}")
    m = r.plan.measured
    if m is None or not _close(m.overall_ms, r.overall_ms):
        raise PlanError(f"{label}: its plan's measured costs do not match its overall {r.overall_ms:g} ms")
    if r.plan.measured_by is not None and r.plan.measured_by != cmp.backend:
        raise PlanError(f"{label} was measured by another backend than the comparison's")


def verify_comparison(
    plan: Plan, inventory: Inventory, comparison: Comparison, *, backend: str | None = None, source: str = "comparison"
) -> SharderResult:
    """PlanError unless `comparison` was made for `plan`'s inventory fingerprint, topology and backend, holds
    `plan` itself (same id, same units) and is internally consistent. Returns the plan's own entry."""
    fp = inventory.fingerprint()
    cmp = comparison
    if cmp.inventory_fingerprint != fp:
        raise PlanError(
            f"{source} was made for another inventory (fingerprint {cmp.inventory_fingerprint[:12]}, "
            f"'{cmp.inventory_name}'), not '{inventory.name}' ({fp[:12]}); compare this plan's own inventory"
        )
    if cmp.topology != plan.topology:
        t, c = plan.topology, cmp.topology
        raise PlanError(
            f"{source} was measured on {c.num_devices} x {c.device_type} ({c.memory_per_device_gb:g} GB, batch "
            f"{c.batch_size}), the plan is for {t.num_devices} x {t.device_type} ({t.memory_per_device_gb:g} GB, "
            f"batch {t.batch_size}); compare on the plan's topology"
        )
    if backend is not None and cmp.backend.name != backend:
        raise PlanError(f"{source} was measured on backend '{cmp.backend.name}', not '{backend}'")
    if cmp.backend.name not in (plan.topology.device_type, "simulator"):
        raise PlanError(
            f"{source} was measured on backend '{cmp.backend.name}', the plan is for {plan.topology.device_type} devices"
        )
    seen: set[str] = set()
    for r in cmp.results:
        if r.plan.plan_id in seen:
            raise PlanError(f"{source} lists plan {r.plan.plan_id} twice")
        seen.add(r.plan.plan_id)
        _check_result(r, cmp, inventory, source)
    own = [r for r in cmp.results if r.plan.plan_id == plan.plan_id]
    if not own:
        raise PlanError(
            f"plan {plan.plan_id} is not among the contenders of {source}; measure it with the baselines: "
            f"`dreamshard plans publish PLAN --measure`, or `dreamshard compare --plan PLAN --out FILE`"
        )
    entry = own[0]
    if entry.plan.units() != plan.units() or entry.sharder != plan.sharder:
        raise PlanError(
            f"{source} holds a plan {plan.plan_id} with another placement or sharder than this file; re-measure it"
        )
    return entry


def gate_plan(
    plan: Plan,
    inventory: Inventory,
    comparison: Comparison,
    min_improvement: float,
    *,
    backend: str | None = None,
    source: str = "comparison",
) -> tuple[Plan, GateDecision]:
    """Verify `plan` against `inventory` and `comparison`, then decide on the comparison's figures.

    Returns the plan to store (carrying the comparison's measured costs and backend, not the file's) and the
    decision. Raises PlanError (nothing to store: the input is wrong) when verification fails; a verified plan
    that is too slow is a rejection (approved=False), not an error. `source` names the comparison in messages
    and in the decision's evidence (e.g. "comparison data/comparison.json (sha256 ...)").
    """
    check_margin(min_improvement)
    verify_plan(plan, inventory)
    entry = verify_comparison(plan, inventory, comparison, backend=backend, source=source)
    judged = plan.model_copy(update={"measured": entry.plan.measured, "measured_by": comparison.backend})
    baselines = {
        r.sharder: r.overall_ms
        for r in comparison.results
        if r.sharder in BASELINE_SHARDERS and r.plan.plan_id != plan.plan_id
    }
    b = comparison.backend
    evidence = (
        f"{source}: {comparison.rounds} interleaved round(s) on {b.name}/{b.operator}"
        + (" (SIMULATED)" if b.is_simulated else "")
        + f", {comparison.created_at:%Y-%m-%d %H:%M:%S}"
    )
    decision = evaluate_gate(judged, baselines, min_improvement)
    extra = f" [{len(plan.out_of_range)} input(s) outside the model's training ranges]" if plan.out_of_range else ""
    decision = decision.model_copy(
        update={"inventory_fingerprint": inventory.fingerprint(), "evidence": evidence, "reason": decision.reason + extra}
    )
    return judged, decision


def gate_comparison_file(
    plan: Plan,
    inventory: Inventory,
    comparison_file: str | Path,
    min_improvement: float,
    *,
    backend: str | None = None,
) -> tuple[Plan, GateDecision]:
    """`gate_plan` with the comparison read from a file (`compare --out`, the evaluate stage's
    data/comparison.json); the file's path and sha256 go into the decision's evidence. The CLI's
    `plans publish --comparison` and the pipeline's publish step both call this."""
    path = Path(comparison_file)
    comparison = load_comparison(path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    source = f"comparison {path} (sha256 {digest[:16]})"
    return gate_plan(plan, inventory, comparison, min_improvement, backend=backend, source=source)


def measure_and_gate(
    plan: Plan,
    inventory: Inventory,
    oracle: Oracle,
    baselines: Sequence[str],
    min_improvement: float,
    *,
    rounds: int = 3,
    seed: int = 0,
    sharder_options: Mapping[str, Mapping[str, Any]] | None = None,
) -> tuple[Plan, GateDecision, Comparison]:
    """The gate measures for itself: `plan` and every baseline sharder's plan, interleaved on `oracle`'s backend,
    then `gate_plan` on that comparison. Nothing but the plan's placement is taken from the user."""
    check_margin(min_improvement)
    verify_plan(plan, inventory)  # before any measuring
    names = [s for s in baselines if s != plan.sharder]
    if not names:
        raise ConfigError("no baseline sharder to measure against; pass --sharders heuristics")
    cmp = compare_sharders(
        inventory, plan.topology, names, oracle, rounds=rounds, sharder_options=sharder_options, seed=seed,
        extra_plans=(plan,),
    )
    judged, decision = gate_plan(plan, inventory, cmp, min_improvement, source="measured by the gate")
    return judged, decision, cmp


