"""Evaluate plans on a measuring backend and compare sharders, all contenders measured interleaved.

Absolute milliseconds on a shared CPU drift; ratios within one interleaved run do not (DESIGN.md section 7).
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from dreamshard.memory import check_placement
from dreamshard.sharders import HEURISTICS, get_sharder, sharder_names
from dreamshard.errors import UnknownSharderError
from dreamshard.types import BackendInfo, Costs, DeviceCost, Inventory, Measurement, Plan, Topology, utcnow

if TYPE_CHECKING:  # pragma: no cover
    from dreamshard.profiling import Oracle

Progress = Callable[[str], None]


class SharderResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    sharder: str
    plan: Plan
    overall_ms: float  # median over rounds of the measured overall cost
    samples_ms: list[float]
    spread: float  # (max - min) / median over rounds
    ratio_to_best: float = 1.0
    ratio_to_lower_bound: float = 1.0
    plan_seconds: float = 0.0


class Comparison(BaseModel):
    model_config = ConfigDict(extra="forbid")

    inventory_name: str
    inventory_fingerprint: str
    topology: Topology
    backend: BackendInfo
    rounds: int
    lower_bound_ms: float
    max_single_ms: float
    sum_single_ms: float
    results: list[SharderResult]
    best: str = ""
    best_heuristic: str = ""
    created_at: datetime = Field(default_factory=utcnow)

    def result(self, sharder: str) -> SharderResult:
        for r in self.results:
            if r.sharder == sharder:
                return r
        raise KeyError(sharder)

    def baselines(self) -> dict[str, float]:
        """Measured overall cost of every heuristic contender (the gate compares against these)."""
        return {r.sharder: r.overall_ms for r in self.results if r.sharder in BASELINE_SHARDERS}

    def summary(self) -> dict[str, Any]:
        """Small JSON for metrics files: overall ms, spread and ratios per sharder."""
        return {
            "inventory": self.inventory_name,
            "devices": self.topology.num_devices,
            "backend": self.backend.name,
            "operator": self.backend.operator,
            "lower_bound_ms": self.lower_bound_ms,
            "best": self.best,
            "best_heuristic": self.best_heuristic,
            "sharders": {
                r.sharder: {
                    "overall_ms": r.overall_ms,
                    "spread": r.spread,
                    "ratio_to_best": r.ratio_to_best,
                    "ratio_to_lower_bound": r.ratio_to_lower_bound,
                }
                for r in self.results
            },
        }


#: Contenders that count as "what users run today" for ratios and the publish gate.
BASELINE_SHARDERS: tuple[str, ...] = (*HEURISTICS, "torchrec")


def lower_bound(single_costs: Mapping[str, float], num_devices: int) -> tuple[float, float, float]:
    """LB = max(max single-table cost, sum of single-table costs / D); an additive reference, not a true bound."""
    vals = list(single_costs.values())
    mx = max(vals, default=0.0)
    total = sum(vals)
    return max(mx, total / num_devices), mx, total


def median_costs(measurements: Sequence[Measurement]) -> Costs:
    """Component-wise median over repeated measurements of one placement; overall = median of overalls."""
    n_dev = len(measurements[0].costs.per_device)
    per_device = []
    for d in range(n_dev):
        comps = zip(*(m.costs.per_device[d].as_list() for m in measurements))
        per_device.append(DeviceCost.from_list([statistics.median(c) for c in comps]))
    return Costs(per_device=tuple(per_device), overall_ms=statistics.median(m.overall_ms for m in measurements))


def evaluate_plan(inventory: Inventory, plan: Plan, oracle: Oracle, rounds: int = 1) -> Plan:
    """Measure a plan on the oracle's backend; returns the plan with `measured` filled in."""
    if plan.inventory_fingerprint != inventory.fingerprint():
        from dreamshard.errors import PlanError

        raise PlanError(
            f"plan {plan.plan_id} was made for inventory '{plan.inventory_name}' with a different fingerprint "
            f"({plan.inventory_fingerprint[:12]}); re-plan for this inventory"
        )
    check_placement(inventory, plan.placement, plan.topology)
    ms = [oracle.measure(inventory, plan.placement, plan.topology, task=plan.sharder) for _ in range(max(1, rounds))]
    return plan.model_copy(update={"measured": median_costs(ms), "measured_by": oracle.info})


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
) -> Comparison:
    """Plan with every sharder, then measure all plans interleaved (shuffled order each round)."""
    names = validate_sharders(sharders)
    options = sharder_options or {}
    say = progress or (lambda _msg: None)
    plans: list[tuple[Plan, float]] = []
    for name in names:
        say(f"planning with {name}")
        t0 = time.perf_counter()
        plan = get_sharder(name, **dict(options.get(name, {}))).shard(inventory, topology)
        plans.append((plan, time.perf_counter() - t0))
    plans.extend((p, 0.0) for p in extra_plans)

    say("measuring single-table costs")
    singles = oracle.single_table_costs(inventory, topology)
    lb, mx, total = lower_bound(singles, topology.num_devices)

    samples: list[list[Measurement]] = [[] for _ in plans]
    rng = random.Random(seed)
    for r in range(rounds):
        order = list(range(len(plans)))
        rng.shuffle(order)
        for i in order:
            plan = plans[i][0]
            say(f"round {r + 1}/{rounds}: measuring {plan.sharder}")
            samples[i].append(oracle.measure(inventory, plan.placement, topology, task=plan.sharder))

    results: list[SharderResult] = []
    for (plan, secs), ms in zip(plans, samples):
        costs = median_costs(ms)
        overalls = [m.overall_ms for m in ms]
        med = costs.overall_ms
        spread = (max(overalls) - min(overalls)) / med if med > 0 else 0.0
        results.append(
            SharderResult(
                sharder=plan.sharder,
                plan=plan.model_copy(update={"measured": costs, "measured_by": oracle.info}),
                overall_ms=med,
                samples_ms=overalls,
                spread=spread,
                plan_seconds=secs,
            )
        )
    best = min(results, key=lambda r: r.overall_ms)
    heur = [r for r in results if r.sharder in BASELINE_SHARDERS]
    best_h = min(heur, key=lambda r: r.overall_ms) if heur else best
    for r in results:
        r.ratio_to_best = r.overall_ms / best.overall_ms if best.overall_ms > 0 else 1.0
        r.ratio_to_lower_bound = r.overall_ms / lb if lb > 0 else 1.0
    return Comparison(
        inventory_name=inventory.name,
        inventory_fingerprint=inventory.fingerprint(),
        topology=topology,
        backend=oracle.info,
        rounds=rounds,
        lower_bound_ms=lb,
        max_single_ms=mx,
        sum_single_ms=total,
        results=results,
        best=best.sharder,
        best_heuristic=best_h.sharder,
    )
