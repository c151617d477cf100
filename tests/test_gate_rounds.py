"""A gate that can decide: sequential rounds while the spread is high, timing passes with a
per-device median, the interval's width in the decision, and a tie that is no approval. Hand-set figures only."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

import pytest
from store_helpers import World, gate_file_plan, make_plan

from dreamshard.errors import ProfilingError
from dreamshard.evaluation import compare_sharders
from dreamshard.gate import PublishConfig, evaluate_gate
from dreamshard.gate.bounds import window_spread
from dreamshard.gate.sequential import gate_rounds, looks, quiet_enough, stop_rule
from dreamshard.profiling import base, make_oracle
from dreamshard.profiling.base import ComputeBackend, DeviceTiming, timing_clock
from dreamshard.profiling.oracle import Oracle
from dreamshard.values import Costs, DeviceCost, Measurement, Table, Topology, named_world

BASE = [100.0, 101.0, 99.5, 100.4, 100.8]


class ScriptedOracle:
    """The exact simulator, each contender's k-th measurement scaled by its script's k-th factor (1 past its end):
    a machine whose noise the test writes down, round by round."""

    def __init__(self, script: Mapping[str, Sequence[float]]) -> None:
        self.inner = make_oracle("simulator")
        self.info = self.inner.info
        self.script = script
        self.calls: dict[str, int] = {}

    def corpus_as(self, corpus: Any) -> AbstractContextManager[Any]:
        return self.inner.corpus_as(corpus)

    def measure(self, units: Any, placement: Mapping[str, int], topology: Topology, **kw: Any) -> Measurement:
        m = self.inner.measure(units, placement, topology, **kw)
        task = str(kw.get("task", ""))
        k = self.calls.get(task, 0)
        self.calls[task] = k + 1
        script = self.script.get(task, ())
        f = script[k] if k < len(script) else 1.0
        per = [DeviceCost.from_list([x * f for x in d.as_list()]) for d in m.costs.per_device]
        return m.model_copy(update={"costs": Costs.from_devices(per)})


@pytest.fixture(scope="module")
def world() -> World:
    return World()


def _rules(world: World, max_rounds: int) -> PublishConfig:
    return world.rules.model_copy(update={"baselines": ("dim_greedy", "torchrec"), "max_rounds": max_rounds})


def _measured(world: World, script: Mapping[str, Sequence[float]], rules: PublishConfig) -> Any:
    """The gate's comparison of the World's tie (dim_greedy's own placement, labelled as learned) against
    dim_greedy and TorchRec, measured on `script`, as the evaluate stage measures it."""
    tie = next(r.plan for r in world.comparison.results if r.sharder == "dim_greedy")
    tie = tie.model_copy(update={"sharder": "dreamshard", "measured": None, "measured_by": None})
    oracle = ScriptedOracle(script)
    cmp = compare_sharders(
        world.inventory,
        world.topology,
        ["dim_greedy", "torchrec"],
        oracle,
        rounds=gate_rounds(rules, rules.min_rounds),
        extra_plans=[tie],
        with_lower_bound=False,
        stop=stop_rule(rules, tie.plan_id),
    )
    return tie, cmp


#: Within 2% every round: undecided at the early looks (a tie), quiet at min_rounds.
QUIET = {"dreamshard": [1.0, 1.01, 0.99, 1.0, 1.005]}


def test_a_quiet_machine_stops_at_min_rounds(world: World) -> None:
    rules = _rules(world, 9)
    plan, cmp = _measured(world, QUIET, rules)
    assert cmp.rounds == rules.min_rounds == 5
    _, d = gate_file_plan(plan, world.inventory, cmp, rules)
    assert d.outcome == "equivalent" and d.rounds == 5  # a tie within a quiet measurement: decided at the final look
    assert "inside [0.96, 1.04]" in d.reason and "no gain worth a change" in d.reason
    _, d = gate_file_plan(plan, world.inventory, cmp, rules.model_copy(update={"equivalence_margin": 0.0}))
    assert d.outcome == "inconclusive"  # no margin: no round would tell


def test_rounds_go_on_while_the_spread_is_above_target_and_stop_below(world: World) -> None:
    """5% apart every other round until round 4: the last 5 rounds are within the target from round 9 on."""
    rules = _rules(world, 12)
    plan, cmp = _measured(world, {"dreamshard": [1.0, 1.05, 1.0, 1.05]}, rules)
    assert cmp.rounds == 9
    assert [window_spread(cmp.result("dreamshard").samples_ms[:n], 5) > 0.03 for n in (5, 8, 9)] == [
        True,
        True,
        False,
    ]
    _, d = gate_file_plan(plan, world.inventory, cmp, rules)
    assert d.rounds == 9 and not d.stopped_early  # the final look takes every round measured


def test_a_noisy_baseline_is_measured_up_to_the_cap(world: World) -> None:
    rules = _rules(world, 7)
    noisy = [1.0, 1.06] * 10  # the deciding baseline never gets quiet
    _, cmp = _measured(world, {"dim_greedy": noisy, "torchrec": noisy}, rules)
    assert cmp.rounds == 7


def test_the_stop_rule_on_hand_set_rounds() -> None:
    rules = PublishConfig()
    plan, base = make_plan(overall=100.0), make_plan(overall=100.0, sharder="torchrec")
    base = base.model_copy(update={"plan_id": "the-baseline"})
    stop = stop_rule(rules, plan.plan_id)
    tie = [b * r for b, r in zip(BASE, (1.0, 1.005, 0.995, 1.0, 1.0025), strict=True)]  # spread 2.5%
    assert quiet_enough(rules, tie, {"torchrec": BASE})
    assert [stop([(plan, tie[:n]), (base, BASE[:n])]) for n in (3, 4, 5)] == [False, False, True]
    jumpy = [*tie[:4], tie[4] * 1.08]  # one burst: the plan's spread is 8%
    assert not quiet_enough(rules, jumpy, {"torchrec": BASE})
    assert not stop([(plan, jumpy), (base, BASE)])
    assert not stop([(plan, tie), (base, [*BASE[:4], 120.0])])  # the deciding baseline's spread counts too
    # asked for 8 rounds: quiet at 5 is not enough, at 8 it is
    eight = stop_rule(rules, plan.plan_id, 8)
    assert not eight([(plan, tie), (base, BASE)])
    assert eight([(plan, tie + tie[:3]), (base, BASE + BASE[:3])])
    assert gate_rounds(rules, 5) == rules.max_rounds == 15 and gate_rounds(rules, 3) == 3
    assert gate_rounds(rules, 20) == 20


def test_the_rounds_params_are_checked() -> None:
    with pytest.raises(ValueError, match="max_rounds 4 is below min_rounds 5"):
        PublishConfig(max_rounds=4)
    for bad in ({"target_spread": 0.0}, {"target_spread": 1.5}, {"timing_passes": 0}, {"max_rounds": 101}):
        with pytest.raises(ValueError):
            PublishConfig(**bad)


def test_the_interval_width_is_in_the_sentence_and_the_json() -> None:
    rules = PublishConfig()
    ahead = [b * r for b, r in zip(BASE, (0.93, 0.95, 0.94, 0.95, 0.94), strict=True)]
    d = evaluate_gate(
        make_plan(overall=ahead[0]),
        {"torchrec": BASE},
        0.0,
        plan_samples=ahead,
        confidence=rules.confidence,
        looks=looks(rules.model_copy(update={"early_rounds": 0}), 5),
    )
    assert d.approved and d.ratio_low is not None and d.ratio_high is not None
    assert d.interval_width == pytest.approx(d.ratio_high - d.ratio_low)
    points = f"width {100 * d.interval_width:.1f} points"
    assert f"[{d.ratio_low:.4f}, {d.ratio_high:.4f}], {points}" in d.reason and points in d.finding
    assert '"interval_width":' in d.model_dump_json()


@pytest.mark.parametrize("margin", [0.0, 0.05])
def test_a_tie_is_inconclusive(margin: float) -> None:
    """A plan exactly at the threshold (exact figures: a zero-width interval) does not beat it: approved before."""
    d = evaluate_gate(make_plan(overall=100.0 * (1 - margin)), {"torchrec": 100.0}, margin)
    assert d.outcome == "inconclusive" and not d.approved, d.reason
    assert "ties" in d.reason and "width 0.0 points" in d.reason
    d = evaluate_gate(make_plan(overall=100.0), {"torchrec": BASE}, 0.0, plan_samples=BASE)
    assert d.outcome == "inconclusive" and not d.approved
    assert evaluate_gate(make_plan(overall=99.0), {"torchrec": 100.0}, 0.0).approved  # exact and faster: approved


class ScriptedBackend(ComputeBackend):
    """A real (not simulated) backend whose k-th device timing is the script's k-th figure."""

    name = "cpu"
    operator = "scripted"

    def __init__(self, figures: Sequence[float]) -> None:
        self.figures = list(figures)
        self.calls = 0

    def time_device(self, tables: Sequence[Table], batch_size: int, warmup: int, repeats: int) -> DeviceTiming:
        f = self.figures[self.calls % len(self.figures)]
        self.calls += 1
        return DeviceTiming((f,) * repeats, (f / 2,) * repeats)


def test_timing_passes_take_each_devices_median(world: World) -> None:
    """Two devices, three passes (devices in turn each pass): one burst (30 ms) moves one pass, not the figure."""
    backend = ScriptedBackend([10.0, 20.0, 30.0, 21.0, 11.0, 19.0])
    oracle = Oracle(backend, repeats=2)
    topo = world.topology.in_world(named_world("fast"))
    placement = {t.name: i % 2 for i, t in enumerate(world.inventory.tables)}
    with oracle.timing_as(3):
        m = oracle.measure(world.inventory, placement, topo)
    assert backend.calls == 6 and (oracle.passes, oracle.clock) == (1, "wall")  # restored after the block
    fwd = [d.fwd_compute for d in m.costs.per_device]
    assert fwd == [11.0, 20.0]  # device 0: median(10, 30, 11); device 1: median(20, 21, 19)
    assert oracle.measure(world.inventory, placement, topo).costs.per_device[0].fwd_compute == 10.0  # one pass
    assert not math.isnan(m.overall_ms)


def test_the_thread_clock_is_read_inside_its_block_only() -> None:
    assert base._CLOCK.get() is time.perf_counter
    with timing_clock("thread"):
        assert base._CLOCK.get() is time.thread_time
    assert base._CLOCK.get() is time.perf_counter
    with pytest.raises(ProfilingError, match="clock must be wall or thread"):
        with Oracle(ScriptedBackend([1.0])).timing_as(1, "cpu"):  # type: ignore[arg-type]
            pass
