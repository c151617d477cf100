"""The measured steps of the searching sharder, as one ordered list of typed configs (docs/architecture/learning.md,
"Measured steps").

    Calibrate  before the search: the planning cost corrected on the backend (dreamshard.measured.calibrate)
    Verify     after it: the best candidates measured, the search-only plan kept unless beaten every round
               (dreamshard.measured.verify, .robust_verify)
    Refine     then: the kept plan improved by measured moves, kept only when faster every round
               (dreamshard.measured.refine)

`measured_steps` builds the list from the plan settings (each bad value one line naming its setting); the sharder
runs `calibrated` before its search and `after_search` on what the search found (`SearchOutcome`). Each step
uses the oracle the sharder was given; none of them imports the search.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict

from dreamshard.errors import ConfigError
from dreamshard.learning.planning_cost import PlanningCost
from dreamshard.measured.calibrate import MAX_CALIBRATE_SECONDS, calibrate
from dreamshard.measured.refine import refine_plan
from dreamshard.measured.robust_verify import verify_robust
from dreamshard.measured.verify import VERIFY_ROUNDS, search_only_candidate, to_measure, verify_candidates
from dreamshard.values import AccessAssumptions, CalibrationReport, Inventory, Plan, Topology
from dreamshard.values.progress import Progress, prefixed
from dreamshard.values.search_result import Candidate, SearchResult

if TYPE_CHECKING:  # pragma: no cover
    from dreamshard.profiling.oracle import Oracle


class _Step(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Calibrate(_Step):
    """plan.calibrate_seconds: the planning cost calibrated on the backend for this long, before the search."""

    kind: Literal["calibrate"] = "calibrate"
    seconds: float


class Verify(_Step):
    """plan.verify: this many best predicted candidates (and the anchors, the best heuristic's plan) measured
    for `rounds` interleaved rounds; a re-plan's challenger duels the current plan up to `confidence`."""

    kind: Literal["verify"] = "verify"
    candidates: int
    rounds: int = VERIFY_ROUNDS
    anchors: int = 2
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
    verify_anchors: int = 2,
    verify_confidence: float = 0.95,
    calibrate_seconds: float = 0.0,
    refine_seconds: float = 0.0,
    refine_rounds: int = 3,
    refine_confirm_rounds: int = 3,
) -> tuple[MeasuredStep, ...]:
    """The steps the plan settings ask for, in order (0 seconds or 0 candidates: the step is left out)."""
    if verify < 0:
        raise ConfigError(f"plan.verify must be >= 0 candidates, got {verify}")
    if verify_anchors < 0:
        raise ConfigError(f"plan.verify_anchors must be >= 0 candidates, got {verify_anchors}")
    _check(verify_confidence, 0.5, 1.0, "plan.verify_confidence", high_open=True)
    _check(calibrate_seconds, 0.0, MAX_CALIBRATE_SECONDS, "plan.calibrate_seconds")
    _check(refine_seconds, 0.0, float("inf"), "plan.refine_seconds", high_open=True)
    steps: list[MeasuredStep] = []
    if calibrate_seconds > 0:
        steps.append(Calibrate(seconds=float(calibrate_seconds)))
    if verify > 0:
        rounds = verify_rounds or VERIFY_ROUNDS
        steps.append(Verify(candidates=verify, rounds=rounds, anchors=verify_anchors, confidence=verify_confidence))
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
class SearchOutcome:
    """What the search found, for the steps after it: the inventory, its topology, the scored candidates, the
    planning cost, the plan of the best candidate (`plan`), how to make the plan of any other (`plan_of`), and
    what it assumed about missing access statistics."""

    inventory: Inventory
    topology: Topology
    searched: SearchResult
    cost: PlanningCost
    plan: Plan
    plan_of: Callable[[Candidate], Plan]
    assumptions: AccessAssumptions | None = None


def _verified(step: Verify, found: SearchOutcome, oracle: Oracle, seed: int, progress: Progress | None = None) -> Plan:
    """The plan verification keeps (dreamshard.measured.verify): the search-only plan unless another candidate
    was faster in every round; under every assumed distribution where tables declare no access statistics."""
    top, mine = to_measure(found.searched.candidates, step.candidates, step.anchors)
    plans = [found.plan_of(c) for c in top]
    search_only = top.index(search_only_candidate(found.searched.candidates))  # the default (or the duel's)
    if found.assumptions is not None and mine is None:  # measured under every assumed distribution
        return verify_robust(
            found.inventory,
            top,
            plans,
            oracle,
            found.assumptions,
            step.rounds,
            seed,
            search_only=search_only,
            progress=progress,
        )
    kept, _ = verify_candidates(
        found.inventory,
        found.topology,
        top,
        plans,
        oracle,
        rounds=step.rounds,
        seed=seed,
        hold=step.confidence if mine is not None else None,
        search_only=search_only,
        progress=progress,
    )
    return kept if found.assumptions is None else kept.model_copy(update={"assumptions": found.assumptions})


def after_search(
    steps: Sequence[MeasuredStep],
    found: SearchOutcome,
    oracle: Oracle | None,
    seed: int,
    progress: Progress | None = None,
) -> Plan:
    """The plan after the steps that follow the search, in order (without an oracle: the search's plan). `progress`
    (dreamshard.values.progress) gets a line per measurement, prefixed with its step: "verify: round 2/3: measuring
    dreamshard", "refine: proposal 4 (move t 0->2) kept; 1 kept, 31/120 s"."""
    plan = found.plan
    if oracle is None:
        return plan
    for step in steps:
        if isinstance(step, Verify):
            plan = _verified(step, found, oracle, seed, prefixed(progress, "verify: "))
        elif isinstance(step, Refine):
            plan = refine_plan(
                found.inventory,
                plan,
                found.cost,
                oracle,
                step.seconds,
                step.rounds,
                seed,
                confirm=step.confirm_rounds,
                progress=prefixed(progress, "refine: "),
            )
    return plan
