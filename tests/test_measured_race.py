"""The plan stage's race (dreamshard.measured.race, .contenders, .verify): every heuristic's own plan and TorchRec's
race the search's candidates, a contender clearly behind is measured no more, the kept plan is never slower than a
baseline it measured, a baseline it could not measure is listed with why, and the budget bounds the rounds after
the first and refinement."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from scripted_oracle import ScriptedOracle
from store_helpers import NoisyOracle
from toy_cost import toy_model

from dreamshard.errors import InfeasiblePlacementError
from dreamshard.inventory.synth import synth_inventory
from dreamshard.measured.contenders import Contender, Contenders, baseline_names
from dreamshard.measured.outcome import SearchOutcome
from dreamshard.measured.race import SWITCH_CONFIDENCE, behind, paired, scores_to_leader
from dreamshard.measured.steps import Refine, StageBudget, Verify, after_search
from dreamshard.measured.verify import verify_candidates
from dreamshard.placement.expand import expand_plan
from dreamshard.placement.make_plan import make_plan
from dreamshard.profiling.oracle import Oracle
from dreamshard.profiling.simulator import SimulatorBackend
from dreamshard.search.sharders import DreamShardSharder
from dreamshard.sharders import get_sharder
from dreamshard.sharders.heuristics import RoundRobinSharder
from dreamshard.values import Costs, Inventory, Measurement, Plan, Topology

INV = synth_inventory(12, 5, name="race")
TOPO = Topology(num_devices=3, memory_per_device_gb=16.0, batch_size=2048)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("model")
    toy_model(d)
    return d


class FavouringOracle(Oracle):
    """The simulator, except that one placement (a plan's units on their devices) measures `factor` x its cost:
    the hardware's word against the cost model's."""

    def __init__(self, favoured: Mapping[str, int], factor: float = 0.5) -> None:
        super().__init__(SimulatorBackend(), warmup=0, repeats=1)
        self.favoured, self.factor = dict(favoured), factor

    def measure(self, inventory: Any, placement: Any, topology: Topology, **kw: Any) -> Measurement:
        m = super().measure(inventory, placement, topology, **kw)
        if dict(placement) != self.favoured:
            return m
        per = [d.model_copy(update={k: v * self.factor for k, v in d.model_dump().items()}) for d in m.costs.per_device]
        return m.model_copy(update={"costs": Costs.from_devices(per)})


def _plan(model_dir: Path, oracle: Any, **options: Any) -> Plan:
    options = {"verify": 1, "verify_rounds": 3, "column_splits": "never", **options}
    return get_sharder("dreamshard", model_dir=model_dir, oracle=oracle, seed=1, **options).shard(INV, TOPO)


def test_a_heuristic_the_cost_model_misjudges_is_raced_and_kept(model_dir: Path) -> None:
    """The cost model predicts the heuristic's plan worse than the search's; the hardware (a scripted oracle) says it
    is the fastest by far: the plan stage measures it all the same and keeps it. Verification used to measure only
    the best predicted candidates and anchors chosen by predicted cost, so it could not."""
    first = _plan(model_dir, Oracle(SimulatorBackend(), warmup=0, repeats=1)).verification
    assert first is not None
    search_only = next(c for c in first.candidates if c.role == "search only")
    worst = max((c for c in first.candidates if c.role == "heuristic"), key=lambda c: c.predicted_ms)
    assert worst.predicted_ms > search_only.predicted_ms and not worst.kept  # the model: a bad plan
    own = get_sharder(worst.source).shard(INV, TOPO)
    oracle = FavouringOracle(expand_plan(INV, own)[1])
    plan = _plan(model_dir, oracle)
    v = plan.verification
    assert v is not None and plan.placement == own.placement and plan.sharder == "dreamshard"
    kept = next(c for c in v.candidates if c.kept)
    assert kept.label == f"heuristic:{worst.source}" and v.chosen == worst.source
    assert v.best_baseline == kept.label and v.kept_vs_baseline == 1.0
    assert v.kept_vs_search is not None and v.kept_vs_search < 1.0  # faster than the search-only plan, measured
    assert plan.model_version is not None and plan.predicted is not None  # the plan stage's plan, as its own


def _field(n: int, baselines: set[int] = frozenset()) -> Contenders:  # type: ignore[assignment]
    """`n` contenders on distinct plans (c0 the default: the search-only plan); those in `baselines` heuristics'."""
    plans = [get_sharder("random", seed=s).shard(INV, TOPO) for s in range(n)]
    items = tuple(
        Contender(
            f"c{i}", p, 1.0, "heuristic" if i in baselines else ("search only" if i == 0 else None), i in baselines
        )
        for i, p in enumerate(plans)
    )
    return Contenders(items, {}, hold=False, search_only=0)


def test_the_race_drops_a_clearly_behind_contender_early() -> None:
    field = _field(4, {3})
    labels = [c.label for c in field.items]
    noisy = [9.8, 10.0, 9.9, 10.0, 9.9]  # as fast as the leader within the noise
    script = {labels[0]: [10.0] * 5, labels[1]: [13.0] * 5, labels[2]: noisy, labels[3]: [9.9] * 5}
    lines: list[str] = []
    kept, measured = verify_candidates(INV, field, ScriptedOracle(script), rounds=5, progress=lines.append)
    assert [len(m) for m in measured] == [5, 2, 5, 5]  # 30% behind over 2 exact rounds: measured no more
    assert "round 2/5: dropped c1: 1.313x the leader c2" in lines  # c2 and c3 tie at 9.9: the first leads
    assert "round 2/5: 3 left: c0 (search only), c2, heuristic:c3" in lines
    v = kept.verification
    assert v is not None and v.chosen == "c3" and [c.rounds for c in v.candidates] == [5, 2, 5, 5]


def test_contenders_within_the_noise_stay_in_the_race() -> None:
    """On a noisy machine (sd 10% per measurement) near-equal plans are not told apart in 3 rounds: none is dropped."""
    field = _field(3)
    same = field.items[0].plan
    items = tuple(replace(c, plan=same.model_copy(update={"plan_id": f"p{i}"})) for i, c in enumerate(field.items))
    _, measured = verify_candidates(INV, replace(field, items=items), NoisyOracle(seed=2, sd=0.1), rounds=3)
    assert [len(m) for m in measured] == [3, 3, 3]


@pytest.mark.parametrize("seed", range(10))
def test_the_kept_plan_is_never_slower_than_a_baseline_ahead_beyond_the_noise(seed: int) -> None:
    """Whatever the rounds measure (random figures, so contenders cross and drop out): every baseline that was ahead
    of the default beyond the paired interval scores no better than the kept plan, recomputed from the measurements;
    and a baseline that was not may not replace the default (one lucky round is not evidence)."""
    rng = random.Random(seed)
    field = _field(6, {2, 4, 5})
    base = {c.label: rng.uniform(8.0, 12.0) for c in field.items}
    script = {k: [v * rng.lognormvariate(0.0, 0.05) for _ in range(5)] for k, v in base.items()}
    kept, measured = verify_candidates(INV, field, ScriptedOracle(script), rounds=5)
    v = kept.verification
    assert v is not None
    per_round = [[m.overall_ms for m in ms] for ms in measured]
    scores = scores_to_leader(per_round)
    k = next(i for i, c in enumerate(v.candidates) if c.kept)
    ahead = [i for i in (2, 4, 5) if behind(*paired(per_round[0], per_round[i]), SWITCH_CONFIDENCE)]
    assert all(scores[k] <= scores[i] for i in ahead), (scores, k, ahead)
    assert k in (0, *ahead, 1, 3), (k, ahead)  # a baseline kept was ahead beyond the noise


def test_one_round_ahead_is_not_enough_to_replace_the_default() -> None:
    """A baseline 5% ahead in one round, out of time: the race goes on with it and the default (to CONFIRM_ROUNDS
    rounds while it is still ahead), and keeps it only if it stays ahead beyond the noise."""
    field = _field(3, {2})
    labels = [c.label for c in field.items]
    lucky = {labels[0]: [10.0, 9.4, 9.5], labels[1]: [12.0] * 3, labels[2]: [9.5, 9.9, 9.8]}  # ahead in round 1 only
    steady = {**lucky, labels[2]: [9.5, 9.0, 9.1]}
    lines: list[str] = []
    # the lucky one is no longer ahead after round 2: the confirmation ends there and the default stays
    for script, chosen, rounds in ((lucky, "c0", [2, 1, 2]), (steady, "c2", [3, 1, 3])):
        kept, measured = verify_candidates(
            INV, field, ScriptedOracle(script), rounds=5, out_of_time=lambda: True, progress=lines.append
        )
        assert [len(m) for m in measured] == rounds and kept.verification is not None
        assert kept.verification.chosen == chosen, script
    assert f"round 1/5: out of time: confirming {labels[2]} against {labels[0]} to round 3" in lines


def test_out_of_time_a_challenger_ahead_by_less_than_its_margin_is_not_confirmed() -> None:
    """A learned challenger must beat the default by MEASURED_GAIN_MARGIN in every round: 1% ahead in the only round
    there was time for, it cannot qualify, so the race ends there (a baseline 1% ahead is still confirmed)."""
    field = _field(3, {2})
    labels = [c.label for c in field.items]
    for ahead, rounds in ((1, [1, 1, 1]), (2, [3, 1, 3])):
        script = {labels[0]: [10.0] * 3, labels[3 - ahead]: [12.0] * 3, labels[ahead]: [9.9] * 3}
        _, measured = verify_candidates(INV, field, ScriptedOracle(script), rounds=5, out_of_time=lambda: True)
        assert [len(m) for m in measured] == rounds, ahead


class _NoRoom(RoundRobinSharder):
    name = "no_room"

    def shard(self, inventory: Inventory, topology: Topology) -> Plan:
        raise InfeasiblePlacementError("t0000", 9.0, 4.0, "sharder no_room")


def test_a_baseline_that_cannot_plan_is_listed_with_why(model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A registered heuristic that cannot place the inventory is not raced: the record lists it with its own error;
    a heuristic whose plan a contender already is, is listed as measured as that one."""
    from dreamshard.sharders import register_sharder
    from dreamshard.sharders.registry import _REGISTERED

    monkeypatch.setattr("dreamshard.sharders.registry._REGISTERED", dict(_REGISTERED))
    register_sharder("no_room", _NoRoom)
    assert "no_room" in baseline_names()
    v = _plan(model_dir, Oracle(SimulatorBackend(), warmup=0, repeats=1)).verification
    assert v is not None
    assert "heuristic:no_room" in v.not_measured and "t0000" in v.not_measured["heuristic:no_room"]
    assert all(not c.label.endswith("no_room") for c in v.candidates)
    raced = {c.label for c in v.candidates}
    same = {k: why for k, why in v.not_measured.items() if why.startswith("the same plan as")}
    assert all(
        why.removeprefix("the same plan as ").removesuffix(" (measured as it)") in raced for why in same.values()
    )
    assert {f"heuristic:{n}" for n in baseline_names() if n != "no_room" and n != "torchrec"} <= raced | set(same)


def _found(model_dir: Path, monkeypatch: pytest.MonkeyPatch, search_s: float) -> SearchOutcome:
    """What the search hands the measured steps, taken from a real search (the toy model), with `search_s`."""
    got: list[SearchOutcome] = []
    monkeypatch.setattr(DreamShardSharder, "measured", lambda self, found: got.append(found) or found.plan)
    _plan(model_dir, Oracle(SimulatorBackend(), warmup=0, repeats=1))
    return replace(got[0], search_s=search_s)


def test_a_budget_spent_by_the_first_round_ends_the_race_and_leaves_no_refinement(
    model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """plan.stage_budget 3 on a search of 1 s: 2 s for the steps after it. A clock that moves 10 s a reading spends
    them in the first round: every contender is measured once (what makes the race never lose to a baseline), no
    more; refinement gets nothing and says so. Without a budget the same race runs its rounds and refines."""
    found = _found(model_dir, monkeypatch, search_s=1.0)
    oracle = Oracle(SimulatorBackend(), warmup=0, repeats=1)
    ticks = iter(range(0, 10_000, 10))
    steps = (Verify(candidates=1, rounds=3), Refine(seconds=5.0))
    lines: list[str] = []
    plan = after_search(steps, found, oracle, 0, lines.append, StageBudget(3.0), clock=lambda: float(next(ticks)))
    v = plan.verification
    assert v is not None and {c.rounds for c in v.candidates} == {1} and plan.refinement is None
    assert v.budget_s == 3.0 and v.refine_s == 0.0 and v.search_s == 1.0 and v.plan_s is not None and v.plan_s > 3.0
    assert "refine: skipped: the plan stage's budget is spent" in lines
    assert any(line.startswith("verify: round 1/3: out of time with ") for line in lines)
    free = after_search(steps[:1], found, oracle, 0, None, StageBudget(0.0))
    assert free.verification is not None and free.verification.budget_s is None
    assert max(c.rounds or 0 for c in free.verification.candidates) > 1


def test_a_plan_with_its_devices_renumbered_is_the_same_contender_on_one_host() -> None:
    """On one flat host the devices are alike: a plan and the same groups on renumbered devices measure the same and
    race once; across hosts where a unit sits matters."""
    from dreamshard.measured.contenders import plan_key

    plan = get_sharder("dim_greedy").shard(INV, TOPO)
    renumbered = plan.model_copy(update={"placement": {t: (d + 1) % 3 for t, d in plan.placement.items()}})
    first = INV.tables[0].name
    moved = plan.model_copy(update={"placement": {**plan.placement, first: (plan.placement[first] + 1) % 3}})
    assert plan_key(INV, plan) == plan_key(INV, renumbered) != plan_key(INV, moved)
    hosts = Topology(num_devices=4, memory_per_device_gb=16.0, batch_size=2048, devices_per_host=2)
    two = get_sharder("dim_greedy").shard(INV, hosts)
    swapped = two.model_copy(update={"placement": {t: 3 - d for t, d in two.placement.items()}})
    assert plan_key(INV, two) != plan_key(INV, swapped)


class _TimedSimulator(SimulatorBackend):
    """The simulator's exact figures, standing in for a timed backend (the race cuts short only on those)."""

    is_simulated = False


class _CountingOracle(Oracle):
    """Records which devices each measurement call timed (by the placement's devices)."""

    def __init__(self) -> None:
        super().__init__(_TimedSimulator(), warmup=0, repeats=1)
        self.timed: list[tuple[str, frozenset[int]]] = []

    def measure(self, inventory: Any, placement: Any, topology: Topology, **kw: Any) -> Measurement:
        self.timed.append((kw.get("task", ""), frozenset(placement.values())))
        return super().measure(inventory, placement, topology, **kw)


def test_a_contender_with_one_device_over_the_bound_is_cut_short_and_dropped() -> None:
    """On a timed backend a contender whose first (most loaded) device alone is over CUT_SHORT_AT x the round's
    fastest plan has its other devices never timed, is dropped with a line saying so, and its record says its
    figure is a lower bound; the default is always measured whole (planted: without the cut it is timed whole)."""
    balanced = get_sharder("round_robin").shard(INV, TOPO)
    names = [t.name for t in INV.tables]
    heavy = make_plan(INV, TOPO, {n: 0 if i < 10 else i - 9 for i, n in enumerate(names)}, "heavy")
    items = (
        Contender("balanced", balanced, 1.0, "search only"),
        Contender("heavy", heavy, 1.0, "heuristic", baseline=True),
    )
    oracle = _CountingOracle()
    lines: list[str] = []
    kept, measured = verify_candidates(
        INV, Contenders(items, {}, hold=False, search_only=0), oracle, rounds=3, progress=lines.append
    )
    heavy_calls = [devices for task, devices in oracle.timed if task == "heuristic:heavy"]
    assert frozenset({0}) in heavy_calls and frozenset({1}) not in heavy_calls[-1:]  # cut after device 0
    assert any("dropped heuristic:heavy: cut short" in line for line in lines), lines
    v = kept.verification
    assert v is not None and v.chosen == "balanced"
    row = next(c for c in v.candidates if c.source == "heavy")
    assert row.cut_short and not next(c for c in v.candidates if c.source == "balanced").cut_short
    assert all(len(devices) > 1 for task, devices in oracle.timed if task == "balanced (search only)")
