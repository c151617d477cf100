"""Measured refinement (`plan --refine-seconds S`): the hardware corrects the model at plan time
(docs/architecture/learning.md, "Measured refinement").

While the time budget lasts: take the measured bottleneck device of the incumbent, rank moves of its units to other
devices and swaps with their units by the learned cost's predicted change of the two devices involved, and measure
the best untried proposal on only those two devices, interleaved with the incumbent's same two
(dreamshard.measured.duel). A proposal is kept only when the hardware confirms it beyond the noise: every round
of it faster than every round of the incumbent, its median below the bottleneck's measured cost, and (with
`confirm` rounds) a second block of fresh rounds passing the same rule. Timings are always fresh and go into the
oracle's measurement corpus as training data; the plan records the trace (`Plan.refinement`). Two devices timed
alone are not the whole plan: at the end the refined plan is measured whole against the plan refinement started
from, interleaved, and the start is kept unless the refined plan was faster in every round
(dreamshard.measured.stage).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from dreamshard.learning.planning_cost import PlanningCost
from dreamshard.measured.duel import Block, IncumbentCosts, measure_block
from dreamshard.measured.stage import against_start
from dreamshard.placement.device_memory import unit_needs
from dreamshard.placement.expand import expand_plan, fold_units
from dreamshard.placement.make_plan import make_plan
from dreamshard.placement.options import allowed_devices
from dreamshard.placement.spread import spread_groups
from dreamshard.profiling.oracle import Oracle
from dreamshard.values import GB, Inventory, Measurement, Plan, RefineStep, RefineTrace, Topology
from dreamshard.values.progress import Progress, prefixed
from dreamshard.values.units import movable

#: proposals ranked per bottleneck before measuring (the best untried one is measured next)
MAX_PROPOSALS = 256

Predict = Callable[[Sequence[str]], float]  # predicted total ms of one device holding these units


Proposal = tuple[float, str, int, dict[str, int]]  # (predicted overall, label, other device, change)


#: a proposal's identity in the tried set
ChangeKey = tuple[tuple[str, int], ...]


def _key(change: dict[str, int]) -> ChangeKey:
    """A proposal's identity in the tried set: a swap ranked from either of its devices is the same change."""
    return tuple(sorted(change.items()))


@dataclass(frozen=True)
class _Room:
    """What a proposal must keep: each unit's device and host bytes, the two capacities, the devices each unit may
    use (its table's `devices` constraint)."""

    need: dict[str, int]
    host: dict[str, int]
    cap: int
    host_cap: float
    allowed: dict[str, tuple[int, ...]]
    #: {unit: its table} of the shards of `min_shards` tables: two never share a device (placement/spread.py)
    spread: dict[str, str]

    @classmethod
    def of(cls, units: Inventory, topology: Topology) -> _Room:
        needs = unit_needs(units, topology)
        return cls(
            need={n: m.total for n, m in needs.items()},
            host={n: m.host for n, m in needs.items()},
            cap=topology.usable_memory_bytes,
            host_cap=topology.host_memory_per_device_gb * GB,
            allowed={t.name: allowed_devices(t, topology) for t in units.tables},
            spread={u: table for table, members in spread_groups(units).items() for u in members},
        )

    def _apart(self, on: dict[int, list[str]], unit: str | None, to: int, leaving: str | None) -> bool:
        """Whether `unit` may join device `to` (which `leaving` leaves): no other shard of its table is there."""
        table = self.spread.get(unit) if unit is not None else None
        return table is None or not any(self.spread.get(x) == table for x in on[to] if x != leaving)

    def keeps(self, on: dict[int, list[str]], b: int, d: int, u: str, w: str | None) -> bool:
        """Whether moving `u` from b to d (and `w` from d to b) keeps both devices within memory, both units on
        devices they may use, and the shards of a `min_shards` table apart."""
        if d not in self.allowed[u] or (w is not None and b not in self.allowed[w]):
            return False
        if not self._apart(on, u, d, w) or not self._apart(on, w, b, u):
            return False
        for need, cap in ((self.need, self.cap), (self.host, self.host_cap)):
            moved = need[u] - (need[w] if w else 0)
            if sum(need[x] for x in on[d]) + moved > cap or sum(need[x] for x in on[b]) - moved > cap:
                return False
        return True


def _proposals(
    current: dict[str, int],
    dev_ms: list[float],
    room: _Room,
    predict: Predict,
    tried: set[ChangeKey],
) -> list[Proposal]:
    """Moves of the measured bottleneck's units to other devices and swaps with their units (memory and each
    unit's allowed devices kept), ranked by the predicted overall: the measured costs of the two devices changed
    by their predicted deltas."""
    n = len(dev_ms)
    b = int(np.argmax(dev_ms))
    on = {d: [u for u, v in current.items() if v == d] for d in range(n)}
    base = {d: predict(on[d]) for d in range(n)}
    out: list[Proposal] = []
    for u in filter(movable, on[b]):
        for d in range(n):
            if d == b:
                continue
            others = max([dev_ms[x] for x in range(n) if x not in (b, d)], default=0.0)
            options: list[tuple[str, dict[str, int], str | None]] = [(f"move {u} {b}->{d}", {u: d}, None)]
            options += [(f"swap {u}@{b} <-> {w}@{d}", {u: d, w: b}, w) for w in list(filter(movable, on[d]))[:32]]
            for label, change, w in options:
                if _key(change) in tried:
                    continue
                if not room.keeps(on, b, d, u, w):
                    continue
                new_b = [x for x in on[b] if x != u] + ([w] if w else [])
                new_d = [x for x in on[d] if x != w] + [u]
                est_b = dev_ms[b] + predict(new_b) - base[b]
                est_d = dev_ms[d] + predict(new_d) - base[d]
                out.append((max(others, est_b, est_d), label, d, change))
    out.sort(key=lambda p: (p[0], p[1]))
    # measured in predicted order even where the model sees no gain: the hardware has the last word
    return out[:MAX_PROPOSALS]


def refine_measured(
    units: Inventory,
    placement: dict[str, int],
    topology: Topology,
    oracle: Oracle,
    predict: Predict,
    seconds: float,
    rounds: int = 3,
    seed: int = 0,
    clock: Callable[[], float] = time.monotonic,
    confirm: int = 3,
    progress: Progress | None = None,
) -> tuple[dict[str, int], RefineTrace]:
    """The refined unit placement and its trace (see the module docstring); `progress` gets a line per proposal
    tried (what it was, kept or not, the time spent of the budget)."""
    start = clock()
    run = _Refinement(
        units,
        placement,
        topology,
        oracle,
        predict,
        rounds=rounds,
        confirm=confirm,
        rng=np.random.default_rng(seed),
        out_of_time=lambda: clock() - start >= seconds,
    )
    while not run.out_of_time() and topology.num_devices > 1:
        picked = run.next_proposal()
        if picked is None:
            break
        run.try_proposal(*picked)
        if progress is not None:
            last, kept = run.steps[-1], sum(st.kept for st in run.steps)
            progress(
                f"proposal {len(run.steps)} ({last.proposal}) {'kept' if last.kept else 'not kept'}; {kept} kept, "
                f"{clock() - start:.0f}/{seconds:.0f} s"
            )
    return run.current, run.trace(round(clock() - start, 3), seconds)


class _Refinement:
    """One measured refinement: the incumbent placement, its measured costs, and the proposals tried so far."""

    def __init__(
        self,
        units: Inventory,
        placement: dict[str, int],
        topology: Topology,
        oracle: Oracle,
        predict: Predict,
        rounds: int,
        confirm: int,
        rng: np.random.Generator,
        out_of_time: Callable[[], bool],
    ) -> None:
        self.units, self.topology, self.oracle, self.predict = units, topology, oracle, predict
        self.rounds, self.confirm, self.rng, self.out_of_time = rounds, confirm, rng, out_of_time
        self.room = _Room.of(units, topology)
        self.current = dict(placement)
        self.seen = IncumbentCosts(topology.num_devices)
        self.seen.add_all(self._measure_whole())
        self.initial: float | None = None  # the start's bottleneck from every timing of it (taken at the first keep)
        self.timings = len(set(self.current.values()))  # the devices that hold units
        self.steps: list[RefineStep] = []
        self.tried: set[ChangeKey] = set()
        # Per bottleneck device, ranked once per incumbent: a measured bottleneck that alternates between two close
        # devices picks up its queue where it left it.
        self.queues: dict[int, list[Proposal]] = {}

    def _measure_whole(self) -> Measurement:
        return self.oracle.measure(self.units, self.current, self.topology, kind="placement", task="refine")

    def next_proposal(self) -> tuple[int, Proposal] | None:
        """The measured bottleneck device and its best untried proposal; None when it has none left."""
        dev_ms = self.seen.costs()
        b = int(np.argmax(dev_ms))
        queue = self.queues.get(b)
        while queue and _key(queue[0][3]) in self.tried:  # measured from the other device's queue
            queue.pop(0)
        if not queue:  # a refused proposal moves on to the next one; an exhausted queue is ranked again
            queue = self.queues[b] = _proposals(self.current, dev_ms, self.room, self.predict, self.tried)
            if not queue:
                return None
        return b, queue.pop(0)

    def try_proposal(self, b: int, proposal: Proposal) -> None:
        """Measure `proposal` against the incumbent on the two devices it changes; keep it if the rule holds."""
        est, label, d, change = proposal
        self.tried.add(_key(change))
        new = {**self.current, **change}
        blocks = [self._measure_block(new, (b, d), self.rounds)]
        if self.confirm and blocks[0].passed and not self.out_of_time():  # the same rule again, on fresh rounds
            blocks.append(self._measure_block(new, (b, d), self.confirm))
        self.timings += sum(bl.timings for bl in blocks)
        old_rounds = [x for bl in blocks for x in bl.old]
        new_rounds = [x for bl in blocks for x in bl.new]
        kept = (
            len(blocks) == 1 + (self.confirm > 0)
            and all(bl.passed for bl in blocks)
            and statistics.median(new_rounds) < self.seen.costs()[b]
        )
        self.steps.append(
            RefineStep(
                proposal=label,
                devices=(b, d),
                predicted_ms=round(est, 6),
                incumbent_ms=round(statistics.median(old_rounds), 6),
                measured_ms=round(statistics.median(new_rounds), 6),
                kept=kept,
                rounds=len(new_rounds),
            )
        )
        if kept:
            self._keep(new, (b, d), blocks)

    def _measure_block(self, new: dict[str, int], bd: tuple[int, int], rounds: int) -> Block:
        return measure_block(
            self.oracle, self.units, self.current, new, bd, self.topology, rounds, self.rng, self.seen, self.out_of_time
        )

    def _keep(self, new: dict[str, int], bd: tuple[int, int], blocks: list[Block]) -> None:
        """`new` becomes the incumbent; its two changed devices restart from the proposal's own rounds."""
        b, d = bd
        self.initial = self.seen.bottleneck_ms() if self.initial is None else self.initial
        self.queues.clear()
        self.current = new
        pair_new = [pr for bl in blocks for pr in bl.pairs]  # both devices timed in every round of a kept one
        self.seen.replace(b, [pr[0] for pr in pair_new])
        self.seen.replace(d, [pr[1] for pr in pair_new])
        if not self.out_of_time():  # the whole new incumbent once: no device's cost older than a keep
            self.seen.add_all(self._measure_whole())
            self.timings += len(set(self.current.values()))

    def trace(self, seconds: float, budget_s: float) -> RefineTrace:
        final = self.seen.bottleneck_ms()
        initial = final if self.initial is None else self.initial
        return RefineTrace(
            seconds=seconds,
            budget_s=budget_s,
            rounds=self.rounds,
            confirm_rounds=self.confirm,
            tried=len(self.steps),
            kept=sum(s.kept for s in self.steps),
            device_timings=self.timings,
            initial_ms=round(initial, 6),
            final_ms=round(final, 6),
            measured_gain=round((initial - final) / initial, 6) if initial > 0 else 0.0,
            steps=tuple(self.steps),
        )


def refine_plan(
    inventory: Inventory,
    plan: Plan,
    cost: PlanningCost,
    oracle: Oracle,
    seconds: float,
    rounds: int = 3,
    seed: int = 0,
    confirm: int = 3,
    progress: Progress | None = None,
) -> Plan:
    """`plan` refined on `oracle` for `seconds` (its units: whole tables and column shards), predicted by `cost`.
    With a kept proposal the refined plan is measured whole against `plan`, interleaved for up to `rounds` rounds,
    and kept only when faster in every round (dreamshard.measured.stage.against_start: its `measured` costs), else
    `plan` is; the trace is recorded either way."""
    units, placed = expand_plan(inventory, plan)
    states = dict(zip(units.table_names, cost.encode(list(units.tables)), strict=True))  # a device: their sum
    cache: dict[frozenset[str], float] = {}

    def predict(names: Sequence[str]) -> float:
        key = frozenset(names)
        if key not in cache:
            if not key:
                return 0.0
            with torch.no_grad():
                cache[key] = float(cost.mean_device_costs(torch.stack([states[n] for n in key]).sum(0)).sum())
        return cache[key]

    refined, trace = refine_measured(
        units, placed, plan.topology, oracle, predict, seconds, rounds, seed, confirm=confirm, progress=progress
    )
    if not trace.kept:
        return plan.model_copy(update={"refinement": trace})
    folded = fold_units(inventory, refined)
    new = make_plan(
        inventory,
        plan.topology,
        sharder=plan.sharder,
        placement=folded.placement,
        column_shards=folded.column_shards,
        row_shards=folded.row_shards,
        data_parallel=folded.data_parallel,
        predicted=cost.predict(list(units.tables), refined),
        model_version=plan.model_version,
        kernels=plan.kernels,
        cache_load_factors=plan.cache_load_factors,
    )
    # what the plan stage recorded before refinement (moves keep the layout, its calibration and assumptions)
    carried = ("out_of_range", "verification", "comm_fits", "calibration", "layouts", "assumptions")
    new = new.model_copy(update={k: getattr(plan, k) for k in carried})
    return against_start(inventory, plan, new, trace, oracle, rounds, seed, prefixed(progress, "refined vs start: "))
