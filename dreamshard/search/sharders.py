"""The learned sharders behind the common Sharder interface (docs/architecture/learning.md, "Learning"; registered
through the `dreamshard.sharders` entry-point group, see pyproject.toml):

- `dreamshard` (the default): search on the learned cost (dreamshard.search.candidates), optionally with measured
  steps on hardware: calibrate, verify, refine (dreamshard.measured.steps);
- `dreamshard_lpt`: LPT on the cost net's predicted single-table costs;
- `dreamshard_rl`: the RL policy alone (greedy argmax, or the best of `samples` sampled rollouts).

All three load the model in `model_dir` (None: the packaged one), record its version and the mean predicted costs
in the plan, list every input outside the model's training ranges in `Plan.out_of_range`, and split tables into
column shards where needed or predicted cheaper (dreamshard.search.splits; `column_splits="never"`: table-wise
only). `shard_with_report()` returns a `ShardReport` (the plan, the model card, the search's scored candidates,
the warnings); nothing about a call is kept on the sharder.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from dreamshard.errors import ConfigError, InfeasiblePlacementError, ModelError
from dreamshard.learning.planning_cost import PlanningCost
from dreamshard.measured.calibrate import CalibratedCost
from dreamshard.measured.steps import (
    MeasuredStep,
    SearchOutcome,
    StageBudget,
    Verify,
    after_search,
    calibrated,
    check_order,
    measured_steps,
)
from dreamshard.placement.diff import move_rate_ms_per_mb
from dreamshard.search.candidates import search
from dreamshard.search.constrained_policy import constrained_plan
from dreamshard.search.moves import DEFAULT_HORIZON_STEPS, MovePolicy, current_seed
from dreamshard.search.splits import pack_units
from dreamshard.search.unknown_stats import DEFAULT_UNKNOWN_SKEWS, check_skews
from dreamshard.values import CalibrationReport, Inventory, Plan, Topology
from dreamshard.values.progress import Progress
from dreamshard.values.search_result import CURRENT, UNCALIBRATED, Candidate, SearchResult

if TYPE_CHECKING:  # pragma: no cover
    from typing_extensions import Unpack  # typing's own from Python 3.11; the package supports 3.10

    from dreamshard.profiling.oracle import Oracle


from dreamshard.search.model_sharder import ModelOptions, ModelSharder


class DreamShardSharder(ModelSharder):
    """Search on the learned cost (the default learned sharder); `shard_with_report` returns the scored candidates.

    Its parts: the layout (which units are placed), the planning cost, the candidate sources (`search.candidates`,
    proposers typed as `CandidateSource`), and the measured steps on the `oracle`, one ordered list of typed
    configs (`steps`, or built from the flat options `calibrate_seconds`, `verify=K`, `refine_seconds`:
    dreamshard.measured.steps): calibrate before the search; verify (the race: the search-only plan, the K best
    predicted, every heuristic's own plan and TorchRec's measured, the best measured kept) and refine after it,
    within `stage_budget` x the search's own time. `incumbent` (a re-plan): moves as a cost
    (dreamshard.search.moves); its own candidate leads verification."""

    name = "dreamshard"
    oracle: Oracle | None
    options = ModelSharder.options | {
        "verify",
        "verify_rounds",
        "verify_confidence",
        "oracle",
        "calibrate_seconds",
        "refine_seconds",
        "refine_rounds",
        "refine_confirm_rounds",
        "stage_budget",
        "steps",
        "incumbent",
        "unknown_skews",
        "move_horizon_steps",
        "max_move_fraction",
        "progress",
    }

    def __init__(
        self,
        verify: int = 0,
        verify_rounds: int | None = None,
        oracle: Oracle | None = None,
        incumbent: Plan | None = None,
        verify_confidence: float = 0.95,
        calibrate_seconds: float = 0.0,
        refine_seconds: float = 0.0,
        refine_rounds: int = 3,
        refine_confirm_rounds: int = 3,
        stage_budget: float = 0.0,
        steps: Sequence[MeasuredStep] | None = None,
        unknown_skews: Sequence[float] = DEFAULT_UNKNOWN_SKEWS,
        move_horizon_steps: int = DEFAULT_HORIZON_STEPS,
        max_move_fraction: float = 1.0,
        progress: Progress | None = None,
        **common: Unpack[ModelOptions],
    ) -> None:
        super().__init__(**common)
        self.unknown_skews = check_skews(unknown_skews)
        flat = measured_steps(
            verify, verify_rounds, verify_confidence, calibrate_seconds, refine_seconds, refine_rounds,
            refine_confirm_rounds,
        )  # fmt: skip
        if steps is not None and flat:
            raise ConfigError("give the measured steps as `steps` or as the plan.verify / calibrate / refine settings")
        #: calibrate, verify, refine: each run on the `oracle`, in this order (dreamshard.measured.steps)
        self.steps = check_order(steps) if steps is not None else flat
        self.incumbent = incumbent  # the plan now current: adapted to the inventory, it is the `current` candidate
        rate = move_rate_ms_per_mb(incumbent) if incumbent is not None else 1.0
        self.moves = MovePolicy(int(move_horizon_steps), float(max_move_fraction), rate)
        if stage_budget < 0:
            raise ConfigError(f"plan.stage_budget must be >= 0 (x the search's time; 0: none), got {stage_budget}")
        self.budget = StageBudget(float(stage_budget))
        self.oracle = oracle
        self.progress = progress  # a line per measurement of the steps after the search (dreamshard.values.progress)

    @property
    def verifies(self) -> bool:
        """Whether a Verify step is listed (the search then adds the uncalibrated seed for it to measure)."""
        return any(isinstance(s, Verify) for s in self.steps)

    def move_penalties(self, candidates: Sequence[Candidate], inventory: Inventory) -> list[float]:
        """A re-plan: each candidate's move from the incumbent, ms per step (dreamshard.search.moves)."""
        return self.moves.penalties(candidates, self.incumbent, inventory) if self.incumbent is not None else []

    def cost_for(self, inventory: Inventory, topology: Topology) -> tuple[PlanningCost, CalibrationReport | None]:
        """With a Calibrate step and an `oracle`: the planning cost calibrated on the oracle's backend for this
        inventory (dreamshard.measured.steps), which search, verification and refinement then use."""
        cost = self.planning_cost(topology)
        return calibrated(self.steps, inventory, topology, cost, self.oracle, self.config.seed)

    def measured(self, found: SearchOutcome) -> Plan:
        """The plan after the measured steps that follow the search, in order (dreamshard.measured.steps)."""
        found = replace(found, torchrec_max_tables=self.config.torchrec_max_tables)
        return after_search(self.steps, found, self.oracle, self.config.seed, self.progress, self.budget)

    def _place(
        self, inventory: Inventory, topology: Topology, cost: PlanningCost, fixed: Mapping[str, int]
    ) -> tuple[dict[str, int], SearchResult | None]:
        adapted, why = current_seed(self.incumbent, inventory, topology, cost, fixed)
        seeds = {CURRENT: adapted} if adapted is not None else {}
        seeds |= self._uncalibrated_seed(inventory, topology, cost, seeds, fixed)
        result = search(inventory, topology, cost, self.model.policy, self.config, seeds=seeds, fixed=fixed)
        if why:
            result = replace(result, failed={**result.failed, CURRENT: why})
        if self.incumbent is not None:  # moves as a cost (dreamshard.search.moves)
            result = self.moves.ranked(result, self.incumbent, inventory)
        return result.best.placement, result

    def _uncalibrated_seed(
        self,
        inventory: Inventory,
        topology: Topology,
        cost: PlanningCost,
        seeds: Mapping[str, Mapping[str, int]],
        fixed: Mapping[str, int],
    ) -> dict[str, dict[str, int]]:
        """Verifying on a calibrated cost: the best placement of the search on the cost before calibration (the
        UNCALIBRATED seed). Verification measures it as the search-only plan, the default: calibration is a measured
        step like the others, so the plan it leads to is kept only when it wins by the margin."""
        if not self.verifies or not isinstance(cost, CalibratedCost):
            return {}
        before = search(inventory, topology, cost.uncalibrated, self.model.policy, self.config, seeds, fixed)
        return {UNCALIBRATED: dict(before.best.placement)}


class PolicySharder(ModelSharder):
    """The RL policy alone: greedy argmax, or the best predicted of it and `samples` sampled rollouts (where the
    policy cannot pack a tight layout, the packing heuristics' placement: `search.splits.pack_units`)."""

    name = "dreamshard_rl"

    def _place(
        self, inventory: Inventory, topology: Topology, cost: PlanningCost, fixed: Mapping[str, int]
    ) -> tuple[dict[str, int], SearchResult | None]:
        if self.model.policy is None:
            raise ModelError(f"model {self.model.card.version} has no policy: train one with `dreamshard train`")
        policy, config = self.model.policy, self.config
        try:
            placement = constrained_plan(
                policy, cost, inventory.tables, topology, fixed, samples=config.samples, seed=config.seed
            )
        except InfeasiblePlacementError:  # a layout too tight for the policy's device choices: the packers' placement
            placement = pack_units(inventory, topology, cost, fixed)
        return placement, None


class LearnedGreedySharder(ModelSharder):
    """`dreamshard_lpt`: memory-aware longest-first greedy on the cost net's predicted single-table costs (where it
    cannot pack a tight layout, the packing heuristics' placement: `search.splits.pack_units`)."""

    name = "dreamshard_lpt"

    def _place(
        self, inventory: Inventory, topology: Topology, cost: PlanningCost, fixed: Mapping[str, int]
    ) -> tuple[dict[str, int], SearchResult | None]:
        return pack_units(inventory, topology, cost, fixed), None
