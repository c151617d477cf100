"""The gate's sequential rule (gate/sequential.py): early looks that stop the measuring when a bound is clear, a
final look at min_rounds otherwise, and one error budget for all of them."""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Any

import pytest
from store_helpers import World, gate_file_plan, gate_measured, make_plan

from dreamshard.errors import ConfigError, PlanError
from dreamshard.evaluation import compare_sharders
from dreamshard.gate import PublishConfig, evaluate_gate
from dreamshard.gate.sequential import decides_early, early_looks, looks, stop_rule
from dreamshard.profiling import make_oracle
from dreamshard.values import Costs, DeviceCost, Measurement, Topology


def test_the_looks_split_one_error_budget() -> None:
    rules = PublishConfig()
    assert [(x.rounds, round(x.confidence, 6), x.early) for x in early_looks(rules)] == [
        (3, 0.99, True),
        (4, 0.99, True),
    ]
    assert [(x.rounds, round(x.confidence, 6), x.early) for x in looks(rules, 5)] == [
        (3, 0.99, True),
        (4, 0.99, True),
        (5, 0.97, False),
    ]
    assert [x.rounds for x in looks(rules, 8)] == [3, 4, 8]  # the final look takes every round measured
    assert [x.rounds for x in looks(rules, 4)] == [3, 4]  # too few for the final look: only the early ones decide
    assert [x.rounds for x in looks(rules, 3)] == [3]
    assert looks(rules, 2) == ()
    one = PublishConfig(early_rounds=3)  # a single number: one early look, the final one at the rest
    assert [(x.rounds, round(x.confidence, 6)) for x in looks(one, 5)] == [(3, 0.99), (5, 0.96)]
    for plain in (PublishConfig(early_rounds=0), PublishConfig(early_rounds=[])):
        assert early_looks(plain) == () and [(x.rounds, x.confidence) for x in looks(plain, 5)] == [(5, 0.95)]
    # an early look at min_rounds or later is no early look, and spends nothing
    assert [(x.rounds, round(x.confidence, 6)) for x in looks(PublishConfig(min_rounds=4), 4)] == [(3, 0.99), (4, 0.96)]
    assert early_looks(PublishConfig(min_rounds=3)) == ()
    for bad, match in (
        (1, "at 1 round"),
        ([3, 1], "at 1 round"),
        (-1, "at -1 round"),
        ([3, 3], "more rounds than"),
        ([4, 3], "more rounds than"),
        (1000, "at most 99"),
        (True, "not true/false"),
    ):
        with pytest.raises(ValueError, match=match):
            PublishConfig(early_rounds=bad)
    with pytest.raises(ValueError, match="whole error budget"):
        PublishConfig(early_rounds=[2, 3, 4], early_share=0.34)
    assert PublishConfig(early_rounds=[2, 3, 4], early_share=0.33, min_rounds=5).early_round_list == (2, 3, 4)


BASE = [100.0, 101.0, 99.5, 100.4, 100.8]


def _gate(plan_ms: list[float], rules: PublishConfig | None = None) -> Any:
    rules = rules or PublishConfig(equivalence_margin=0.0)
    return evaluate_gate(
        make_plan(overall=plan_ms[0]),
        {"torchrec": BASE},
        rules.min_improvement,
        plan_samples=plan_ms,
        confidence=rules.confidence,
        looks=looks(rules, len(plan_ms)),
        equivalence=rules.equivalence_margin,
    )


def test_a_clear_win_is_decided_at_the_early_look() -> None:
    clear = [b * 0.9 for b in BASE]
    d = _gate(clear)
    assert d.approved and d.rounds == 3 and d.stopped_early and d.confidence == pytest.approx(0.99)
    assert "early look" in d.reason and "over 3 round(s)" in d.reason
    assert decides_early(PublishConfig(), clear, {"torchrec": BASE})
    d = _gate([b * 1.1 for b in BASE])
    assert d.outcome == "rejected" and d.rounds == 3 and d.stopped_early


def test_a_close_call_goes_to_the_final_look_at_the_rest_of_the_budget() -> None:
    close = [b * r for b, r in zip(BASE, (0.985, 0.975, 0.99, 0.985, 0.98), strict=True)]
    assert not decides_early(PublishConfig(), close, {"torchrec": BASE})
    d = _gate(close)
    assert d.approved and d.rounds == 5 and not d.stopped_early and d.confidence == pytest.approx(0.97)
    noise = [b * r for b, r in zip(BASE, (0.97, 1.03, 0.99, 1.02, 0.995), strict=True)]
    d = _gate(noise)
    assert d.outcome == "inconclusive" and d.rounds == 5 and not d.stopped_early


def test_parity_inside_the_equivalence_margin_is_decided_at_the_final_look_only() -> None:
    """Within +-3% each round: the final look's interval lies inside [0.96, 1.04], so the gate decides
    `equivalent`; a plan 1.5-2.5% faster every round is still approved (an early look never stops on parity), and an
    interval that reaches past the margin stays inconclusive."""
    margin = PublishConfig()  # equivalence_margin 0.04
    noise = [b * r for b, r in zip(BASE, (0.97, 1.03, 0.99, 1.02, 0.995), strict=True)]
    d = _gate(noise, margin)
    assert d.outcome == "equivalent" and not d.approved and d.rounds == 5
    assert 0.96 <= d.ratio_low and d.ratio_high <= 1.04 and "publish.equivalence_margin 4.0%" in d.reason
    close = [b * r for b, r in zip(BASE, (0.985, 0.975, 0.99, 0.985, 0.98), strict=True)]
    assert not decides_early(margin, close, {"torchrec": BASE}) and _gate(close, margin).approved
    wide = [b * r for b, r in zip(BASE, (0.94, 1.06, 0.99, 1.03, 0.97), strict=True)]
    assert _gate(wide, margin).outcome == "inconclusive"


def test_a_win_the_third_round_cannot_bound_is_decided_at_the_fourth() -> None:
    """Three rounds at 99% (Student's t with 2 degrees of freedom) need a wide margin; the fourth round's look
    decides a plan 4-8% ahead, and the gate's measuring stops there."""
    ahead = [b * r for b, r in zip(BASE, (0.92, 0.96, 0.94, 0.94, 0.95), strict=True)]
    d = _gate(ahead)
    assert d.approved and d.rounds == 4 and d.stopped_early and d.confidence == pytest.approx(0.99)
    assert "over 4 round(s)" in d.reason
    assert not decides_early(PublishConfig(), ahead[:3], {"torchrec": BASE[:3]})
    assert decides_early(PublishConfig(), ahead[:4], {"torchrec": BASE[:4]})
    assert _gate(ahead, PublishConfig(early_rounds=3)).rounds == 5  # one early look: the final look decides
    plan, base = make_plan(overall=ahead[0]), make_plan(overall=BASE[0], sharder="torchrec")
    base = base.model_copy(update={"plan_id": "the-baseline"})
    stop = stop_rule(PublishConfig(), plan.plan_id)
    assert [stop([(plan, ahead[:n]), (base, BASE[:n])]) for n in (2, 3, 4)] == [False, False, True]
    assert not stop([(plan, ahead[:4]), (base, BASE[:4]), (base, BASE[:4])])  # one baseline label twice


def test_the_error_rate_stays_within_the_budget_across_the_looks() -> None:
    """Plan and baseline the same placement (true ratio 1), noisy rounds: the rule approves (or rejects) no more
    often than 1 - confidence in all, though it looks three times; judged at 95% on each look it would not hold."""
    rng = random.Random(7)
    rules = PublishConfig()
    each_at_95 = [*looks(PublishConfig(early_rounds=0), 5)]
    each_at_95[:0] = [type(each_at_95[0])(r, 0.95, True) for r in (3, 4)]  # three looks, each at 95%
    wrong = wrong_naive = 0
    trials = 4000
    for _ in range(trials):
        base = [math.exp(rng.gauss(0, 0.05)) * 10 for _ in range(5)]
        mine = [math.exp(rng.gauss(0, 0.05)) * 10 for _ in range(5)]
        kw: dict[str, Any] = {"plan_samples": mine, "confidence": 0.95}
        wrong += (
            evaluate_gate(make_plan(), {"torchrec": base}, 0.0, looks=looks(rules, 5), **kw).outcome != "inconclusive"
        )
        wrong_naive += (
            evaluate_gate(make_plan(), {"torchrec": base}, 0.0, looks=each_at_95, **kw).outcome != "inconclusive"
        )
    # at most 5% (the Bonferroni bound), up to 3 standard errors of 4000 trials; three looks at 95%: over 9%
    assert wrong / trials < 0.06 and wrong_naive / trials > 0.075, (wrong / trials, wrong_naive / trials)


def test_a_look_past_the_rounds_is_an_error() -> None:
    from dreamshard.gate.bounds import Look

    with pytest.raises(ConfigError, match="a look at 6 round"):
        evaluate_gate(make_plan(), {"torchrec": BASE}, 0.0, plan_samples=BASE, looks=(Look(6, 0.95),))


class NoisyOracle:
    """The simulator with every measurement scaled by exp(N(0, sigma)): a machine with known noise."""

    def __init__(self, sigma: float, seed: int = 0) -> None:
        self.inner = make_oracle("simulator")
        self.info = self.inner.info
        self.corpus = None
        self.sigma = sigma
        self.rng = random.Random(seed)
        self.placements = 0

    def corpus_as(self, corpus: Any) -> AbstractContextManager[Any]:
        return self.inner.corpus_as(corpus)

    def measure(self, units: Any, placement: Mapping[str, int], topology: Topology, **kw: Any) -> Measurement:
        m = self.inner.measure(units, placement, topology, **kw)
        self.placements += 1
        f = math.exp(self.rng.gauss(0.0, self.sigma))
        per = [DeviceCost.from_list([x * f for x in d.as_list()]) for d in m.costs.per_device]
        return m.model_copy(update={"costs": Costs.from_devices(per)})


@pytest.fixture(scope="module")
def world() -> World:
    return World()


def test_the_gate_stops_measuring_when_the_early_look_decides(world: World) -> None:
    quiet = NoisyOracle(0.002)
    judged, d, cmp = gate_measured(world.good, world.inventory, quiet, world.rules)
    assert d.approved and d.stopped_early and cmp.rounds == d.rounds == 3
    assert quiet.placements == 3 * (len(world.baselines) + 1)  # 3 rounds of every contender, not 5
    again, d2 = gate_file_plan(world.good, world.inventory, cmp, world.rules)  # the comparison read back: same decision
    assert (d2.outcome, d2.rounds, d2.ratio_high) == (d.outcome, d.rounds, d.ratio_high)


def test_a_noisy_machine_measures_every_round_and_a_short_comparison_is_refused(world: World) -> None:
    busy = NoisyOracle(0.3, seed=1)
    _, d, cmp = gate_measured(world.bad, world.inventory, busy, world.rules)
    # spreads far above publish.target_spread: sequential rounds up to publish.max_rounds
    assert cmp.rounds == d.rounds == world.rules.max_rounds and not d.stopped_early
    short = compare_sharders(
        world.inventory,
        world.topology,
        world.baselines,
        NoisyOracle(0.3, seed=2),
        rounds=3,
        extra_plans=[world.bad],
        with_lower_bound=False,
    )
    with pytest.raises(
        PlanError, match=r"has 3 round.*early looks on them decide nothing.*measure 5 rounds \(evaluate.rounds\)"
    ):
        gate_file_plan(world.bad, world.inventory, short, world.rules)
    two = compare_sharders(
        world.inventory,
        world.topology,
        world.baselines,
        make_oracle("simulator"),
        rounds=2,
        extra_plans=[world.good],
        with_lower_bound=False,
    )
    with pytest.raises(
        PlanError, match=r"has 2 round.*at least 5 paired rounds \(publish.min_rounds; 3 when the early"
    ):
        gate_file_plan(world.good, world.inventory, two, world.rules)  # too few even for the early look
    with pytest.raises(PlanError, match="has 3 round"):  # no early look: 3 rounds are never enough
        gate_file_plan(world.good, world.inventory, short, world.rules.model_copy(update={"early_rounds": 0}))


def test_a_five_round_comparison_is_judged_as_the_measuring_would_have_stopped(world: World) -> None:
    """The exact simulator's 5-round comparison: its first 3 rounds decide, as measuring would have stopped there."""
    _, d = gate_file_plan(world.good, world.inventory, world.comparison, world.rules)
    assert d.approved and d.rounds == 3 and d.stopped_early and world.comparison.rounds == 5


def test_compare_with_one_plan_stops_where_the_gate_decides(tmp_path: Any) -> None:
    from dreamshard.cli.app import invoke
    from dreamshard.documents import save_inventory, save_plan
    from dreamshard.evaluation import load_comparison
    from dreamshard.inventory.synth import synth_inventory
    from dreamshard.sharders import get_sharder

    inv = synth_inventory(10, 0, name="inv")
    plan = get_sharder("lookup_greedy").shard(inv, Topology(num_devices=2, memory_per_device_gb=1.0, batch_size=512))
    save_inventory(inv, tmp_path / "inv.yaml")
    save_plan(plan.model_copy(update={"sharder": "dreamshard"}), tmp_path / "plan.json")
    params = tmp_path / "params.yaml"
    params.write_text("profile: {backend: simulator}\nevaluate: {rounds: 5}\npublish: {allow_simulated: true}\n")
    common = [
        "compare",
        "-i",
        str(tmp_path / "inv.yaml"),
        "--params",
        str(params),
        "--sharders",
        "dim_greedy,torchrec",
        "--plan",
        str(tmp_path / "plan.json"),
    ]
    assert invoke([*common, "--out", str(tmp_path / "a.json")])[0] == 0
    assert load_comparison(tmp_path / "a.json").rounds == 3
    assert invoke([*common, "--all-rounds", "--out", str(tmp_path / "b.json")])[0] == 0
    assert load_comparison(tmp_path / "b.json").rounds == 5
