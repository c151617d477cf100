"""Plans measured interleaved: each plan once per round, in a freshly shuffled order every round, so drift on a
shared machine hits all plans alike (docs/architecture/measuring.md, "Measuring"). `compare.py` re-exports these
names."""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from dreamshard.errors import PlanError
from dreamshard.placement.expand import expand_plan
from dreamshard.placement.validate import check_plan
from dreamshard.profiling.reserve import reserve_for
from dreamshard.values import Costs, DeviceCost, Inventory, Measurement, Plan, Topology

if TYPE_CHECKING:  # pragma: no cover
    from dreamshard.profiling import Oracle


def median_costs(measurements: Sequence[Measurement]) -> Costs:
    """Component-wise median over repeated measurements of one placement; overall = median of overalls."""
    n_dev = len(measurements[0].costs.per_device)
    per_device = []
    for d in range(n_dev):
        comps = zip(*(m.costs.per_device[d].as_list() for m in measurements), strict=True)
        per_device.append(DeviceCost.from_list([statistics.median(c) for c in comps]))
    return Costs(per_device=tuple(per_device), overall_ms=statistics.median(m.overall_ms for m in measurements))


def check_plan_for(inventory: Inventory, plan: Plan, topology: Topology | None = None) -> None:
    """A plan is measurable for `inventory` (and `topology`, if given): same fingerprint, same topology, and a
    legal placement with truthful memory figures (dreamshard.placement.validate.check_plan). PlanError otherwise."""
    if plan.inventory_fingerprint != inventory.fingerprint():
        raise PlanError(
            f"plan {plan.plan_id} was made for inventory '{plan.inventory_name}' with a different fingerprint "
            f"({plan.inventory_fingerprint[:12]}, this one is {inventory.fingerprint()[:12]}); "
            "re-plan for this inventory"
        )
    if topology is not None and plan.topology != topology:
        raise PlanError(
            f"plan {plan.plan_id} is for {plan.topology.num_devices} x {plan.topology.device_type} "
            f"({plan.topology.memory_per_device_gb:g} GB, batch {plan.topology.batch_size}), not the compared "
            f"{topology.num_devices} x {topology.device_type} ({topology.memory_per_device_gb:g} GB, "
            f"batch {topology.batch_size}); re-plan for that topology"
        )
    check_plan(inventory, plan)


#: How one plan of a round is measured: (its index, the inventory, the plan, the round's fastest figure so far or
#: None) -> its measurement (the plan stage's race cuts a plan short: dreamshard.evaluation.cut_short).
Measurer = Callable[[int, Inventory, Plan, float | None], Measurement]


def measure_plan(inventory: Inventory, plan: Plan, oracle: Oracle) -> Measurement:
    """One measurement of the whole plan."""
    units, placement = expand_plan(inventory, plan)
    return oracle.measure(
        units,
        placement,
        plan.topology,
        task=plan.sharder,
        kernels=plan.kernels,
        cache_load_factors=plan.cache_load_factors,
    )


def measure_interleaved(
    inventory: Inventory,
    plans: Sequence[Plan],
    oracle: Oracle,
    rounds: int,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
    narrow: Callable[[list[list[Measurement]]], Sequence[int]] | None = None,
    inventories: Sequence[Inventory] = (),
    round_inventories: Sequence[Inventory] = (),
    measurer: Measurer | None = None,
) -> list[list[Measurement]]:
    """Each plan measured once per round, in a freshly shuffled order every round (so drift on a shared
    machine hits all plans alike); the measurements of each plan, in plan order. `narrow`, asked after each
    complete round, names the plans the next round measures, a subset of this round's; none ends the measuring
    (the publish gate's sequential rule stops them all at once, `--verify` drops a candidate once it lost a
    round, so plans may end with fewer rounds). `inventories`, when given, is each plan's own inventory (what-if of
    an added or removed table measures plans of two versions); `round_inventories`, when given, the inventory every
    plan is measured on in round r: `round_inventories[r % len]` (the plan stage's race cycles through the id
    distributions assumed for tables without statistics). `measurer`: how each plan is measured (default: whole,
    `measure_plan`), told the round's fastest figure so far."""
    if inventories and len(inventories) != len(plans):
        raise ValueError(f"{len(inventories)} inventories for {len(plans)} plans")
    if inventories and round_inventories:
        raise ValueError("give each plan its own inventory or each round its own, not both")
    own = list(inventories) or [inventory] * len(plans)
    reserve_for(oracle, list(zip(own, plans, strict=True)))
    say = progress or (lambda _msg: None)
    samples: list[list[Measurement]] = [[] for _ in plans]
    rng = random.Random(seed)
    active = list(range(len(plans)))
    for r in range(rounds):
        order = list(active)
        rng.shuffle(order)
        fastest: float | None = None
        for i in order:
            say(f"round {r + 1}/{rounds}: measuring {plans[i].sharder}")
            on = round_inventories[r % len(round_inventories)] if round_inventories else own[i]
            m = measurer(i, on, plans[i], fastest) if measurer is not None else measure_plan(on, plans[i], oracle)
            samples[i].append(m)
            fastest = m.overall_ms if fastest is None else min(fastest, m.overall_ms)
        if narrow is not None and r + 1 < rounds:
            active = [i for i in narrow(samples) if i in active]
            if not active:
                say(f"decided after round {r + 1}/{rounds}")
                break
    return samples


def evaluate_plan(inventory: Inventory, plan: Plan, oracle: Oracle, rounds: int = 1) -> Plan:
    """Measure a plan on the oracle's backend; returns the plan with `measured` filled in."""
    check_plan_for(inventory, plan)
    ms = [measure_plan(inventory, plan, oracle) for _ in range(max(1, rounds))]
    return plan.model_copy(update={"measured": median_costs(ms), "measured_by": oracle.info})
