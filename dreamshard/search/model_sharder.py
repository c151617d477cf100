"""The common part of the learned sharders (docs/architecture/learning.md, "Learning"): the model, the planning cost
for a topology, the layout of units, the search's plan and its report. The sharders themselves (`dreamshard`,
`dreamshard_lpt`, `dreamshard_rl`) are dreamshard.search.sharders; each says how it places the units (`_place`)
and `dreamshard` what it measures (`measured`)."""

from __future__ import annotations

import abc
import contextlib
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from dreamshard.config.learning import SearchConfig
from dreamshard.errors import ConfigError, InfeasiblePlacementError
from dreamshard.inventory.unknown import unknown_tables
from dreamshard.learning.model_store import LoadedModel, load_model
from dreamshard.learning.planning_cost import CollectiveSource, PlanningCost, comm_for
from dreamshard.measured.steps import (
    SearchOutcome,
)
from dreamshard.placement.expand import fold_units
from dreamshard.placement.layout import Layout, layout_kernels
from dreamshard.placement.make_plan import make_plan
from dreamshard.placement.spread import spread_shards
from dreamshard.profiling.world import charged_world
from dreamshard.search.layout_prior import LayoutPrior, layout_reasons, prior_for
from dreamshard.search.report import ShardReport
from dreamshard.search.sharding_types import choose_types
from dreamshard.search.splits import NO_PRIOR, learned_layout, whole_layout
from dreamshard.search.unknown_stats import robust_rerank
from dreamshard.sharders.base import Sharder
from dreamshard.values import CalibrationReport, Inventory, Plan, Topology
from dreamshard.values.search_result import Candidate, SearchResult

if TYPE_CHECKING:  # pragma: no cover
    pass


class ModelOptions(TypedDict, total=False):
    """The options every learned sharder takes (`ModelSharder.__init__`); a subclass passes them on typed
    (`**common: Unpack[ModelOptions]`) instead of repeating them."""

    model_dir: Path | None
    samples: int | None
    seed: int
    risk: float | None
    search: SearchConfig | None
    column_splits: str


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
        the gate measure with them) or else the model card's fits / the figures the topology's world declares."""
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
        kernels, factors = layout_kernels(units)  # the tables cached from host memory (a memory tier)
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
            kernels=kernels,
            cache_load_factors=factors,
        )
        return plan.model_copy(
            update={
                "out_of_range": tuple(self.out_of_range(inventory, topology)),
                "comm_fits": cost.fits(),
                "world": charged_world(topology, cost.comm),
            }
        )

    def shard(self, inventory: Inventory, topology: Topology) -> Plan:
        return self.shard_with_report(inventory, topology).plan

    def shard_with_report(self, inventory: Inventory, topology: Topology) -> ShardReport:
        """The plan, with the model card, the search's candidates (`dreamshard`) and the warnings to show."""
        t0 = time.perf_counter()
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
        recorded: dict[str, object] = {"calibration": calibration, "layouts": layout_reasons(layout, topology, prior)}
        if assumptions is not None:  # what it assumed about missing access statistics
            recorded["assumptions"] = assumptions
        plan = self.plan_from(inventory, units, topology, placement, cost).model_copy(update=recorded)
        if searched is not None:  # the measured steps (DreamShardSharder): on the plans of the search's candidates
            plan_of = partial(self._candidate_plan, inventory, units, topology, cost, recorded)
            # the search's own seconds (a calibration before it is a measured step: not counted)
            search_s = time.perf_counter() - t0 - (calibration.seconds if calibration is not None else 0.0)
            found = SearchOutcome(inventory, topology, searched, cost, plan, plan_of, assumptions, max(0.0, search_s))
            plan = self.measured(found)
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

    def _candidate_plan(
        self,
        inventory: Inventory,
        units: Inventory,
        topology: Topology,
        cost: PlanningCost,
        recorded: Mapping[str, object],
        candidate: Candidate,
    ) -> Plan:
        """The plan of one of the search's candidates, with what the plan records of its layout and calibration."""
        plan = self.plan_from(inventory, candidate.units or units, topology, candidate.placement, cost)
        return plan.model_copy(update=dict(recorded))

    def measured(self, found: SearchOutcome) -> Plan:
        """The plan after the measured steps (none here: the search's plan; DreamShardSharder runs its own)."""
        return found.plan

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
