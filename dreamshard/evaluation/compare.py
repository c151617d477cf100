"""Evaluate plans on a measuring backend and compare sharders, all contenders measured interleaved.

Absolute milliseconds on a shared CPU drift; ratios within one interleaved run do not (docs/architecture/measuring.md,
"Measuring"). Plans are measured on their placement units (whole tables and column shards: dreamshard.placement.expand).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from dreamshard.documents import read_structured, validate_mapping
from dreamshard.errors import (
    BrokenConstraintError,
    InputFileError,
    UnknownSharderError,
)
from dreamshard.evaluation.bounds import (  # re-exported: callers import them from here too
    LowerBound,
    measure_lower_bound,
)
from dreamshard.evaluation.contenders import add_given, plan_contenders
from dreamshard.evaluation.interleave import (  # re-exported: callers import them from here too
    check_plan_for as check_plan_for,
)
from dreamshard.evaluation.interleave import evaluate_plan as evaluate_plan
from dreamshard.evaluation.interleave import (
    measure_interleaved,
    median_costs,
)
from dreamshard.evaluation.limit import Gap, Limit, contender_gap, fused_compute, plan_limit
from dreamshard.integrations.torchrec_carried import carried_report
from dreamshard.profiling.world import charged_world, world_proxy
from dreamshard.sharders import BASELINE_SHARDERS, sharder_names  # BASELINE_SHARDERS: re-exported
from dreamshard.sharders.torchrec_parameters import relaxed_for
from dreamshard.values import (
    BackendInfo,
    ChargedWorld,
    Inventory,
    Measurement,
    Plan,
    Topology,
    renamed_fields,
    utcnow,
)

if TYPE_CHECKING:  # pragma: no cover
    from dreamshard.profiling import Oracle
    from dreamshard.profiling.base import Clock
    from dreamshard.profiling.corpus import DeviceCorpus

Progress = Callable[[str], None]


class SharderResult(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    sharder: str
    plan: Plan
    overall_ms: float  # median over rounds of the measured overall cost
    samples_ms: list[float]
    spread: float  # (max - min) / median over rounds
    ratio_to_best: float = 1.0
    ratio_to_lower_bound: float = 1.0  # 0: the lower bound was not measured (the gate's own comparisons)
    plan_seconds: float = 0.0
    ratio_to_limit: float = 0.0  # overall / the limit (dreamshard.evaluation.limit); 0: no limit measured
    fused_compute_ms: float = 0.0  # median over rounds of its devices' summed compute (limit.fused_compute)
    used_devices: int = 0  # devices that hold anything


def contender_name(sharder: str, plan_id: str, twice: bool, short: bool = False) -> str:
    """A contender's name: the sharder, with its plan id when that sharder made more than one contender."""
    if not twice:
        return sharder
    return f"{sharder} (…{plan_id[-8:]})" if short else f"{sharder}.{plan_id}"


class Comparison(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    inventory_name: str
    inventory_fingerprint: str
    topology: Topology
    backend: BackendInfo
    rounds: int
    lower_bound_ms: float  # LowerBound.total_ms; 0: not measured (the gate measures none: it decides on the plans)
    max_single_ms: float
    sum_single_ms: float  # sum of single-table totals (each with its own all-to-all; kept for reference)
    results: list[SharderResult]
    lb_compute_ms: float = 0.0  # LowerBound.compute_ms
    lb_comm_ms: float = 0.0  # LowerBound.comm_ms
    best: str = ""
    best_baseline: str = ""  # the fastest BASELINE_SHARDERS contender (heuristics and TorchRec's planner)
    # sharders that cannot place this inventory on this topology (e.g. a table larger than a device for a sharder
    # without column splits), with why; not contenders (the gate recomputes each before it accepts its absence)
    infeasible: dict[str, str] = {}
    # sharders whose plan breaks a table's constraint they cannot be asked to honour (TorchRec's planner and a device
    # pin or a shard count): {sharder: "table 'x' devices [3]: the plan puts it on device 0"}; never contenders
    breaks_constraints: dict[str, str] = {}
    # their plans made without those constraints (`torchrec_parameters.expressible_only`), measured as they are in
    # the same interleaved rounds: a reference beside the contenders, never a baseline the gate compares with
    broken_results: list[SharderResult] = []
    # {table: its constraints carried, not planned on} (dreamshard.integrations.torchrec_carried.carried_report)
    carried: dict[str, list[str]] = {}
    # how the contenders were timed: passes per round (each device's figure their median) and the CPU clock
    timing_passes: int = 1
    timing_clock: str = "wall"
    # the world the contenders' collectives were charged in (None: a comparison written before it was recorded)
    world: ChargedWorld | None = None
    # the limit a plan can approach, from what this run measured (None: no lower bound measured, or an older file)
    limit: Limit | None = None
    created_at: datetime = Field(default_factory=utcnow)

    @model_validator(mode="before")
    @classmethod
    def _old_names(cls, data: Any) -> Any:
        return renamed_fields(data, {"best_heuristic": "best_baseline"})  # comparisons written before the rename

    @property
    def world_proxy(self) -> str:
        """ "" when the comparison charged the world its topology was planned for, else the PROXY sentence
        (dreamshard.profiling.world.world_proxy)."""
        return world_proxy(self.topology, self.world)

    @property
    def has_lower_bound(self) -> bool:
        return self.lower_bound_ms > 0

    @property
    def reference(self) -> LowerBound:
        return LowerBound(
            max_single_ms=self.max_single_ms,
            sum_single_ms=self.sum_single_ms,
            compute_ms=self.lb_compute_ms,
            comm_ms=self.lb_comm_ms,
            total_ms=self.lower_bound_ms,
        )

    def label(self, r: SharderResult, short: bool = False) -> str:
        """How a contender is named (plan files, plots) or shown (`short`, tables): the sharder, with its plan id
        when the sharder made more than one contender (`compare --plan` of a plan by a sharder that also ran)."""
        twice = sum(1 for x in self.results if x.sharder == r.sharder) > 1
        return contender_name(r.sharder, r.plan.plan_id, twice, short)

    def is_best(self, r: SharderResult) -> bool:
        return r.overall_ms == min(x.overall_ms for x in self.results)

    def result(self, sharder: str) -> SharderResult:
        for r in self.results:
            if r.sharder == sharder:
                return r
        raise KeyError(sharder)

    def gap(self, r: SharderResult) -> Gap | None:
        """Where contender `r`'s cost above the limit's even share goes (None without a limit)."""
        if self.limit is None or r.plan.measured is None:
            return None
        return contender_gap(self.limit, r.overall_ms, r.plan.measured, r.fused_compute_ms, r.used_devices)

    def baselines(self) -> dict[str, float]:
        """Measured overall cost of every baseline contender (BASELINE_SHARDERS; the gate compares against these)."""
        return {r.sharder: r.overall_ms for r in self.results if r.sharder in BASELINE_SHARDERS}

    def summary(self) -> dict[str, Any]:
        """Small JSON for metrics files and `compare --json`: overall ms, spread and ratios per contender (field
        names as in the full comparison)."""
        return {
            "inventory_name": self.inventory_name,
            "devices": self.topology.num_devices,
            "backend": self.backend.name,
            "operator": self.backend.operator,
            "inventory_fingerprint": self.inventory_fingerprint,
            "lower_bound_ms": self.lower_bound_ms,
            "lb_compute_ms": self.lb_compute_ms,
            "lb_comm_ms": self.lb_comm_ms,
            "limit": self.limit.model_dump() if self.limit is not None else None,
            "best": self.best,
            "best_baseline": self.best_baseline,
            "world": self.world.model_dump(mode="json") if self.world is not None else None,
            "world_proxy": self.world_proxy,
            "breaks_constraints": dict(self.breaks_constraints),
            "broken_measured": {
                r.sharder: {"overall_ms": r.overall_ms, "spread": r.spread, "ratio_to_best": r.ratio_to_best}
                for r in self.broken_results
            },
            "sharders": {
                self.label(r): {
                    "overall_ms": r.overall_ms,
                    "spread": r.spread,
                    "ratio_to_best": r.ratio_to_best,
                    "ratio_to_lower_bound": r.ratio_to_lower_bound,
                    "ratio_to_limit": r.ratio_to_limit,
                    **({"gap": gap.model_dump()} if (gap := self.gap(r)) is not None else {}),
                }
                for r in self.results
            },
        }


def validate_sharders(names: Sequence[str]) -> list[str]:
    known = sharder_names()
    out: list[str] = []
    for n in names:
        n = n.strip()
        if not n:
            continue
        if n not in known:
            raise UnknownSharderError(f"unknown sharder '{n}'; choose from {', '.join(known)}")
        if n not in out:
            out.append(n)
    if not out:
        raise UnknownSharderError(f"no sharder given; choose from {', '.join(known)}")
    return out


def compare_sharders(
    inventory: Inventory,
    topology: Topology,
    sharders: Sequence[str],
    oracle: Oracle,
    rounds: int = 3,
    sharder_options: Mapping[str, Mapping[str, Any]] | None = None,
    progress: Progress | None = None,
    seed: int = 0,
    extra_plans: Sequence[Plan] = (),
    with_lower_bound: bool = True,
    corpus: DeviceCorpus | None = None,
    stop: Callable[[Sequence[tuple[Plan, Sequence[float]]]], bool] | None = None,
    timing_passes: int = 1,
    timing_clock: Clock = "wall",
) -> Comparison:
    """Plan with every sharder, then measure all plans interleaved (shuffled order each round). The lower bound
    (every table measured alone) is for reports; the gate, which decides on the plans alone, leaves it out. A
    `corpus` serves and records the lower bound's single-table timings only: the contenders are always measured
    afresh, interleaved (docs/architecture/measuring.md, "The measurement corpus"). `stop(contenders)`, asked after each
    round with every plan and its overall samples so far, ends the measuring early (`gate.sequential.stop_rule`);
    the comparison's `rounds` are the rounds measured. `timing_passes`, `timing_clock`: each contender's devices
    timed that many times per round on that clock, each device's figure their median (`Oracle.timing_as`; the
    gate's comparison: publish.timing_passes, publish.timing_clock)."""
    say = progress or (lambda _msg: None)
    plans, infeasible = plan_contenders(inventory, topology, validate_sharders(sharders), sharder_options or {}, say)
    if not plans and not extra_plans:  # nothing to measure: the first sharder's own error says why
        raise next(iter(infeasible.values()))
    broken = {name: e for name, e in infeasible.items() if isinstance(e, BrokenConstraintError)}
    add_given(inventory, topology, plans, extra_plans)
    # the sharders whose plan broke a constraint they cannot be asked, planned again without those constraints:
    # measured as they are, never contenders (a sharder that cannot place even that keeps only its breaks row)
    expressible = relaxed_for(inventory, {e.table: e.constraint for e in broken.values()}) if broken else inventory
    relaxed, _ = plan_contenders(expressible, topology, list(broken), sharder_options or {}, say)
    if with_lower_bound:
        say("measuring single-table costs")
        with oracle.corpus_as(corpus):
            lb = measure_lower_bound(inventory, topology, oracle)
    else:
        lb = LowerBound(max_single_ms=0.0, sum_single_ms=0.0, compute_ms=0.0, comm_ms=0.0, total_ms=0.0)
    gated = (timing_passes, timing_clock) != (1, "wall") and not oracle.info.is_simulated  # exact figures: as is
    timing = oracle.timing_as(timing_passes, timing_clock) if gated else contextlib.nullcontext()
    own = [inventory] * len(plans) + [expressible] * len(relaxed)
    with oracle.corpus_as(None), timing:  # fresh timings, whatever corpus the caller's oracle holds
        samples = measure_interleaved(
            inventory,
            [p for p, _ in (*plans, *relaxed)],
            oracle,
            rounds,
            seed=seed,
            progress=say,
            narrow=_narrow(plans, stop, len(relaxed)),
            inventories=own,
        )
    results = [_result(plan, secs, ms, oracle.info) for (plan, secs), ms in zip(plans, samples, strict=False)]
    broken_results = [_result(p, s, ms, oracle.info) for (p, s), ms in zip(relaxed, samples[len(plans) :], strict=True)]
    best = min(results, key=lambda r: r.overall_ms)
    baseline_results = [r for r in results if r.sharder in BASELINE_SHARDERS]
    best_b = min(baseline_results, key=lambda r: r.overall_ms) if baseline_results else best
    limit = _rate([*results, *broken_results], best, lb, topology)
    return Comparison(
        inventory_name=inventory.name,
        inventory_fingerprint=inventory.fingerprint(),
        topology=topology,
        backend=oracle.info,
        rounds=len(samples[0]),
        lower_bound_ms=lb.total_ms,
        max_single_ms=lb.max_single_ms,
        sum_single_ms=lb.sum_single_ms,
        lb_compute_ms=lb.compute_ms,
        lb_comm_ms=lb.comm_ms,
        results=results,
        best=best.sharder,
        best_baseline=best_b.sharder,
        infeasible={name: str(e) for name, e in infeasible.items() if name not in broken},
        breaks_constraints={name: f"table '{e.table}' {e.constraint}" for name, e in broken.items()},
        broken_results=broken_results,
        carried=carried_report(inventory),
        timing_passes=timing_passes if gated else 1,
        timing_clock=timing_clock if gated else "wall",
        world=_charged(topology, samples),
        limit=limit,
    )


def _charged(topology: Topology, samples: Sequence[Sequence[Measurement]]) -> ChargedWorld:
    """The world the measurements charged the plans' all-to-all in (each records its comm model)."""
    models = [m.comm_model for ms in samples for m in ms if m.comm_model is not None]
    return charged_world(topology, models[0] if models and topology.num_devices > 1 else None)


def _rate(measured: Sequence[SharderResult], best: SharderResult, lb: LowerBound, topology: Topology) -> Limit | None:
    """Each measured plan's ratios to the best contender, the lower bound and the limit; the limit made from every
    plan measured here, contenders and references alike (each is one the limit must respect)."""
    fused = [(r.sharder, r.fused_compute_ms, r.used_devices) for r in measured]
    limit = plan_limit(lb, fused, topology.num_devices) if lb.total_ms > 0 else None
    for r in measured:
        r.ratio_to_best = r.overall_ms / best.overall_ms if best.overall_ms > 0 else 1.0
        r.ratio_to_lower_bound = r.overall_ms / lb.total_ms if lb.total_ms > 0 else 0.0
        r.ratio_to_limit = r.overall_ms / limit.total_ms if limit is not None and limit.total_ms > 0 else 0.0
    return limit


def _narrow(
    plans: Sequence[tuple[Plan, float]],
    stop: Callable[[Sequence[tuple[Plan, Sequence[float]]]], bool] | None,
    extra: int = 0,
) -> Callable[[list[list[Measurement]]], Sequence[int]] | None:
    """`measure_interleaved`'s narrow for `stop`: all or none, so every contender (and the `extra` plans measured
    after them, which `stop` does not see) keeps as many rounds as the others."""
    if stop is None:
        return None
    every = range(len(plans) + extra)

    def narrow(ms: list[list[Measurement]]) -> Sequence[int]:
        contenders = [(p, [m.overall_ms for m in m_i]) for (p, _), m_i in zip(plans, ms, strict=False)]
        return [] if stop(contenders) else every

    return narrow


def _result(plan: Plan, plan_seconds: float, ms: Sequence[Measurement], info: BackendInfo) -> SharderResult:
    """One contender's result: its plan with the median measured costs, its samples and their spread."""
    costs = median_costs(ms)
    overalls = [m.overall_ms for m in ms]
    med = costs.overall_ms
    fused, used = fused_compute(ms)
    return SharderResult(
        sharder=plan.sharder,
        plan=plan.model_copy(update={"measured": costs, "measured_by": info}),
        overall_ms=med,
        samples_ms=overalls,
        spread=(max(overalls) - min(overalls)) / med if med > 0 else 0.0,
        plan_seconds=plan_seconds,
        fused_compute_ms=fused,
        used_devices=used,
    )


def load_comparison(path: str | Path) -> Comparison:
    """A comparison written by `dreamshard compare --out` or the evaluate stage (data/comparison.json)."""
    return comparison_from(read_structured(path), path)


def comparison_from(data: object, path: str | Path) -> Comparison:
    """The comparison `data` (a parsed comparison file at `path`), checked."""
    if not isinstance(data, dict) or "topology" not in data or "results" not in data:
        raise InputFileError(
            f"{path} is not a comparison (it needs the inventory fingerprint, topology, backend and every contender's "
            f"plan); write one with `dreamshard compare --plan PLAN --out FILE`"
        )
    return validate_mapping(data, Comparison, InputFileError, f"comparison {path}")
