"""Measured refinement (`plan --refine-seconds S`): the hardware corrects the model at plan time
(docs/architecture.md, "Measured refinement").

Starting from the search's best plan, every device is measured once. The incumbent's cost per device is the median
of that device's recent timings: every interleaved round below times two of the incumbent's devices again, and
each kept proposal is followed by one timing of the whole new incumbent, so neither one noisy first reading nor a
machine drifting over minutes decides the bottleneck. Then, while the time budget lasts: take the measured
bottleneck device (each device keeps its ranking until a proposal is kept), rank moves of its units to other
devices and swaps with other devices' units by the learned cost's predicted gain (the predicted change of the two
devices involved, applied to their measured costs), and measure the best untried proposal on only the two devices it
changes, interleaved with the incumbent's same two devices for `rounds` rounds (in predicted order, also where the
model predicts no gain: the model may be wrong there). A proposal is kept only when
the hardware confirms it beyond the noise: the slowest round of the new pair is faster than the fastest round of
the incumbent pair, the new pair's median is below the bottleneck's measured cost, and (with `confirm` rounds) a
second block of that many fresh rounds passes the same rule: noise passes both one time in 400 (3 + 3 rounds).
A round in which the new pair is not faster than the incumbent's fastest round so far ends the block at once: no
later round could make it pass, so it is dropped after one round instead of `rounds` (most proposals are; same
decisions, several times the proposals per second). Within a round the new pair's receiving device is timed first, and when it alone
is at or above the incumbent's fastest round so far the other device is not timed: the round is lost either way
(again the same decisions, one device timing instead of two). Everything measured is
fresh (never read from the corpus), and every device timing goes into the measurement corpus when the oracle has
one, as training data. The plan records the trace: proposals tried and kept, the measured gain, device timings.
"""

from __future__ import annotations

import math
import statistics
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from dreamshard.learning.planning_cost import PlanningCost
from dreamshard.placement.expand import expand_plan, fold_units
from dreamshard.placement.validate import footprint
from dreamshard.profiling.oracle import Oracle
from dreamshard.sharders.base import make_plan
from dreamshard.values import Inventory, Measurement, Plan, RefineStep, RefineTrace, Topology
from dreamshard.values.units import movable

#: proposals ranked per bottleneck before measuring (the best untried one is measured next)
MAX_PROPOSALS = 256
#: timings per device behind the incumbent's measured cost (their median); older ones age out
WINDOW = 7

Predict = Callable[[Sequence[str]], float]  # predicted total ms of one device holding these units


def _pair_ms(
    oracle: Oracle,
    units: Inventory,
    placement: dict[str, int],
    devices: tuple[int, int],
    topology: Topology,
    stop_at: float = math.inf,
) -> tuple[list[float], int]:
    """Measured totals of `devices` under `placement`, one device at a time in that order (a device's cost is its
    own units' fused operator and all-to-all share, so only its units are timed), and how many device timings that
    took (an empty device costs 0 without one). A device at or above `stop_at` ends it: the pair's maximum is then
    at least that, and the other device is not timed (the list is shorter)."""
    out: list[float] = []
    timed = 0
    for device in devices:
        sub = {n: d for n, d in placement.items() if d == device}
        if sub:
            m = oracle.measure(units.subset(list(sub)), sub, topology, kind="placement", task="refine")
            timed += 1
        out.append(m.costs.per_device[device].total if sub else 0.0)
        if out[-1] >= stop_at:
            break
    return out, timed


Proposal = tuple[float, str, int, dict[str, int]]  # (predicted overall, label, other device, change)


def _key(change: dict[str, int]) -> tuple[tuple[str, int], ...]:
    """A proposal's identity in the tried set: a swap ranked from either of its devices is the same change."""
    return tuple(sorted(change.items()))


def _proposals(
    current: dict[str, int],
    dev_ms: list[float],
    need: dict[str, int],
    cap: int,
    predict: Predict,
    tried: set[tuple[tuple[str, int], ...]],
) -> list[Proposal]:
    """Moves of the measured bottleneck's units to other devices and swaps with their units (memory kept),
    ranked by the predicted overall: the measured costs of the two devices changed by their predicted deltas."""
    n = len(dev_ms)
    b = int(np.argmax(dev_ms))
    on = {d: [u for u, v in current.items() if v == d] for d in range(n)}
    size = {d: sum(need[u] for u in on[d]) for d in range(n)}
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
                moved = need[u] - (need[w] if w else 0)
                if size[d] + moved > cap or size[b] - moved > cap:
                    continue
                new_b = [x for x in on[b] if x != u] + ([w] if w else [])
                new_d = [x for x in on[d] if x != w] + [u]
                est_b = dev_ms[b] + predict(new_b) - base[b]
                est_d = dev_ms[d] + predict(new_d) - base[d]
                out.append((max(others, est_b, est_d), label, d, change))
    out.sort(key=lambda p: (p[0], p[1]))
    # measured in predicted order even where the model sees no gain: the hardware has the last word
    return out[:MAX_PROPOSALS]


class _Incumbent:
    """The incumbent's measured cost per device: the median of that device's last `WINDOW` timings under the
    current placement (every interleaved incumbent round adds one; a kept proposal starts the two devices it
    changed afresh from its own rounds). One timing per device, taken once and never again, let a single noisy
    reading pick the bottleneck for the whole budget, and a machine that drifts by 10% over minutes left every
    device it did not touch at a stale cost."""

    def __init__(self, n: int) -> None:
        self._seen: list[deque[float]] = [deque(maxlen=WINDOW) for _ in range(n)]

    def add(self, device: int, ms: float) -> None:
        self._seen[device].append(ms)

    def add_all(self, measured: Measurement) -> None:
        for device, c in enumerate(measured.costs.per_device):
            self.add(device, c.total)

    def replace(self, device: int, ms: Sequence[float]) -> None:
        self._seen[device].clear()
        self._seen[device].extend(ms)

    def costs(self) -> list[float]:
        return [statistics.median(s) if s else 0.0 for s in self._seen]

    def bottleneck_ms(self) -> float:
        return max(self.costs())


@dataclass
class _Block:
    """One block of interleaved rounds of a proposal against the incumbent, on the two devices it changes."""

    rounds: int  # the rounds it needs to pass
    old: list[float] = field(default_factory=list)  # the incumbent pair's maximum, per round
    new: list[float] = field(default_factory=list)  # the proposal pair's, per round
    pairs: list[list[float]] = field(default_factory=list)  # the proposal's (b, d) costs per round
    timings: int = 0

    @property
    def passed(self) -> bool:
        """Every round of the proposal faster than every round of the incumbent, for all its rounds."""
        return len(self.new) == self.rounds and max(self.new) < min(self.old)


def _duel(
    oracle: Oracle,
    units: Inventory,
    current: dict[str, int],
    new: dict[str, int],
    bd: tuple[int, int],
    topology: Topology,
    rounds: int,
    rng: np.random.Generator,
    seen: _Incumbent,
    out_of_time: Callable[[], bool],
) -> _Block:
    """Up to `rounds` interleaved rounds (random order within each); a lost round ends the block."""
    b, d = bd
    out = _Block(rounds=max(1, rounds))
    for r in range(out.rounds):
        for which in [0, 1] if rng.random() < 0.5 else [1, 0]:
            if which == 0:
                pair, timed = _pair_ms(oracle, units, current, (b, d), topology)
                out.old.append(max(pair))
                seen.add(b, pair[0])  # the incumbent's own devices, measured again: fresh costs
                seen.add(d, pair[1])
            else:  # the receiving device first (it gained a unit: the likelier to fail); once it is at or
                # above the incumbent's fastest round, the round is lost whatever the other device measures
                pair, timed = _pair_ms(
                    oracle, units, new, (d, b), topology, stop_at=min(out.old) if out.old else math.inf
                )
                out.new.append(max(pair))
                out.pairs.append(pair[::-1])  # (b, d) when both were timed
            out.timings += timed
        if max(out.new) >= min(out.old):
            break  # the keep rule can no longer hold: more rounds would only cost time (the same decision)
        if out_of_time() and r + 1 < out.rounds:
            break
    return out


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
) -> tuple[dict[str, int], RefineTrace]:
    """The refined unit placement and its trace (see the module docstring)."""
    start = clock()
    n = topology.num_devices
    cap = topology.usable_memory_bytes
    need = {t.name: footprint(t, topology) for t in units.tables}  # bytes each unit takes on a device
    rng = np.random.default_rng(seed)
    current = dict(placement)
    seen = _Incumbent(n)
    seen.add_all(oracle.measure(units, current, topology, kind="placement", task="refine"))
    initial: float | None = None  # the start's bottleneck from every timing of it (taken at the first keep)
    timings = len(set(current.values()))  # the devices that hold units
    steps: list[RefineStep] = []
    tried: set[tuple[tuple[str, int], ...]] = set()

    queues: dict[int, list[Proposal]] = {}  # per bottleneck device, ranked once per incumbent (1-3 s each on the
    # pool): a measured bottleneck that alternates between two close devices picks up its queue where it left it
    out_of_time = lambda: clock() - start >= seconds  # noqa: E731
    while not out_of_time() and n > 1:
        dev_ms = seen.costs()
        b = int(np.argmax(dev_ms))
        queue = queues.get(b)
        while queue and _key(queue[0][3]) in tried:  # measured from the other device's queue
            queue.pop(0)
        if not queue:  # a refused proposal moves on to the next one; an exhausted queue is ranked again
            queue = queues[b] = _proposals(current, dev_ms, need, cap, predict, tried)
            if not queue:
                break
        est, label, d, change = queue.pop(0)
        tried.add(_key(change))
        new = {**current, **change}
        blocks = [_duel(oracle, units, current, new, (b, d), topology, rounds, rng, seen, out_of_time)]
        if confirm and blocks[0].passed and not out_of_time():  # the same rule again, on fresh rounds
            blocks.append(_duel(oracle, units, current, new, (b, d), topology, confirm, rng, seen, out_of_time))
        timings += sum(bl.timings for bl in blocks)
        old_rounds = [x for bl in blocks for x in bl.old]
        new_rounds = [x for bl in blocks for x in bl.new]
        kept = (
            len(blocks) == 1 + (confirm > 0)
            and all(bl.passed for bl in blocks)
            and statistics.median(new_rounds) < seen.costs()[b]
        )
        steps.append(
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
            initial = seen.bottleneck_ms() if initial is None else initial
            queues.clear()
            current = new
            pair_new = [pr for bl in blocks for pr in bl.pairs]  # both devices timed in every round of a kept one
            seen.replace(b, [pr[0] for pr in pair_new])
            seen.replace(d, [pr[1] for pr in pair_new])
            if not out_of_time():  # the whole new incumbent once: no device's cost older than a keep
                seen.add_all(oracle.measure(units, current, topology, kind="placement", task="refine"))
                timings += len(set(current.values()))
    final = seen.bottleneck_ms()
    initial = final if initial is None else initial
    trace = RefineTrace(
        seconds=round(clock() - start, 3),
        budget_s=seconds,
        rounds=rounds,
        confirm_rounds=confirm,
        tried=len(steps),
        kept=sum(s.kept for s in steps),
        device_timings=timings,
        initial_ms=round(initial, 6),
        final_ms=round(final, 6),
        measured_gain=round((initial - final) / initial, 6) if initial > 0 else 0.0,
        steps=tuple(steps),
    )
    return current, trace


def refine_plan(
    inventory: Inventory,
    plan: Plan,
    cost: PlanningCost,
    oracle: Oracle,
    seconds: float,
    rounds: int = 3,
    seed: int = 0,
    confirm: int = 3,
) -> Plan:
    """`plan` refined on `oracle` for `seconds` (its units: whole tables and column shards), predicted by `cost`.
    With a kept proposal the refined plan is measured whole once (its `measured` costs); the trace is recorded
    either way."""
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
        units, placed, plan.topology, oracle, predict, seconds, rounds, seed, confirm=confirm
    )
    if not trace.kept:
        return plan.model_copy(update={"refinement": trace})
    new = make_plan(
        inventory,
        plan.topology,
        sharder=plan.sharder,
        **fold_units(inventory, refined).plan_fields(),
        predicted=cost.predict(list(units.tables), refined),
        model_version=plan.model_version,
    )
    whole = oracle.measure(units, refined, plan.topology, kind="placement", task="refine")
    return new.model_copy(
        update={
            "out_of_range": plan.out_of_range,
            "verification": plan.verification,
            "refinement": trace,
            "measured": whole.costs,
            "measured_by": oracle.info,
        }
    )
