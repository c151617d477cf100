"""The learned sharders behind the common Sharder interface (docs/architecture/learning.md, "Learning"; registered
through the `dreamshard.sharders` entry-point group, see pyproject.toml):

- `dreamshard` (the default): search on the learned cost (dreamshard.search.candidates), optionally verified on
  hardware (dreamshard.measured.verify);
- `dreamshard_lpt`: LPT on the cost net's predicted single-table costs;
- `dreamshard_rl`: the RL policy alone (greedy argmax, or the best of `samples` sampled rollouts).

All three load the model in `model_dir` (None: the packaged one), record its version and the mean predicted costs
in the plan, list every input outside the model's training ranges in `Plan.out_of_range`, and split tables into
column shards where needed or predicted cheaper (dreamshard.search.splits; `column_splits="never"`: table-wise
only). `shard_with_report()` returns a `ShardReport` (the plan, the model card, the search's scored candidates,
the warnings); nothing about a call is kept on the sharder.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dreamshard.config.learning import VERIFY_ANCHORS, SearchConfig
from dreamshard.errors import ConfigError, InfeasiblePlacementError, ModelError
from dreamshard.inventory.unknown import unknown_tables
from dreamshard.learning.model_store import LoadedModel, load_model
from dreamshard.learning.planning_cost import CollectiveSource, PlanningCost, comm_for
from dreamshard.measured.calibrate import MAX_CALIBRATE_SECONDS, CalibratedCost, calibrate
from dreamshard.measured.robust_verify import verify_robust
from dreamshard.measured.verify import VERIFY_ROUNDS, search_only_candidate, to_measure, verify_candidates
from dreamshard.placement.diff import move_rate_ms_per_mb
from dreamshard.placement.expand import fold_units
from dreamshard.placement.layout import Layout
from dreamshard.placement.spread import spread_shards
from dreamshard.search.candidates import search
from dreamshard.search.constrained_policy import constrained_plan
from dreamshard.search.layout_prior import LayoutPrior, layout_reasons, prior_for
from dreamshard.search.moves import DEFAULT_HORIZON_STEPS, MovePolicy, current_seed
from dreamshard.search.report import ShardReport
from dreamshard.search.sharding_types import choose_types
from dreamshard.search.splits import NO_PRIOR, learned_layout, pack_units, whole_layout
from dreamshard.search.unknown_stats import DEFAULT_UNKNOWN_SKEWS, check_skews, robust_rerank
from dreamshard.sharders.base import Sharder, make_plan
from dreamshard.values import AccessAssumptions, CalibrationReport, Inventory, Plan, Topology
from dreamshard.values.search_result import CURRENT, UNCALIBRATED, Candidate, SearchResult

if TYPE_CHECKING:  # pragma: no cover
    from dreamshard.profiling.oracle import Oracle


class ModelSharder(Sharder):
    """Common part of the learned sharders: the model, the planning cost for a topology, the plan."""

    family = "learned"
    options = frozenset({"model_dir", "samples", "seed", "risk", "search", "column_splits"})
    #: the backend that measures this sharder's plans (DreamShardSharder's `oracle`): planning costs its collectives
    oracle: CollectiveSource | None = None
    #: Zipf exponents planned for where tables declare no access statistics (DreamShardSharder's option)
    unknown_skews: tuple[float, ...] = ()

    def __init__(
        self,
        model_dir: Path | None = None,
        samples: int | None = None,
        seed: int = 0,
        risk: float | None = None,
        search: SearchConfig | None = None,
        column_splits: str = "auto",
    ) -> None:
        if column_splits not in ("auto", "never"):
            raise ConfigError(f"column_splits must be 'auto' or 'never', got '{column_splits}'")
        self.column_splits = column_splits
        self.model_dir = Path(model_dir) if model_dir is not None else None
        cfg = search or SearchConfig()
        update: dict[str, Any] = {"seed": seed}
        if samples is not None:
            update["samples"] = int(samples)
        if risk is not None:
            update["risk"] = float(risk)
        self.config = SearchConfig.model_validate({**cfg.model_dump(), **update})
        self._model: LoadedModel | None = None

    @property
    def model(self) -> LoadedModel:
        """The model, loaded on first use (a cache: the same files give the same model)."""
        if self._model is None:
            self._model = load_model(self.model_dir, require_policy=False)
        return self._model

    def planning_cost(self, topology: Topology) -> PlanningCost:
        """The cost search minimises on `topology`: the ensemble's compute, and the collectives of the backend
        that will judge the plan (the `oracle`'s fits, when this sharder has one: verification, refinement and
        the gate measure with them) or else the model card's fits / the topology's interconnect profile."""
        if self.oracle is not None:
            return PlanningCost(self.model.cost_net, topology, None, self.config.risk, source=self.oracle)
        comm = comm_for(topology, self.model.card.comm_models)
        return PlanningCost(self.model.cost_net, topology, comm, self.config.risk)

    def cost_for(self, inventory: Inventory, topology: Topology) -> tuple[PlanningCost, CalibrationReport | None]:
        """The planning cost `inventory` is searched on (`DreamShardSharder` may calibrate it first)."""
        return self.planning_cost(topology), None

    def move_penalties(self, candidates: Sequence[Candidate], inventory: Inventory) -> list[float]:
        """What moving to each candidate costs per step (none here: only a re-plan has a plan to move from)."""
        return []

    def out_of_range(self, inventory: Inventory, topology: Topology) -> list[str]:
        """Inputs outside the card's training ranges: table features, devices, batch size, device type."""
        return self.model.card.out_of_range(list(inventory.tables), topology)

    def layout(
        self, inventory: Inventory, topology: Topology, cost: PlanningCost, prior: LayoutPrior = NO_PRIOR
    ) -> Layout:
        """What gets placed: the inventory's tables, cut where they cannot stay whole (larger than a device, or
        constrained: dreamshard.search.splits; the `prior`'s choice first: dreamshard.search.layout_prior), and split
        into column shards where that pays; its fixed units (row blocks, replicas) have their devices.
        `column_splits="never"`: every table whole."""
        if self.column_splits == "never":
            return whole_layout(inventory)
        return learned_layout(inventory, topology, cost, prior=prior)

    def plan_from(
        self,
        inventory: Inventory,
        units: Inventory,
        topology: Topology,
        unit_placement: dict[str, int],
        cost: PlanningCost,
    ) -> Plan:
        """The plan of a placement of `units` (whole tables and column shards of `inventory`); shards of a
        `min_shards` table a search put together are moved apart first (placement/spread.py)."""
        unit_placement = spread_shards(units, unit_placement, topology)
        folded = fold_units(inventory, unit_placement)
        plan = make_plan(
            inventory,
            topology,
            sharder=self.name,
            placement=folded.placement,
            column_shards=folded.column_shards,
            row_shards=folded.row_shards,
            data_parallel=folded.data_parallel,
            predicted=cost.predict(list(units.tables), unit_placement),
            model_version=self.model.card.version,
        )
        return plan.model_copy(
            update={"out_of_range": tuple(self.out_of_range(inventory, topology)), "comm_fits": cost.fits()}
        )

    def shard(self, inventory: Inventory, topology: Topology) -> Plan:
        return self.shard_with_report(inventory, topology).plan

    def shard_with_report(self, inventory: Inventory, topology: Topology) -> ShardReport:
        """The plan, with the model card, the search's candidates (`dreamshard`) and the warnings to show."""
        cost, calibration = self.cost_for(inventory, topology)
        with self._named_infeasible():
            prior = prior_for(inventory, topology, self.model.card.device_types, calibration)
            layout = self.layout(inventory, topology, cost, prior)
            units = layout.units
            placement, searched = self._place(units, topology, cost, layout.fixed)
        typed = (
            choose_types(inventory, units, placement, topology, cost, self.config.types)
            if searched is not None
            else None
        )
        if typed is not None and searched is not None:  # tables converted to other sharding types
            best = Candidate(
                source=f"{searched.best.source}+types ({'; '.join(typed.changes)})",
                placement=typed.placement,
                predicted_ms=typed.predicted_ms,
                units=typed.units,
            )
            searched = replace(searched, best=best, candidates=[best, *searched.candidates])
            units, placement = typed.units, typed.placement
        assumptions = None
        if searched is not None and len(self.unknown_skews) > 1 and unknown_tables(layout.units):
            extra = self.move_penalties(searched.candidates, inventory)
            reranked, assumptions = robust_rerank(
                searched.candidates, layout.units, topology, cost, self.unknown_skews, extra
            )
            searched = replace(searched, best=reranked[0], candidates=reranked)
            units, placement = searched.best.units or layout.units, searched.best.placement
        plan = self._finish(inventory, units, topology, placement, searched, cost, assumptions)
        plan = plan.model_copy(update={"calibration": calibration, "layouts": layout_reasons(layout, topology, prior)})
        return ShardReport(plan=plan, card=self.model.card, search=searched, cost=cost)

    @contextlib.contextmanager
    def _named_infeasible(self) -> Iterator[None]:
        """An InfeasiblePlacementError names this sharder, the one the user asked for, never the candidate or
        inner heuristic that failed last (`sharder round_robin`, `sharder lpt`); other hints are kept."""
        try:
            yield
        except InfeasiblePlacementError as e:
            inner = e.hint.startswith(("sharder ", "torchrec planner")) or not e.hint
            hint = f"sharder {self.name}" + ("" if inner else f": {e.hint}")
            raise InfeasiblePlacementError(e.table, e.table_gb, e.largest_free_gb, hint) from None

    def _finish(
        self,
        inventory: Inventory,
        units: Inventory,
        topology: Topology,
        unit_placement: dict[str, int],
        searched: SearchResult | None,
        cost: PlanningCost,
        assumptions: AccessAssumptions | None = None,
    ) -> Plan:
        """The plan of the placement `_place` chose (a subclass may check it further), with what it assumed about
        missing access statistics."""
        plan = self.plan_from(inventory, units, topology, unit_placement, cost)
        return plan.model_copy(update={"assumptions": assumptions}) if assumptions is not None else plan

    def place(self, inventory: Inventory, topology: Topology) -> dict[str, int]:
        """Table-wise placement: every table whole, no column splits (shard() may split)."""
        with self._named_infeasible():
            placement, _ = self._place(inventory, topology, self.planning_cost(topology), {})
        return placement

    @abc.abstractmethod
    def _place(
        self, inventory: Inventory, topology: Topology, cost: PlanningCost, fixed: Mapping[str, int]
    ) -> tuple[dict[str, int], SearchResult | None]:
        """The placement of the units of `inventory` under `cost` (the planning cost for `topology`), the `fixed`
        ones on their devices and the others on devices their constraints allow, and the search that found it if
        any."""


class DreamShardSharder(ModelSharder):
    """Search on the learned cost (the default learned sharder); `shard_with_report` returns the scored candidates.

    `calibrate_seconds` (with an `oracle`): the cost model calibrated first (dreamshard.measured.calibrate).
    `verify=K`: the K best predicted, the anchors and the best heuristic's plan measured on the oracle
    (dreamshard.measured.verify); the search-only plan is kept unless another wins every round by the margin.
    `incumbent` (a re-plan): moves as a cost (dreamshard.search.moves); its own candidate leads verification."""

    name = "dreamshard"
    oracle: Oracle | None
    options = ModelSharder.options | {
        "verify",
        "verify_rounds",
        "verify_anchors",
        "verify_confidence",
        "oracle",
        "calibrate_seconds",
        "incumbent",
        "unknown_skews",
        "move_horizon_steps",
        "max_move_fraction",
    }

    def __init__(
        self,
        verify: int = 0,
        verify_rounds: int | None = None,
        oracle: Oracle | None = None,
        verify_anchors: int = VERIFY_ANCHORS,
        incumbent: Plan | None = None,
        verify_confidence: float = 0.95,
        calibrate_seconds: float = 0.0,
        unknown_skews: Sequence[float] = DEFAULT_UNKNOWN_SKEWS,
        move_horizon_steps: int = DEFAULT_HORIZON_STEPS,
        max_move_fraction: float = 1.0,
        model_dir: Path | None = None,
        samples: int | None = None,
        seed: int = 0,
        risk: float | None = None,
        search: SearchConfig | None = None,
        column_splits: str = "auto",
    ) -> None:
        super().__init__(model_dir, samples, seed, risk, search, column_splits)
        self.unknown_skews = check_skews(unknown_skews)
        if not 0.0 <= calibrate_seconds <= MAX_CALIBRATE_SECONDS:
            raise ConfigError(f"calibrate_seconds must be in [0, {MAX_CALIBRATE_SECONDS:g}], got {calibrate_seconds}")
        self.calibrate_seconds = float(calibrate_seconds)
        if not 0.5 <= verify_confidence < 1.0:
            raise ConfigError(f"verify_confidence must be in [0.5, 1), got {verify_confidence}")
        self.verify_confidence = float(verify_confidence)
        self.incumbent = incumbent  # the plan now current: adapted to the inventory, it is the `current` candidate
        rate = move_rate_ms_per_mb(incumbent) if incumbent is not None else 1.0
        self.moves = MovePolicy(int(move_horizon_steps), float(max_move_fraction), rate)
        if verify < 0:
            raise ConfigError(f"plan.verify must be >= 0 candidates, got {verify}")
        if verify_anchors < 0:
            raise ConfigError(f"plan.verify_anchors must be >= 0 candidates, got {verify_anchors}")
        self.verify = int(verify)
        self.verify_rounds = verify_rounds
        self.verify_anchors = int(verify_anchors)
        self.oracle = oracle

    def move_penalties(self, candidates: Sequence[Candidate], inventory: Inventory) -> list[float]:
        """A re-plan: each candidate's move from the incumbent, ms per step (dreamshard.search.moves)."""
        return self.moves.penalties(candidates, self.incumbent, inventory) if self.incumbent is not None else []

    def cost_for(self, inventory: Inventory, topology: Topology) -> tuple[PlanningCost, CalibrationReport | None]:
        """With `calibrate_seconds` and an `oracle`: the planning cost calibrated on the oracle's backend for this
        inventory (dreamshard.measured.calibrate), which search, verification and refinement then use."""
        cost = self.planning_cost(topology)
        if self.calibrate_seconds <= 0 or self.oracle is None:
            return cost, None
        calibrated, report = calibrate(inventory, topology, cost, self.oracle, self.calibrate_seconds, self.config.seed)
        return calibrated, report

    def _finish(
        self,
        inventory: Inventory,
        units: Inventory,
        topology: Topology,
        unit_placement: dict[str, int],
        searched: SearchResult | None,
        cost: PlanningCost,
        assumptions: AccessAssumptions | None = None,
    ) -> Plan:
        if self.verify <= 0 or self.oracle is None or searched is None:
            return super()._finish(inventory, units, topology, unit_placement, searched, cost, assumptions)
        top, mine = to_measure(searched.candidates, self.verify, self.verify_anchors)
        plans = [self.plan_from(inventory, c.units or units, topology, c.placement, cost) for c in top]
        rounds = self.verify_rounds or VERIFY_ROUNDS
        search_only = top.index(search_only_candidate(searched.candidates))  # the default (or the duel's)
        if assumptions is not None and mine is None:  # measured under every assumed distribution
            return verify_robust(
                inventory, top, plans, self.oracle, assumptions, rounds, self.config.seed, search_only=search_only
            )
        kept, _ = verify_candidates(
            inventory,
            topology,
            top,
            plans,
            self.oracle,
            rounds=rounds,
            seed=self.config.seed,
            hold=self.verify_confidence if mine is not None else None,
            search_only=search_only,
        )
        return kept if assumptions is None else kept.model_copy(update={"assumptions": assumptions})

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
        if self.verify <= 0 or not isinstance(cost, CalibratedCost):
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
