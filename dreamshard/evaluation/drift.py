"""Drift: is the published plan still as fast as when it was published? (docs/architecture/pipeline.md, "Drift")

`check_drift` re-measures a plan on a backend and compares its overall cost with the cost recorded in the plan:
the measured one (what the gate approved), or the predicted one for a plan that was never measured. Past the
threshold the plan has drifted; the pipeline then emits `dreamshard.plan.drifted` and its retrain deployment
re-profiles and retrains. Every check is kept in the plan store (`drift/<inventory>/history.json`) so the trend
survives across runs.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Literal

from pydantic import TypeAdapter

from dreamshard.errors import ConfigError, StoreError, first_line
from dreamshard.evaluation import evaluate_plan
from dreamshard.store.base import PlanStore, cas_update
from dreamshard.values import Inventory, Plan
from dreamshard.values.drift import DriftCheck
from dreamshard.values.names import check_key_part

if TYPE_CHECKING:  # pragma: no cover
    from dreamshard.profiling import Oracle

DRIFT_PREFIX = "drift"


def _relative(now: float, then: float | None) -> float | None:
    return None if then is None or then <= 0 else now / then - 1.0


def require_comparable(plan: Plan, backend: str, statistic: str | None = None) -> None:
    """A measured plan is re-measured on the backend that measured it, with the same statistic of a device's
    repeats, or the drift figure means nothing."""
    recorded_by = plan.measured_by.name if plan.measured_by is not None else None
    if plan.measured is not None and recorded_by is not None and recorded_by != backend:
        raise ConfigError(
            f"plan {plan.plan_id} was measured on backend '{recorded_by}', the monitor would measure on "
            f"'{backend}': use --backend {recorded_by} (or profile.backend: {recorded_by}) so the costs are comparable"
        )
    recorded = plan.measured_by.statistic if plan.measured_by is not None else None
    if plan.measured is not None and recorded is not None and statistic is not None and recorded != statistic:
        raise ConfigError(
            f"plan {plan.plan_id} was measured with the {recorded} of each device's repeats, the monitor would take "
            f"the {statistic}: set profile.statistic: {recorded} so the costs are comparable"
        )


def check_drift(plan: Plan, inventory: Inventory, oracle: Oracle, rounds: int, threshold: float) -> DriftCheck:
    """Re-measure `plan` on `oracle` (median of `rounds`) and compare with its recorded cost."""
    if not threshold > 0:
        raise ConfigError(f"drift threshold must be a positive fraction, got {threshold}")
    require_comparable(plan, oracle.info.name, oracle.info.statistic)
    now = evaluate_plan(inventory, plan, oracle, rounds=rounds)
    assert now.measured is not None
    now_ms = now.measured.overall_ms
    measured = plan.measured.overall_ms if plan.measured is not None else None
    predicted = plan.predicted.overall_ms if plan.predicted is not None else None
    if measured is None and predicted is None:
        raise ConfigError(f"plan {plan.plan_id} records no cost (neither measured nor predicted) to compare with")
    basis: Literal["measured", "predicted"] = "measured" if measured is not None else "predicted"
    drift = _relative(now_ms, measured if basis == "measured" else predicted)
    assert drift is not None
    return DriftCheck(
        plan_id=plan.plan_id,
        inventory_name=plan.inventory_name,
        inventory_fingerprint=plan.inventory_fingerprint,
        backend=oracle.info.name,
        rounds=rounds,
        now_ms=now_ms,
        measured_ms=measured,
        predicted_ms=predicted,
        basis=basis,
        drift=drift,
        drift_vs_predicted=_relative(now_ms, predicted),
        threshold=threshold,
        drifted=abs(drift) > threshold,
    )


def history_key(inventory_name: str) -> str:
    return f"{DRIFT_PREFIX}/{check_key_part(inventory_name, 'inventory name')}/history.json"


_HISTORY = TypeAdapter(list[DriftCheck])


def read_history(store: PlanStore, inventory_name: str) -> list[DriftCheck]:
    """Every kept check of `inventory_name`, oldest first (empty when none was made)."""
    got = store.get_versioned(history_key(inventory_name))
    if got is None:
        return []
    try:
        return _HISTORY.validate_json(got[0])
    except ValueError as e:
        raise StoreError(f"drift history {history_key(inventory_name)} is corrupt: {first_line(e)}") from None


def record_check(store: PlanStore, check: DriftCheck, keep: int = 200) -> list[DriftCheck]:
    """Append `check` to its inventory's history (compare-and-swap; the last `keep` checks stay)."""

    def appended(raw: bytes | None) -> bytes:
        rows = _HISTORY.validate_json(raw) if raw else []
        rows = [*rows, check][-keep:]
        return json.dumps(_HISTORY.dump_python(rows, mode="json"), indent=1).encode()

    raw = cas_update(store, history_key(check.inventory_name), appended)
    assert raw is not None  # `appended` always writes
    return _HISTORY.validate_json(raw)
