"""The publish gate: a plan is approved only if it fits memory and beats the best baseline by a margin.

Costs are the plan's measured overall cost when it has one, else its predicted one (the `basis`; a cost
from the analytic simulator backend is labelled `simulated`, never `measured`).
The margin is a fraction: approved iff plan_cost <= best_baseline * (1 - min_improvement); with a
margin of 0.0 a tie passes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from dreamshard.errors import ConfigError
from dreamshard.types import Plan, utcnow

Basis = Literal["measured", "simulated", "predicted"]


class GateDecision(BaseModel):
    """The outcome of the gate for one plan, with the figures behind it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    approved: bool
    reason: str
    plan_id: str = ""
    plan_cost_ms: float | None = None
    best_heuristic: str | None = None
    best_heuristic_ms: float | None = None
    improvement: float | None = None  # (best - plan) / best; positive = plan is faster
    min_improvement: float = 0.0
    basis: Basis | None = None
    checked_at: datetime = Field(default_factory=utcnow)


class PublishConfig(BaseModel):
    """The `publish` section of params.yaml."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    min_improvement: float = Field(default=0.0, ge=0.0, lt=1.0)
    require_human: bool = False
    approval_timeout_s: int = Field(default=3600, ge=1)
    store: Literal["local", "s3"] = "local"
    store_uri: str = "runs/plan-store"


def _memory_overflow(plan: Plan) -> str | None:
    cap = plan.topology.memory_per_device_gb
    for d, used in enumerate(plan.memory_per_device_gb):
        if used > cap + 1e-12:
            return f"device {d} holds {used:.3f} GB, over its {cap:g} GB memory limit"
    return None


def _costs_and_basis(plan: Plan) -> tuple[Any, Basis]:
    """Measured costs if any (labelled 'simulated' when an analytic simulator produced them), else predicted."""
    if plan.measured is not None:
        simulated = plan.measured_by is not None and plan.measured_by.is_simulated
        return plan.measured, "simulated" if simulated else "measured"
    return plan.predicted, "predicted"


def evaluate_gate(plan: Plan, baselines: Mapping[str, float], min_improvement: float) -> GateDecision:
    """Decide whether `plan` may be published, comparing it with the baselines' overall costs (ms).

    A baseline with the plan's own sharder name is ignored (a plan does not compete with itself).
    """
    if not (0.0 <= min_improvement < 1.0) or math.isnan(min_improvement):
        raise ConfigError(f"min_improvement must be a fraction in [0, 1), got {min_improvement}")
    base = {k: float(v) for k, v in baselines.items() if k != plan.sharder}
    for name, v in base.items():
        if not math.isfinite(v) or v <= 0:
            raise ConfigError(f"baseline '{name}' has cost {v} ms; baseline costs must be positive numbers")

    costs, basis = _costs_and_basis(plan)
    common: dict[str, Any] = {"plan_id": plan.plan_id, "min_improvement": min_improvement}
    if costs is not None:
        common.update(plan_cost_ms=costs.overall_ms, basis=basis)
    if base:
        best_name = min(base, key=base.__getitem__)
        common.update(best_heuristic=best_name, best_heuristic_ms=base[best_name])
        if costs is not None:
            common["improvement"] = (base[best_name] - costs.overall_ms) / base[best_name]

    overflow = _memory_overflow(plan)
    if overflow:
        return GateDecision(approved=False, reason=f"plan does not fit memory: {overflow}", **common)
    if costs is None:
        return GateDecision(
            approved=False, reason="plan has neither measured nor predicted costs; evaluate it first", **common
        )
    if not base:
        return GateDecision(
            approved=False, reason="no baseline costs to compare against; pass --baselines comparison.json", **common
        )
    best_name, best_ms, plan_ms = common["best_heuristic"], common["best_heuristic_ms"], costs.overall_ms
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


def parse_baselines(data: Any, source: str = "baselines") -> dict[str, float]:
    """Baseline costs from {sharder: ms}, a compare --json output ({"results": [{sharder, overall_ms}]}),
    or a comparison summary ({"sharders": {name: {"overall_ms": ms}}})."""
    out: dict[str, float] = {}
    if isinstance(data, dict) and isinstance(data.get("results"), list):
        for i, r in enumerate(data["results"]):
            if not isinstance(r, dict) or "sharder" not in r or "overall_ms" not in r:
                raise ConfigError(f"{source}: results[{i}] needs 'sharder' and 'overall_ms' keys")
            out[str(r["sharder"])] = _number(r["overall_ms"], f"{source}: results[{i}].overall_ms")
        return out
    if isinstance(data, dict) and isinstance(data.get("sharders"), dict):
        for name, r in data["sharders"].items():
            if not isinstance(r, dict) or "overall_ms" not in r:
                raise ConfigError(f"{source}: sharders.{name} needs an 'overall_ms' key")
            out[str(name)] = _number(r["overall_ms"], f"{source}: sharders.{name}.overall_ms")
        return out
    if isinstance(data, dict) and data:
        for name, v in data.items():
            out[str(name)] = _number(v, f"{source}: {name}")
        return out
    raise ConfigError(
        f"{source}: expected {{sharder: overall_ms}} or a compare --json output with a 'results' list"
    )


def _number(v: Any, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ConfigError(f"{where} must be a number of milliseconds, got {v!r}")
    return float(v)
