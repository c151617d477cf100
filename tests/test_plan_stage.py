"""The plan stage never loses to what it started from: verification measures the search-only plan
and the best heuristic's beside the learned candidates, a refined plan is measured whole against its start, and the
plan states what measurement added to the search-only plan.

The end-to-end test runs on a backend with a deliberately wrong fit: the all-to-all fit charges a byte 20x too
little, so the search (which plans on the fit) and a device timed alone (which pays the fit) disagree with a whole
plan (which pays the true exchange, waiting for the rank that sends the most). Before this change the refinement
kept two-device moves that made the whole plan slower, and the plan stage ended worse than search alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from scripted_oracle import ScriptedOracle

from dreamshard.config.settings import Settings, resolve
from dreamshard.documents import load_inventory, save_inventory
from dreamshard.inventory.synth import synth_inventory
from dreamshard.placement.expand import expand_plan
from dreamshard.profiling.oracle import Oracle
from dreamshard.profiling.simulator import SimulatorBackend
from dreamshard.sharders import get_sharder
from dreamshard.usecases import plan as plan_uc
from dreamshard.values import CommModel, Costs, Measurement, Plan, Topology
from dreamshard.values.costs import Collective

#: how many times too little the wrong fit charges a byte
TOO_CHEAP = 20.0


class WrongFitOracle(Oracle):
    """The simulator with an all-to-all fit that charges a byte TOO_CHEAP x too little. A device timed alone (what
    refinement times) pays the fit; a whole plan pays the true all-to-all, in which every rank waits for the one that
    sends the most bytes. Deterministic: any difference between two plans is the model's, not noise."""

    def __init__(self) -> None:
        super().__init__(SimulatorBackend(), warmup=0, repeats=1)

    def true_model(self, topology: Topology, collective: Collective) -> CommModel:
        return super().collective_model(topology, collective)

    def collective_model(self, topology: Topology, collective: Collective, refit: bool = False) -> CommModel:
        true = self.true_model(topology, collective)
        return true.model_copy(update={"beta_ms_per_mb": true.beta_ms_per_mb / TOO_CHEAP})

    def measure(self, inventory: Any, placement: Any, topology: Topology, **kw: Any) -> Measurement:
        m = super().measure(inventory, placement, topology, **kw)
        if len({int(d) for d in placement.values()}) < 2:  # one device timed alone: it pays the fit
            return m
        alpha = self.true_model(topology, "all_to_all").alpha_ms
        worst = max(d.fwd_comm for d in m.costs.per_device)
        pays = alpha + TOO_CHEAP * (worst - alpha) if worst > 0 else 0.0  # the slowest rank's bytes, at the true rate
        per = [
            d if d.total == 0 else d.model_copy(update={"fwd_comm": pays, "bwd_comm": pays}) for d in m.costs.per_device
        ]
        return m.model_copy(update={"costs": Costs.from_devices(per)})


def whole_ms(oracle: Oracle, inventory: Any, plan: Plan) -> float:
    units, placed = expand_plan(inventory, plan)
    return oracle.measure(units, placed, plan.topology).overall_ms


def _settings(tmp_path: Path) -> Settings:
    params = {
        "topology": {"memory_per_device_gb": 16.0, "batch_size": 2048},
        "profile": {"backend": "simulator", "warmup": 0, "repeats": 1},
        "plan": {"num_devices": 4, "verify": 3, "verify_rounds": 3, "refine_seconds": 120, "refine_rounds": 3},
    }
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    return resolve(tmp_path / "params.yaml")


@pytest.mark.parametrize("seed", [8, 9])
def test_under_a_wrong_fit_the_plan_stage_ends_no_worse_than_search_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """Verify 3 + refinement through the `plan` use case, judged by the backend's own whole-plan measurement: the
    plan is no slower than the search-only plan (the same search, without measurement). Before this change seed 8
    ended 1.016x the search-only plan (its verified plan measured 0.672x) and seed 9 1.104x: the refinement's moves
    were confirmed on two devices timed alone, where the wrong fit is what they pay."""
    oracle = WrongFitOracle()
    monkeypatch.setattr(Settings, "oracle", lambda self: oracle)
    monkeypatch.setattr(Settings, "plan_stage_oracle", lambda self: oracle)
    inv = synth_inventory(16, seed, name="wrong-fit")
    save_inventory(inv, tmp_path / "inv.yaml")
    settings = _settings(tmp_path)
    result = plan_uc.run(plan_uc.PlanRequest(settings=settings, inventory=inv, seed=seed))
    options = plan_uc.sharder_options("dreamshard", settings, None, seed)
    alone = get_sharder("dreamshard", **options, oracle=oracle).shard(inv, settings.topology_for_job(inv.job))
    assert alone.verification is None and alone.refinement is None  # search only: nothing measured
    final, search_only = whole_ms(oracle, inv, result.plan), whole_ms(oracle, inv, alone)
    assert final <= search_only * (1 + 1e-9), (final / search_only, result.plan.refinement)
    v = result.plan.verification
    assert v is not None and v.search_only_ms == pytest.approx(search_only)  # the same plan, measured the same
    assert v.stage_vs_search is not None and v.stage_vs_search == pytest.approx(final / search_only, rel=1e-6)
    assert any(c.role == "heuristic" for c in v.candidates) and any(c.role == "search only" for c in v.candidates)


TOPO = Topology(num_devices=2, memory_per_device_gb=4.0)
INV = synth_inventory(8, 0, name="v")


def _plans(names: list[str]) -> list[Plan]:
    return [get_sharder(n).shard(INV, TOPO).model_copy(update={"sharder": n}) for n in names]


def _field(named: list[tuple[str, str | None, bool]]) -> Any:
    """Contenders (source, role, baseline) on the plans of `_plans` of dim_greedy, size_greedy, lookup_greedy, ..."""
    from dreamshard.measured.contenders import Contender, Contenders

    plans = _plans(["dim_greedy", "size_greedy", "lookup_greedy", "size_lookup_greedy"][: len(named)])
    items = tuple(
        Contender(src, p, 1.0 + i, role, base)
        for i, ((src, role, base), p) in enumerate(zip(named, plans, strict=True))
    )
    return Contenders(items, {"heuristic:random": "no room"}, hold=False, search_only=0)


def test_verification_labels_the_search_only_and_heuristic_rows_and_states_the_kept_plan_against_search() -> None:
    from dreamshard.measured.verify import paired_ratio, verify_candidates

    field = _field(
        [("policy+search", "search only", False), ("lpt", None, False), ("lookup_greedy", "heuristic", True)]
    )
    labels = [c.label for c in field.items]
    assert labels == ["policy+search (search only)", "lpt", "heuristic:lookup_greedy"]
    oracle = ScriptedOracle(dict(zip(labels, [[10.0, 10.0, 10.2], [11.0, 11.0, 11.0], [9.0, 9.0, 9.0]], strict=True)))
    kept, _ = verify_candidates(INV, field, oracle, rounds=3)
    v = kept.verification
    assert v is not None and v.chosen == "lookup_greedy" and kept.placement == field.items[2].plan.placement
    assert [c.role for c in v.candidates] == ["search only", None, "heuristic"]
    assert [c.kept for c in v.candidates] == [False, False, True]
    assert v.search_only == "policy+search" and v.search_only_ms == 10.0
    assert v.kept_vs_search == pytest.approx(0.9) and v.stage_vs_search == v.kept_vs_search  # median of 9/10, 9/10.2
    assert v.best_baseline == "heuristic:lookup_greedy" and v.kept_vs_baseline == 1.0
    assert v.not_measured == {"heuristic:random": "no room"}
    # lpt, 10% behind the leader in two rounds of exact figures, is measured no more
    assert [c.rounds for c in v.candidates] == [3, 2, 3]
    assert paired_ratio([2.0, 3.0], [4.0]) == 0.5


def test_an_older_verification_record_still_loads_and_states_nothing() -> None:
    from dreamshard.values import RefineTrace, Verification
    from dreamshard.values.stage_report import stage_line, stage_vs_search

    oracle = ScriptedOracle({})
    old = {"backend": oracle.info.model_dump(), "rounds": 3, "chosen": "policy"}
    old["candidates"] = [{"source": "policy", "predicted_ms": 1.0, "measured_ms": 1.0, "spread": 0.0}]
    v = Verification.model_validate(old)
    assert v.search_only is None and v.stage_vs_search is None and v.candidates[0].label == "policy"
    trace = RefineTrace.model_validate(
        {"seconds": 1, "budget_s": 1, "rounds": 3, "tried": 2, "kept": 1, "device_timings": 4, "initial_ms": 2.0,
         "final_ms": 1.0, "measured_gain": 0.5}
    )  # fmt: skip
    assert trace.whole_rounds == 0 and trace.vs_start is None and not trace.reverted
    plan = _plans(["dim_greedy"])[0].model_copy(update={"verification": v, "refinement": trace})
    assert stage_vs_search(plan) is None and stage_line(plan) is None


def _trace(kept: int) -> Any:
    from dreamshard.values import RefineTrace

    return RefineTrace(
        seconds=1, budget_s=1, rounds=3, tried=3, kept=kept, device_timings=6, initial_ms=10, final_ms=9,
        measured_gain=0.1,
    )  # fmt: skip


def test_a_refined_plan_not_faster_in_every_whole_round_gives_way_to_its_start_and_the_report_says_so() -> None:
    from dreamshard.measured.stage import against_start
    from dreamshard.values import Verification, VerifiedCandidate
    from dreamshard.values.stage_report import stage_line, stage_vs_search

    start, refined = _plans(["dim_greedy", "size_greedy"])
    row = VerifiedCandidate(source="lpt", predicted_ms=1.0, measured_ms=9.0, spread=0.0, role="heuristic")
    v = Verification(
        backend=ScriptedOracle({}).info, rounds=3, candidates=(row,), chosen="lpt", search_only="policy",
        search_only_ms=10.0, kept_vs_search=0.9, stage_vs_search=0.9,
    )  # fmt: skip
    start = start.model_copy(update={"verification": v})
    # faster in two whole rounds, slower in the third: the start is kept
    oracle = ScriptedOracle({"dim_greedy": [9.0, 9.0, 9.0], "size_greedy": [8.0, 8.0, 9.5]})
    out = against_start(INV, start, refined, _trace(2), oracle, rounds=3)  # type: ignore[arg-type]
    assert out.placement == start.placement and out.refinement is not None and out.refinement.reverted
    assert out.refinement.whole_rounds == 3 and out.refinement.vs_start == pytest.approx(8.0 / 9.0)
    assert stage_vs_search(out) == pytest.approx(0.9)
    line = stage_line(out)
    assert line is not None and line.startswith("plan stage: 0.900x the search-only plan, measured interleaved")
    assert "kept lpt" in line and "its start kept" in line
    # faster in every round: the refined plan, its measured costs, and the stage figure times refined / start
    oracle = ScriptedOracle({"dim_greedy": [9.0, 9.0, 9.0], "size_greedy": [8.1, 8.1, 8.1]})
    out = against_start(INV, start, refined, _trace(2), oracle, rounds=3)  # type: ignore[arg-type]
    assert out.placement == refined.placement and out.refinement is not None and not out.refinement.reverted
    assert out.measured is not None and out.measured.overall_ms == 8.1
    assert stage_vs_search(out) == pytest.approx(0.81) and "refined plan 0.900x its start" in (stage_line(out) or "")
    # refinement alone (no verification): it started from the search-only plan
    oracle = ScriptedOracle({"dim_greedy": [9.0], "size_greedy": [8.1]})
    alone = start.model_copy(update={"verification": None})
    bare = against_start(INV, alone, refined, _trace(1), oracle, rounds=1)  # type: ignore[arg-type]
    assert stage_vs_search(bare) == pytest.approx(8.1 / 9.0)
    nothing = start.model_copy(update={"verification": None, "refinement": _trace(0)})
    assert stage_line(nothing) == "plan stage: the search-only plan (refinement confirmed no proposal)"


def test_the_plan_report_renders_the_stage_line_and_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dreamshard.cli.plan_cmd import plan_json, verification_table

    oracle = WrongFitOracle()
    monkeypatch.setattr(Settings, "oracle", lambda self: oracle)
    monkeypatch.setattr(Settings, "plan_stage_oracle", lambda self: oracle)
    save_inventory(synth_inventory(8, 2, name="r"), tmp_path / "inv.yaml")
    _settings(tmp_path)
    settings = resolve(tmp_path / "params.yaml", {"plan.refine_seconds": 0})
    result = plan_uc.run(plan_uc.PlanRequest(settings=settings, inventory=load_inventory(tmp_path / "inv.yaml")))
    shown = plan_json(result)["plan_stage"]
    assert isinstance(shown, dict) and shown["line"].startswith("plan stage: ")
    assert shown["vs_search_only"] == result.plan.verification.stage_vs_search  # type: ignore[union-attr]
    labels = [str(c) for c in verification_table(result.plan.verification).columns[0].cells]  # type: ignore[arg-type]
    assert any(label.endswith("(search only)") or "(search only)" in label for label in labels)


def test_a_calibrated_plan_faster_by_less_than_the_margin_keeps_the_uncalibrated_one() -> None:
    """Calibration is a measured step: the calibrated search's best (here the best predicted) must beat the plan of
    the search before calibration (the UNCALIBRATED seed, the default wherever it ranks) by the margin in every
    round; 2% faster is inside it, so the uncalibrated plan is kept and labelled the search-only plan."""
    from dreamshard.measured.contenders import search_only_candidate
    from dreamshard.measured.duel import MEASURED_GAIN_MARGIN
    from dreamshard.measured.verify import verify_candidates
    from dreamshard.values.search_result import UNCALIBRATED, Candidate

    ranked = [Candidate(s, {}, 1.0 + i) for i, s in enumerate(["policy+search", "lpt", UNCALIBRATED])]
    assert search_only_candidate(ranked).source == UNCALIBRATED
    field = _field([(UNCALIBRATED, "search only", False), ("policy+search", None, False), ("lpt", None, False)])
    labels = [c.label for c in field.items]
    fast = 10.0 * (1 - MEASURED_GAIN_MARGIN / 1.5)
    oracle = ScriptedOracle(dict(zip(labels, [[10.0] * 3, [fast] * 3, [12.0] * 3], strict=True)))
    kept, _ = verify_candidates(INV, field, oracle, rounds=3)
    v = kept.verification
    assert v is not None and v.chosen == UNCALIBRATED and v.search_only == UNCALIBRATED
    assert kept.placement == field.items[0].plan.placement
    # twice the margin faster in every round: the calibrated plan is kept
    oracle = ScriptedOracle(dict(zip(labels, [[10.0] * 3, [8.0] * 3, [12.0] * 3], strict=True)))
    kept, _ = verify_candidates(INV, field, oracle, rounds=3)
    v = kept.verification
    assert v is not None and v.chosen == "policy+search" and v.kept_vs_search == pytest.approx(0.8)


def _robust(script: dict[str, list[float]]) -> Plan:
    from dreamshard.measured.robust_verify import verify_robust
    from dreamshard.values import AccessAssumptions

    field = _field([("policy+search", "search only", False), ("lpt", None, False)])
    assumptions = AccessAssumptions(tables=1, examples=("t",), skews=(0.0, 1.05), predicted_regret=1.0, predicted_ms={})
    labels = [c.label for c in field.items]
    return verify_robust(
        INV, field, ScriptedOracle(dict(zip(labels, script.values(), strict=True))), assumptions, rounds=6
    )


def test_without_statistics_a_lower_median_inside_the_noise_keeps_the_search_only_plan() -> None:
    """The race's rounds cycle through the assumed distributions; a challenger replaces the search-only plan only
    when it was faster in every round by the margin, as the race keeps one with statistics: the least regret by
    medians alone kept LPT on a 2% gain over 3 rounds on a held-out task, 1.17x the search-only plan by the judge."""
    noisy = {"search": [10.0] * 6, "lpt": [9.5, 9.5, 10.5] * 2}  # a lower median, rounds lost
    plan = _robust(noisy)
    assert plan.verification is not None and plan.verification.chosen == "policy+search"
    assert plan.verification.stage_vs_search == pytest.approx(1.0)
    # 10% faster in every round under the assumed Zipf, 20% under uniform ids: kept, its worst regret 1 (the best
    # measured under both), its medians per distribution recorded (the assumed one first: rounds 0, 2, 4)
    faster = {"search": [10.0] * 6, "lpt": [9.0, 8.0] * 3}
    plan = _robust(faster)
    assert plan.verification is not None and plan.verification.chosen == "lpt"
    assert plan.assumptions is not None and plan.assumptions.measured_ms == {"1.05": 9.0, "0": 8.0}
    assert plan.assumptions.measured_regret == 1.0
