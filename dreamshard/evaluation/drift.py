"""Drift: does the published plan still stand where it stood against its reference? (docs/architecture/pipeline.md,
"Drift")

A host's load moves absolute milliseconds by tens of percent from one hour to the next, so a plan's cost today is
never compared with a figure recorded on another day. `measure_paired` measures the plan and a reference plan
interleaved in the same rounds (each round both, in a shuffled order: whatever load the host carries hits both),
and `judge_drift` compares the ratio plan / reference, with its confidence interval, with the same ratio when the
plan was published:

- the reference is the baseline the gate judged the plan against (`baseline_reference`: its best baseline,
  re-planned, with the ratio the gate measured), else a fixed heuristic's plan of the same inventory
  (`calibration_reference`, `drift.reference_sharders`) whose ratio the first such check anchors;
- drift = ratio now / published ratio - 1; the plan drifted when the whole interval lies beyond +-threshold.

A drifted plan calls for a path (`choose_path`): the fast path (re-plan with the production model) when the
hardware and the model's training ranges are unchanged, a retrain otherwise. Every check is kept in the plan store
(`drift/<inventory>/history.json`) so the trend survives across runs.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

from pydantic import TypeAdapter

from dreamshard.errors import ConfigError, DreamshardError, StoreError, first_line
from dreamshard.evaluation.interleave import check_plan_for, measure_interleaved
from dreamshard.sharders import BASELINE_SHARDERS, get_sharder, options_for
from dreamshard.store.base import PlanStore, cas_update
from dreamshard.values import BackendInfo, GateDecision, Inventory, Plan
from dreamshard.values.drift import DriftCheck, RatioSource, ReferenceKind
from dreamshard.values.names import check_key_part
from dreamshard.values.progress import Progress

if TYPE_CHECKING:  # pragma: no cover
    from dreamshard.profiling import Oracle

DRIFT_PREFIX = "drift"
#: What differs between the backend that measured a plan and the one measuring it now that makes it other hardware.
HARDWARE_FIELDS: tuple[str, ...] = ("device", "operator", "num_threads", "row_cap")


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


@dataclass(frozen=True)
class DriftReference:
    """The plan a drift check measures beside the published plan, and plan / reference when it was published
    (None: no check has anchored a calibration reference yet; this check anchors it)."""

    plan: Plan
    kind: ReferenceKind
    published_ratio: float | None
    source: RatioSource


def _replanned(name: str, inventory: Inventory, plan: Plan, seed: int) -> Plan | None:
    """Sharder `name`'s plan of `inventory` on the plan's topology (the gate's options: the seed), or None when it
    cannot place it or places every unit where `plan` does (a reference equal to the plan shows nothing)."""
    try:
        ref = get_sharder(name, **options_for(name, {"seed": seed})).shard(inventory, plan.topology)
    except DreamshardError:
        return None
    return None if ref.units() == plan.units() else ref


def baseline_reference(
    plan: Plan, inventory: Inventory, decision: GateDecision | None, seed: int = 0
) -> DriftReference | None:
    """The best baseline the gate measured the plan against, re-planned, with plan / baseline as the gate measured
    it before charging moves (on the backend the monitor measures on: `require_comparable`); None when the decision
    has no measured ratio (a predicted one, or one measured on a proxy device), its best baseline is no sharder (the
    store's current plan of the day), or that sharder cannot re-plan it."""
    if decision is None or decision.ratio is None or decision.basis in (None, "predicted") or decision.proxy:
        return None
    name = decision.best_baseline
    if name is None or name not in BASELINE_SHARDERS:
        return None
    ref = _replanned(name, inventory, plan, seed)
    then = decision.uncharged_ratio if decision.uncharged_ratio is not None else decision.ratio
    return None if ref is None else DriftReference(ref, "baseline", then, "gate")


def anchored_ratio(history: Sequence[DriftCheck], plan_id: str, reference: str) -> float | None:
    """The ratio the first paired check of `plan_id` against calibration reference `reference` anchored (every
    later check repeats it, so it outlives the history's window)."""
    for c in history:
        if c.plan_id == plan_id and c.reference == reference and c.ratio_source == "anchor":
            return c.published_ratio
    return None


def calibration_reference(
    plan: Plan, inventory: Inventory, sharders: Sequence[str], history: Sequence[DriftCheck], seed: int = 0
) -> DriftReference:
    """The first of `sharders` whose plan of the inventory places differently from `plan`, with the ratio an
    earlier check anchored (None: this check anchors it). ConfigError when none can."""
    for name in sharders:
        ref = _replanned(name, inventory, plan, seed)
        if ref is not None:
            return DriftReference(ref, "calibration", anchored_ratio(history, plan.plan_id, name), "anchor")
    raise ConfigError(
        f"none of drift.reference_sharders ({', '.join(sharders)}) places inventory '{plan.inventory_name}' "
        f"differently from plan {plan.plan_id}: name another heuristic in drift.reference_sharders"
    )


@dataclass(frozen=True)
class PairedRounds:
    """The overall cost of the plan and of its reference in each round (paired by round)."""

    plan_ms: list[float]
    reference_ms: list[float]


def measure_paired(
    inventory: Inventory,
    plan: Plan,
    reference: Plan,
    oracle: Oracle,
    rounds: int,
    seed: int = 0,
    progress: Progress | None = None,
) -> PairedRounds:
    """`plan` and `reference` measured interleaved for `rounds` rounds (dreamshard.evaluation.interleave);
    `progress` gets a line per measurement ("round 2/5: measuring dim_greedy")."""
    check_plan_for(inventory, plan)
    samples = measure_interleaved(inventory, [plan, reference], oracle, rounds, seed=seed, progress=progress)
    return PairedRounds([m.overall_ms for m in samples[0]], [m.overall_ms for m in samples[1]])


class RatioInterval(Protocol):
    """plan / reference over paired rounds: a geometric-mean ratio and its confidence bounds
    (dreamshard.gate.bounds.RatioBound is one)."""

    @property
    def ratio(self) -> float: ...

    @property
    def low(self) -> float: ...

    @property
    def high(self) -> float: ...


def judge_drift(
    plan: Plan,
    reference: DriftReference,
    paired: PairedRounds,
    bound: RatioInterval,
    confidence: float,
    threshold: float,
    backend: BackendInfo,
) -> DriftCheck:
    """The check of `plan` from its paired rounds and their `bound`: drift = ratio now / published ratio - 1 with
    its interval; drifted when the whole interval lies beyond +-`threshold`. A check that anchors a calibration
    reference (no published ratio yet) records its ratio as the published one and cannot drift."""
    if not threshold > 0:
        raise ConfigError(f"drift threshold must be a positive fraction, got {threshold}")
    then = reference.published_ratio if reference.published_ratio is not None else bound.ratio
    drift, low, high = bound.ratio / then - 1.0, bound.low / then - 1.0, bound.high / then - 1.0
    drifted = low > threshold or high < -threshold
    now_ms = statistics.median(paired.plan_ms)
    measured = plan.measured.overall_ms if plan.measured is not None else None
    predicted = plan.predicted.overall_ms if plan.predicted is not None else None
    basis: Literal["measured", "predicted"] = "measured" if measured is not None else "predicted"
    anchors = reference.published_ratio is None
    return DriftCheck(
        plan_id=plan.plan_id,
        inventory_name=plan.inventory_name,
        inventory_fingerprint=plan.inventory_fingerprint,
        backend=backend.name,
        rounds=len(paired.plan_ms),
        now_ms=now_ms,
        measured_ms=measured,
        predicted_ms=predicted,
        basis=basis,
        drift=drift,
        drift_vs_predicted=_relative(now_ms, predicted),
        threshold=threshold,
        drifted=drifted,
        reference=reference.plan.sharder,
        reference_kind=reference.kind,
        reference_ms=statistics.median(paired.reference_ms),
        ratio=bound.ratio,
        ratio_low=bound.low,
        ratio_high=bound.high,
        confidence=confidence,
        published_ratio=then,
        ratio_source=reference.source,
        drift_low=low,
        drift_high=high,
        host_change=_relative(now_ms, measured if basis == "measured" else predicted),
        path_reason="this check anchors the calibration reference's ratio" if anchors else "",
    )


def hardware_change(then: BackendInfo | None, now: BackendInfo) -> str:
    """What makes the backend measuring now other hardware than the one that measured the plan ("" = the same; a
    plan never measured is taken as measured here)."""
    if then is None:
        return ""
    changed = [
        f"{f} {getattr(then, f)!r} -> {getattr(now, f)!r}"
        for f in HARDWARE_FIELDS
        if getattr(then, f) != getattr(now, f)
    ]
    return ", ".join(changed)


def choose_path(check: DriftCheck, hardware: str, out_of_range: Sequence[str]) -> DriftCheck:
    """What a drifted check calls for: a retrain when the hardware changed (`hardware`, from `hardware_change`) or
    the inventory is outside the production model's training ranges (`out_of_range`); else the fast path, which
    re-plans with the production model, measures its candidates and gates them against baselines measured now."""
    if not check.drifted:
        return check
    if hardware:
        why = f"the hardware changed since the plan was measured ({hardware}): re-profile and retrain"
        return check.model_copy(update={"path": "retrain", "path_reason": why})
    if out_of_range:
        why = f"the inventory is outside the production model's training ranges ({'; '.join(out_of_range)}): retrain"
        return check.model_copy(update={"path": "retrain", "path_reason": why})
    why = (
        "the hardware and the production model's training ranges are unchanged, only the measured costs moved: "
        "re-plan with the production model (the fast path), no re-profile or retrain"
    )
    return check.model_copy(update={"path": "replan", "path_reason": why})


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
