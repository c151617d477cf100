"""The measured steps of the searching sharder, as one ordered list of typed configs (docs/architecture/learning.md,
"Measured steps").

    Calibrate  before the search: the planning cost corrected on the backend (dreamshard.measured.calibrate)
    Verify     after it: the race of the search-only plan, the best candidates, every heuristic's own plan and
               TorchRec's; the best measured kept (dreamshard.measured.verify, .race, .contenders, .robust_verify)
    Refine     then: the kept plan improved by measured moves off its bottleneck, kept only when faster every round
               (dreamshard.measured.refine)

`measured_steps` builds the list from the plan settings (each bad value one line naming its setting); the sharder
runs `calibrated` before its search and `after_search` on what the search found (`SearchOutcome`), within the plan
stage's budget (`StageBudget`: plan.stage_budget x the search's own time). Each step uses the oracle the sharder was
given; none of them imports the search.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict

from dreamshard.errors import ConfigError
from dreamshard.learning.planning_cost import PlanningCost
from dreamshard.measured.calibrate import MAX_CALIBRATE_SECONDS, calibrate
from dreamshard.measured.contenders import contenders_for
from dreamshard.measured.outcome import SearchOutcome
from dreamshard.measured.refine import refine_plan
from dreamshard.measured.robust_verify import verify_robust
from dreamshard.measured.verify import VERIFY_ROUNDS, verify_candidates
from dreamshard.values import CalibrationReport, Inventory, Plan, Topology
from dreamshard.values.progress import Progress, prefixed

if TYPE_CHECKING:  # pragma: no cover
    from dreamshard.profiling.oracle import Oracle


class _Step(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Calibrate(_Step):
    """plan.calibrate_seconds: the planning cost calibrated on the backend for this long, before the search."""

    kind: Literal["calibrate"] = "calibrate"
    seconds: float


class Verify(_Step):
    """plan.verify: the race of the search-only plan, the `candidates` best predicted, every heuristic's own plan and
    TorchRec's, for up to `rounds` interleaved rounds; a contender behind the leader with `confidence` is dropped,
    and a re-plan's challenger duels the current plan up to `confidence`."""

    kind: Literal["verify"] = "verify"
    candidates: int
    rounds: int = VERIFY_ROUNDS
    confidence: float = 0.95


class Refine(_Step):
    """plan.refine_seconds: the kept plan improved by measured moves for this long; a kept refinement is measured
    whole against its start for `rounds` rounds and `confirm_rounds` fresh ones."""

    kind: Literal["refine"] = "refine"
    seconds: float
    rounds: int = 3
    confirm_rounds: int = 3


MeasuredStep = Calibrate | Verify | Refine
#: The order the steps run in (a list given in another order is refused).
ORDER: tuple[str, ...] = ("calibrate", "verify", "refine")


def _check(value: float, low: float, high: float, setting: str, high_open: bool = False) -> None:
    if not (low <= value < high if high_open else low <= value <= high):
        bound = f"[{low:g}, {high:g})" if high_open else f"[{low:g}, {high:g}]"
        raise ConfigError(f"{setting} must be in {bound}, got {value}")


def measured_steps(
    verify: int = 0,
    verify_rounds: int | None = None,
    verify_confidence: float = 0.95,
    calibrate_seconds: float = 0.0,
    refine_seconds: float = 0.0,
    refine_rounds: int = 3,
    refine_confirm_rounds: int = 3,
) -> tuple[MeasuredStep, ...]:
    """The steps the plan settings ask for, in order (0 seconds or 0 candidates: the step is left out)."""
    if verify < 0:
        raise ConfigError(f"plan.verify must be >= 0 candidates, got {verify}")
    _check(verify_confidence, 0.5, 1.0, "plan.verify_confidence", high_open=True)
    _check(calibrate_seconds, 0.0, MAX_CALIBRATE_SECONDS, "plan.calibrate_seconds")
    _check(refine_seconds, 0.0, float("inf"), "plan.refine_seconds", high_open=True)
    steps: list[MeasuredStep] = []
    if calibrate_seconds > 0:
        steps.append(Calibrate(seconds=float(calibrate_seconds)))
    if verify > 0:
        rounds = verify_rounds or VERIFY_ROUNDS
        steps.append(Verify(candidates=verify, rounds=rounds, confidence=verify_confidence))
    if refine_seconds > 0:
        steps.append(Refine(seconds=float(refine_seconds), rounds=refine_rounds, confirm_rounds=refine_confirm_rounds))
    return tuple(steps)


def check_order(steps: Sequence[MeasuredStep]) -> tuple[MeasuredStep, ...]:
    """`steps` as given when each kind appears once, in ORDER; else one line saying what is wrong."""
    kinds = [s.kind for s in steps]
    if len(set(kinds)) != len(kinds) or kinds != sorted(kinds, key=ORDER.index):
        raise ConfigError(f"measured steps must be at most one of each, in the order {', '.join(ORDER)}; got {kinds}")
    return tuple(steps)


def calibrated(
    steps: Sequence[MeasuredStep],
    inventory: Inventory,
    topology: Topology,
    cost: PlanningCost,
    oracle: Oracle | None,
    seed: int,
) -> tuple[PlanningCost, CalibrationReport | None]:
    """The planning cost the search runs on: calibrated on `oracle` when a Calibrate step is listed."""
    step = next((s for s in steps if isinstance(s, Calibrate)), None)
    if step is None or oracle is None:
        return cost, None
    return calibrate(inventory, topology, cost, oracle, step.seconds, seed)


@dataclass(frozen=True)
class StageBudget:
    """plan.stage_budget: the whole plan (search and the measured steps after it) takes at most `times` x the
    search's own seconds (0: no budget; the rounds and plan.refine_seconds alone bound it). The race measures every
    contender once whatever the budget (what makes it never lose to a baseline), further rounds while the budget
    lasts; refinement gets what the race left, at most plan.refine_seconds."""

    times: float = 0.0

    def seconds(self, search_s: float) -> float | None:
        """The budget in seconds for a search of `search_s` seconds (None: no budget)."""
        return self.times * search_s if self.times > 0 else None


def _verified(
    step: Verify,
    found: SearchOutcome,
    oracle: Oracle,
    seed: int,
    out_of_time: Callable[[], bool],
    progress: Progress | None,
) -> Plan:
    """The plan the race keeps (dreamshard.measured.verify); under every assumed distribution where tables declare no
    access statistics (dreamshard.measured.robust_verify)."""
    field = contenders_for(found, step.candidates, seed)
    if found.assumptions is not None and not field.hold:  # the rounds cycle through the assumed distributions
        return verify_robust(
            found.inventory, field, oracle, found.assumptions, step.rounds, seed, step.confidence, out_of_time, progress
        )
    kept, _ = verify_candidates(
        found.inventory, field, oracle, step.rounds, seed, step.confidence, out_of_time, progress
    )
    return kept if found.assumptions is None else kept.model_copy(update={"assumptions": found.assumptions})


def after_search(
    steps: Sequence[MeasuredStep],
    found: SearchOutcome,
    oracle: Oracle | None,
    seed: int,
    progress: Progress | None = None,
    budget: StageBudget = StageBudget(),
    clock: Callable[[], float] = time.monotonic,
) -> Plan:
    """The plan after the steps that follow the search, in order (without an oracle: the search's plan), within
    `budget`. `progress` (dreamshard.values.progress) gets a line per measurement, prefixed with its step:
    "verify: round 2/5: measuring heuristic:dim_greedy", "verify: round 2/5: 4 left: ...", "refine: proposal 4 (move
    t 0->2) kept; 1 kept, 3/8 s". The verification record states the seconds: the search, the whole plan, the
    budget and what refinement was given."""
    plan = found.plan
    if oracle is None:
        return plan
    start = clock()
    allowed = budget.seconds(found.search_s)
    left = (lambda: math.inf) if allowed is None else (lambda: allowed - found.search_s - (clock() - start))
    refine_s: float | None = None
    for step in steps:
        if isinstance(step, Verify):
            plan = _verified(step, found, oracle, seed, lambda: left() <= 0, prefixed(progress, "verify: "))
        elif isinstance(step, Refine):
            refine_s = max(0.0, min(step.seconds, left()))
            if refine_s <= 0:
                if progress is not None:
                    progress("refine: skipped: the plan stage's budget is spent")
                continue
            plan = refine_plan(
                found.inventory,
                plan,
                found.cost,
                oracle,
                refine_s,
                step.rounds,
                seed,
                confirm=step.confirm_rounds,
                progress=prefixed(progress, "refine: "),
            )
    if plan.verification is None:
        return plan
    times = {
        "search_s": round(found.search_s, 3),
        "plan_s": round(found.search_s + clock() - start, 3),
        "budget_s": None if allowed is None else round(allowed, 3),
        "refine_s": None if refine_s is None else round(refine_s, 3),
    }
    return plan.model_copy(update={"verification": plan.verification.model_copy(update=times)})
