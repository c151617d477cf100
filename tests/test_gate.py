"""The publish gate's decision rule: memory, baseline comparison with a margin, measured vs predicted basis.

Verification (the gate trusts nothing in the plan file) is in test_gate_verify.py."""

from __future__ import annotations

import pytest
from store_helpers import make_plan

from dreamshard.errors import ConfigError
from dreamshard.gate import evaluate_gate
from dreamshard.values import GateDecision


def test_approved_when_faster_than_best_baseline() -> None:
    d = evaluate_gate(make_plan(overall=8.0), {"size_greedy": 10.0, "dim_greedy": 12.0}, 0.1)
    assert d.approved
    assert d.best_baseline == "size_greedy" and d.best_baseline_ms == 10.0
    assert d.improvement == pytest.approx(0.2)
    assert d.basis == "measured" and d.plan_cost_ms == 8.0
    assert "size_greedy" in d.reason


def test_rejected_when_worse_than_baseline_names_figures() -> None:
    d = evaluate_gate(make_plan(overall=11.0), {"size_greedy": 10.0, "random": 30.0}, 0.0)
    assert not d.approved
    assert "11 ms" in d.reason and "size_greedy 10 ms" in d.reason
    assert d.improvement == pytest.approx(-0.1)


def test_min_improvement_margin_is_enforced() -> None:
    plan = make_plan(overall=9.5)  # 5% better
    assert evaluate_gate(plan, {"lookup_greedy": 10.0}, 0.04).approved
    assert evaluate_gate(plan, {"lookup_greedy": 10.0}, 0.05).outcome == "inconclusive"  # exactly the margin: a tie
    d = evaluate_gate(plan, {"lookup_greedy": 10.0}, 0.06)
    assert not d.approved and "6.0%" in d.reason and "9.4 ms" in d.reason


def test_a_tie_is_no_approval() -> None:
    plan = make_plan(overall=10.0)
    assert evaluate_gate(plan, {"size_greedy": 10.0}, 0.0).outcome == "inconclusive"  # approved before
    assert not evaluate_gate(plan, {"size_greedy": 10.0}, 0.01).approved


def test_memory_overflow_rejects_even_a_fast_plan() -> None:
    plan = make_plan(overall=1.0, memory=(0.5, 1.25), mem_cap=1.0)
    d = evaluate_gate(plan, {"size_greedy": 10.0}, 0.0)
    assert not d.approved
    assert "device 1 holds 1.250 GB" in d.reason and "1 GB memory limit" in d.reason


def test_predicted_basis_when_not_measured() -> None:
    d = evaluate_gate(make_plan(overall=5.0, basis="predicted"), {"dim_greedy": 6.0}, 0.0)
    assert d.approved and d.basis == "predicted"
    assert "predicted" in d.reason


def test_measured_preferred_over_predicted() -> None:
    plan = make_plan(overall=5.0, basis="predicted")
    measured = make_plan(overall=7.0).measured
    plan = plan.model_copy(update={"measured": measured})
    d = evaluate_gate(plan, {"dim_greedy": 6.0}, 0.0)
    assert not d.approved and d.basis == "measured" and d.plan_cost_ms == 7.0


def test_the_plans_sharder_label_never_removes_a_baseline() -> None:
    """A plan labelled like a baseline used to drop that baseline and compete with the others."""
    plan = make_plan(overall=5.0, sharder="lookup_greedy")
    d = evaluate_gate(plan, {"lookup_greedy": 4.0, "round_robin": 9.0}, 0.0)
    assert not d.approved and d.outcome == "rejected" and d.best_baseline == "lookup_greedy"
    assert not evaluate_gate(make_plan(overall=5.0), {}, 0.0).approved  # no baseline: nothing to beat


def test_no_costs_rejects() -> None:
    plan = make_plan().model_copy(update={"measured": None, "predicted": None})
    assert "neither measured nor predicted" in evaluate_gate(plan, {"x": 1.0}, 0.0).reason


def test_invalid_margin_and_baseline_values() -> None:
    with pytest.raises(ConfigError, match="min_improvement"):
        evaluate_gate(make_plan(), {"x": 1.0}, 1.5)
    with pytest.raises(ConfigError, match="baseline 'x'"):
        evaluate_gate(make_plan(), {"x": -1.0}, 0.0)


def test_decision_round_trips_json() -> None:
    d = evaluate_gate(make_plan(overall=8.0), {"size_greedy": 10.0}, 0.0)
    assert GateDecision.model_validate_json(d.model_dump_json()) == d


def test_out_of_range_plan_needs_a_measured_basis() -> None:
    plan = make_plan(overall=5.0, basis="predicted").model_copy(update={"out_of_range": ("table 't0' rows 1e9 > 1e7",)})
    d = evaluate_gate(plan, {"dim_greedy": 6.0}, 0.0)
    assert not d.approved and "outside the model's training ranges" in d.reason and "--measure" in d.reason
    measured = plan.model_copy(update={"measured": make_plan(overall=5.0).measured})
    assert evaluate_gate(measured, {"dim_greedy": 6.0}, 0.0).approved


def test_simulated_costs_are_labelled_simulated() -> None:
    from dreamshard.values import BackendInfo

    sim = BackendInfo(
        name="simulator",
        operator="analytic",
        device="cpu",
        num_threads=1,
        batch_size=512,
        warmup=0,
        repeats=1,
        is_simulated=True,
    )
    plan = make_plan(overall=5.0).model_copy(update={"measured_by": sim})
    d = evaluate_gate(plan, {"dim_greedy": 6.0}, 0.0)
    assert d.basis == "simulated" == plan.cost_basis and "simulated 5 ms" in d.reason


def test_decisions_recorded_before_the_best_baseline_rename_still_load() -> None:
    d = evaluate_gate(make_plan(overall=8.0), {"size_greedy": 10.0}, 0.0)
    data = d.model_dump(mode="json")
    assert data["best_baseline"] == "size_greedy" and "best_heuristic" not in data
    old = {k: v for k, v in data.items() if not k.startswith("best_baseline")}
    old |= {"best_heuristic": "size_greedy", "best_heuristic_ms": 10.0}
    assert GateDecision.model_validate(old) == d


# -- the bound on plan / best baseline ------------------------------------------------------
NOISY_BASE = [10.4, 18.7, 11.0, 16.5, 12.2]  # one placement measured on a busy machine


def test_noise_gives_an_inconclusive_decision_not_a_flip() -> None:
    """The same placement measured as plan and as baseline on a busy machine: neither approved nor rejected."""
    plan = make_plan(overall=12.2)
    swapped = [18.1, 10.9, 16.0, 11.5, 12.2]
    for samples in (NOISY_BASE[::-1], swapped):
        d = evaluate_gate(plan, {"lookup_greedy": NOISY_BASE}, 0.0, plan_samples=samples)
        assert d.outcome == "inconclusive" and not d.approved, d.reason
        assert d.ratio_low is not None and d.ratio_high is not None and d.ratio_low < 1 < d.ratio_high
        assert d.rounds == 5 and d.confidence == 0.95 and "the current plan stays" in d.reason


def test_a_clear_win_is_approved_and_a_clear_loss_rejected_despite_noise() -> None:
    plan = make_plan(overall=6.0)
    faster = [v * 0.6 for v in NOISY_BASE]  # 40% faster in every round: drift hits both alike
    d = evaluate_gate(plan, {"lookup_greedy": NOISY_BASE}, 0.1, plan_samples=faster)
    assert d.approved and d.outcome == "approved" and d.ratio_high is not None and d.ratio_high < 0.9
    slower = [v * 1.3 for v in NOISY_BASE]
    d = evaluate_gate(plan, {"lookup_greedy": NOISY_BASE}, 0.0, plan_samples=slower)
    assert d.outcome == "rejected" and d.ratio_low is not None and d.ratio_low > 1


def test_every_baseline_must_be_beaten_beyond_the_noise() -> None:
    plan = make_plan(overall=6.0)
    faster = [v * 0.6 for v in NOISY_BASE]
    close = [v * 0.62 for v in NOISY_BASE[::-1]]  # a second baseline the plan cannot be told apart from
    d = evaluate_gate(plan, {"lookup_greedy": NOISY_BASE, "torchrec": close}, 0.0, plan_samples=faster)
    assert d.outcome == "inconclusive" and d.decided_by == "torchrec"


def test_huge_and_unpaired_figures_are_errors_before_any_arithmetic() -> None:
    """1e308 baselines overflowed the median check."""
    with pytest.raises(ConfigError, match="below 1e"):
        evaluate_gate(make_plan(), {"x": [1e308, 1e308]}, 0.0, plan_samples=[1.0, 1.0])
    with pytest.raises(ConfigError, match="paired by round"):
        evaluate_gate(make_plan(), {"x": [1.0, 2.0, 3.0]}, 0.0, plan_samples=[1.0, 1.0])


def test_the_t_quantile() -> None:
    from dreamshard.gate.bounds import ratio_bound, t_quantile

    assert t_quantile(0.975, 4) == pytest.approx(2.776, abs=1e-3)
    assert t_quantile(0.95, 30) == pytest.approx(1.697, abs=1e-3)
    exact = ratio_bound([1.0, 1.0], [2.0, 2.0], 0.95)
    assert exact.low == exact.high == exact.ratio == pytest.approx(0.5)


def test_old_records_get_an_outcome_and_an_outcome_must_agree() -> None:
    data = evaluate_gate(make_plan(overall=8.0), {"size_greedy": 10.0}, 0.0).model_dump(mode="json")
    del data["outcome"]
    assert GateDecision.model_validate(data).outcome == "approved"
    with pytest.raises(ValueError, match="outcome"):
        GateDecision.model_validate({**data, "outcome": "inconclusive"})
    assert GateDecision.model_validate(data).overruled("no").outcome == "rejected"


def test_params_cannot_drop_torchrec() -> None:
    from dreamshard.gate import PublishConfig

    assert "torchrec" in PublishConfig().baselines and "random" not in PublishConfig().baselines  # GATE_BASELINES
    assert PublishConfig(baselines=("random", "torchrec")).baselines == ("random", "torchrec")
    with pytest.raises(ValueError, match="torchrec"):
        PublishConfig(baselines=("round_robin",))
    with pytest.raises(ValueError, match="not a baseline"):
        PublishConfig(baselines=("dreamshard", "torchrec"))


# -- the sentence quotes the figure, the improvement and the bound against one baseline -------------------------
PLAN_5 = [5.0] * 5


def _against_one_baseline(reason: str, decider: str, best: str | None) -> None:
    """Every figure before the bound is the decider's; the best baseline by median, when another, is named apart."""
    assert f"plan/{decider} in [" in reason, reason
    if best is None:
        assert f"best baseline {decider} " in reason and "deciding baseline" not in reason, reason
        return
    assert f"deciding baseline {decider} " in reason and f"best baseline by median {best} " in reason, reason
    assert f"best baseline {decider}" not in reason and f"plan/{best}" not in reason, reason


@pytest.mark.parametrize(
    ("base", "margin", "outcome", "against", "best"),
    [
        # lookup_greedy: 6 ms every round (+16.7%); torchrec: 6.6 ms median (+24.2%) but noisier, so it decides
        (
            {"lookup_greedy": [6.0] * 5, "torchrec": [5.9, 6.6, 7.3, 6.25, 6.95]},
            0.1,
            "approved",
            "vs deciding baseline torchrec 6.6 ms (+24.2%, required 10.0%; plan/torchrec in [",
            "); best baseline by median lookup_greedy 6 ms (+16.7%); fits memory",
        ),
        # torchrec is faster by median (4.3 ms) but noisy; lookup_greedy (4.5 ms every round) is clearly not beaten
        (
            {"lookup_greedy": [4.5] * 5, "torchrec": [4.2, 4.4, 4.3, 6.0, 4.1]},
            0.0,
            "rejected",
            "does not beat deciding baseline lookup_greedy 4.5 ms by 0.0% (needs <= 4.5 ms; improvement -11.1%; "
            "plan/lookup_greedy in [1.1111, 1.1111]",
            "); best baseline by median torchrec 4.3 ms (-16.3%)",
        ),
        (
            {"lookup_greedy": [6.25] * 5, "torchrec": [4.0, 10.0, 6.5, 9.0, 8.0]},
            0.1,
            "inconclusive",
            "vs deciding baseline torchrec 8 ms (+37.5%, required 10.0%) and ",
            "best baseline by median lookup_greedy 6.25 ms (+20.0%), but plan/torchrec in [",
        ),
    ],
    ids=["approved", "rejected", "inconclusive"],
)
def test_the_percentage_and_the_bound_are_against_the_deciding_baseline(
    base: dict[str, list[float]], margin: float, outcome: str, against: str, best: str
) -> None:
    """The sentence quoted +16.7% vs the best baseline by median and the bound of another ("vs best baseline
    lookup_greedy ... plan/torchrec in [...]"): now both are the decider's and the best one is named apart."""
    d = evaluate_gate(make_plan(overall=5.0), base, margin, plan_samples=PLAN_5)
    assert d.outcome == outcome and d.decided_by != d.best_baseline, d.reason
    assert against in d.reason and best in d.reason, d.reason
    _against_one_baseline(d.reason, d.decided_by or "", d.best_baseline)


def test_one_baseline_deciding_and_best_is_named_once() -> None:
    for base, margin in (({"size_greedy": [6.0] * 5}, 0.1), ({"size_greedy": [4.0] * 5}, 0.0)):
        d = evaluate_gate(make_plan(overall=5.0), base, margin, plan_samples=PLAN_5)
        assert d.decided_by == d.best_baseline == "size_greedy", d.reason
        _against_one_baseline(d.reason, "size_greedy", None)
