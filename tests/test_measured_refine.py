"""Measured refinement (`plan --refine-seconds`): proposals off the bottleneck measured on the
two devices they change; a proposal is kept only when the measurement confirms it."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest
import yaml

from dreamshard.cli.app import invoke
from dreamshard.documents import save_inventory
from dreamshard.measured.refine import refine_measured
from dreamshard.profiling.base import ComputeBackend, DeviceTiming
from dreamshard.profiling.corpus import DeviceCorpus
from dreamshard.profiling.oracle import Oracle
from dreamshard.values import CommModel, Inventory, RefineTrace, Table, Topology

TOPO = Topology(num_devices=3, memory_per_device_gb=4.0, batch_size=512)


class SumBackend(ComputeBackend):
    """A device costs the sum of its tables' pooling factors (ms), exactly: the optimum is known."""

    name, operator, device, is_simulated = "simulator", "analytic", "cpu", True

    def time_device(self, tables: Sequence[Table], batch_size: int, warmup: int, repeats: int) -> DeviceTiming:
        v = float(sum(t.pooling_factor for t in tables))
        return DeviceTiming((v,) * repeats, (0.0,) * repeats)

    def comm_model(self, world_size: int, collective: str = "all_to_all") -> CommModel:  # as the simulator's
        return CommModel(alpha_ms=0.0, beta_ms_per_mb=0.0, backend="none", world_size=world_size, collective=collective)  # type: ignore[arg-type]


def inventory() -> Inventory:
    weights = [9, 7, 6, 5, 4, 3, 2, 2, 1, 1]
    return Inventory(
        name="w",
        tables=tuple(
            Table(name=f"t{i}", num_embeddings=1000, embedding_dim=8, pooling_factor=w) for i, w in enumerate(weights)
        ),
    )


def true_max(inv: Inventory, placement: dict[str, int]) -> float:
    by = inv.by_name()
    return max(sum(by[n].pooling_factor for n, d in placement.items() if d == dev) for dev in range(TOPO.num_devices))


class Ticks:
    """A clock that advances one second per call: the budget is a number of steps, not wall time."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        self.t += 1.0
        return self.t


def assert_keep_rule_on_exact_costs(trace: RefineTrace) -> None:
    """Exact costs: a proposal is kept exactly when it measured faster, except the last one, which the budget may
    have cut short (then it is not kept, however it measured)."""
    for s in trace.steps[:-1]:
        assert s.kept == (s.measured_ms < s.incumbent_ms), s
    assert not trace.steps[-1].kept or trace.steps[-1].measured_ms < trace.steps[-1].incumbent_ms


def _run(predict, seconds: float = 400.0, corpus: DeviceCorpus | None = None):  # type: ignore[no-untyped-def]
    inv = inventory()
    oracle = Oracle(SumBackend(), warmup=0, repeats=1)
    oracle.corpus = corpus
    start = {t.name: 0 for t in inv.tables}  # everything on device 0: sum 40, optimum 14 (40 / 3 rounded up)
    placed, trace = refine_measured(inv, start, TOPO, oracle, predict, seconds, rounds=2, clock=Ticks())
    return inv, start, placed, trace


def test_with_a_right_model_refinement_reaches_the_known_optimum_region() -> None:
    by = inventory().by_name()
    inv, start, placed, trace = _run(lambda names: float(sum(by[n].pooling_factor for n in names)))
    assert true_max(inv, placed) <= 15 < true_max(inv, start)  # optimum 14
    assert trace.kept >= 3 and abs(trace.final_ms - true_max(inv, placed)) < 1e-9
    assert_keep_rule_on_exact_costs(trace)


def test_a_wrong_model_never_gets_a_move_kept_that_the_measurement_does_not_confirm() -> None:
    by = inventory().by_name()
    # the model believes light tables are heavy and heavy ones light: it proposes the wrong moves first
    inv, start, placed, trace = _run(lambda names: float(sum(10 - by[n].pooling_factor for n in names)), seconds=200)
    assert trace.tried > trace.kept  # it proposed moves the hardware refused
    current = dict(start)
    for s in trace.steps:
        if s.kept:
            assert s.measured_ms < s.incumbent_ms
    assert true_max(inv, placed) <= true_max(inv, current)  # never worse than where it started
    assert trace.final_ms == true_max(inv, placed)


def test_the_corpus_gains_every_refinement_timing(tmp_path: Path) -> None:
    by = inventory().by_name()
    corpus = DeviceCorpus(tmp_path / "corpus", "refine", reuse=False)
    _, _, _, trace = _run(lambda names: float(sum(by[n].pooling_factor for n in names)), seconds=60, corpus=corpus)
    lines = (tmp_path / "corpus" / "refine.jsonl").read_text().splitlines()
    assert len(lines) == trace.device_timings > 0  # fresh timings only: nothing read back from the corpus
    assert corpus.stats()["device_timings_reused"] == 0


def test_plan_refine_seconds_records_the_trace_and_refuses_other_sharders(tmp_path: Path) -> None:
    (tmp_path / "params.yaml").write_text(
        yaml.safe_dump(
            {"profile": {"backend": "simulator", "warmup": 0, "repeats": 1}, "plan": {"num_devices": 3, "samples": 0}}
        )
    )
    save_inventory(inventory(), tmp_path / "inv.yaml")
    args = ["plan", "-i", str(tmp_path / "inv.yaml"), "--params", str(tmp_path / "params.yaml"), "-m", "4"]
    code, out, err = invoke(
        [
            *args,
            "--refine-seconds",
            "3",
            "--stage-budget",
            "0",
            "--corpus",
            str(tmp_path / "c"),
            "-o",
            str(tmp_path / "p.json"),
        ]
    )
    assert code == 0, err
    trace = json.loads((tmp_path / "p.json").read_text())["refinement"]
    assert trace["budget_s"] == 3 and trace["tried"] >= 1 and "refinement:" in out
    assert (tmp_path / "c" / "refine.jsonl").is_file()
    # the default plan.stage_budget (3x the search): at most what the search's time leaves, never more than asked
    code, _, err = invoke([*args, "--refine-seconds", "3", "-o", str(tmp_path / "b.json")])
    budget = json.loads((tmp_path / "b.json").read_text())["refinement"]["budget_s"]
    assert code == 0 and 0 < budget <= 3, err
    code, _, err = invoke([*args, "-s", "dim_greedy", "--refine-seconds", "3", "-o", str(tmp_path / "q.json")])
    assert (
        code == 2
        and "plan.refine_seconds (--refine-seconds) needs the searching sharder" in err
        and not (tmp_path / "q.json").exists()
    )


def test_the_refinement_prediction_of_a_device_is_the_planning_cost_of_that_device() -> None:
    """refine_plan predicts a device from its units' summed states: the same as PlanningCost.predict."""
    import torch

    from dreamshard.explain.report import planning_cost_for

    inv = inventory()
    cost = planning_cost_for(None, TOPO)
    states = dict(zip(inv.table_names, cost.encode(list(inv.tables)), strict=True))
    names = ["t0", "t3", "t7"]
    with torch.no_grad():
        fast = float(cost.mean_device_costs(torch.stack([states[n] for n in names]).sum(0)).sum())
    tables = [t for t in inv.tables if t.name in names]
    assert fast == pytest.approx(cost.predict(tables, {n: 0 for n in names}).overall_ms, rel=1e-5)


def test_a_killed_corpus_writer_leaves_no_broken_line(tmp_path: Path) -> None:
    by = inventory().by_name()
    corpus = DeviceCorpus(tmp_path / "c", "refine", reuse=False)
    _run(lambda names: float(sum(by[n].pooling_factor for n in names)), seconds=10, corpus=corpus)
    f = tmp_path / "c" / "refine.jsonl"
    f.write_bytes(f.read_bytes() + b'{"key": "half')  # killed mid-line
    again = DeviceCorpus(tmp_path / "c", "refine")
    assert f.read_bytes().endswith(b"\n") and len(again) > 0


class NoisyBackend(SumBackend):
    """SumBackend with a seeded multiplicative jitter: rounds disagree, as on real hardware. Uniform in +-jitter,
    or Gaussian with standard deviation `jitter` (about this VM's: a device re-timed, CV 4.7%)."""

    def __init__(self, jitter: float, seed: int = 7, gaussian: bool = False) -> None:
        import random

        self.rng, self.jitter, self.gaussian = random.Random(seed), jitter, gaussian

    def time_device(self, tables: Sequence[Table], batch_size: int, warmup: int, repeats: int) -> DeviceTiming:
        f = (
            max(0.5, self.rng.gauss(1.0, self.jitter))
            if self.gaussian
            else 1.0 + self.rng.uniform(-self.jitter, self.jitter)
        )
        v = float(sum(t.pooling_factor for t in tables)) * f
        return DeviceTiming((v,) * repeats, (0.0,) * repeats)


def test_a_proposal_that_loses_a_round_stops_there_and_the_decisions_stay_the_keep_rule() -> None:
    """One round the new pair is not faster than the incumbent's fastest round ends the proposal: no later round
    could make it pass, so it costs one round, not `rounds`; a kept proposal was measured for every round."""
    by = inventory().by_name()
    inv = inventory()
    oracle = Oracle(NoisyBackend(0.05), warmup=0, repeats=1)
    start = {t.name: i % 3 for i, t in enumerate(inv.tables)}
    # a wrong model: most of its proposals lose on the hardware
    placed, trace = refine_measured(
        inv,
        start,
        TOPO,
        oracle,
        lambda names: float(sum(10 - by[n].pooling_factor for n in names)),
        400.0,
        rounds=4,
        clock=Ticks(),
    )
    dropped = [s for s in trace.steps if not s.kept]
    assert dropped and any(s.rounds == 1 for s in dropped)
    assert all(s.rounds == 4 + trace.confirm_rounds for s in trace.steps if s.kept) and trace.confirm_rounds == 3
    assert all(1 <= s.rounds <= 4 + 3 for s in trace.steps)
    # every proposal timed at most 2 devices x 2 placements per round it ran, plus the first whole measurement and
    # one of the whole new incumbent after each kept proposal; a kept one all 4 in every round
    assert trace.device_timings <= 3 + 3 * trace.kept + sum(4 * s.rounds for s in trace.steps)
    assert true_max(inv, placed) <= true_max(inv, start)


class CountingSum(SumBackend):
    """SumBackend that counts its device timings."""

    def __init__(self) -> None:
        self.timed = 0

    def time_device(self, tables: Sequence[Table], batch_size: int, warmup: int, repeats: int) -> DeviceTiming:
        self.timed += 1
        return super().time_device(tables, batch_size, warmup, repeats)


def test_a_lost_round_whose_receiving_device_already_fails_times_one_device_not_two() -> None:
    """The new pair's receiving device is timed first; at or above the incumbent's fastest round it ends the
    round (the pair's maximum is at least that), so the bottleneck's new load is not timed: same decisions, fewer
    timings. Exact costs (SumBackend), a model that proposes the worst move first: 9 -> device 1 makes device 1
    cost 9 + its load, more than the bottleneck it leaves."""
    by = inventory().by_name()
    inv = inventory()
    backend = CountingSum()
    oracle = Oracle(backend, warmup=0, repeats=1)
    start = {"t0": 0, "t1": 1, "t2": 1, "t3": 2, "t4": 2, "t5": 0, "t6": 0, "t7": 1, "t8": 2, "t9": 0}
    wrong = lambda names: float(sum(10 - by[n].pooling_factor for n in names))  # noqa: E731
    placed, trace = refine_measured(inv, start, TOPO, oracle, wrong, 40.0, rounds=3, clock=Ticks())
    assert backend.timed == trace.device_timings
    full = 3 + 3 * trace.kept + sum(4 * s.rounds for s in trace.steps)  # both devices of both pairs every round
    short = [s for s in trace.steps if not s.kept and s.measured_ms >= s.incumbent_ms]
    assert short and trace.device_timings < full  # some lost rounds timed the receiving device only
    assert_keep_rule_on_exact_costs(trace)
    assert true_max(inv, placed) <= true_max(inv, start)


class FirstReadingSpike(SumBackend):
    """SumBackend whose very first timing of one table set reads 3x its cost: one noisy reading, as a VM gives."""

    def __init__(self, spiked: frozenset[str]) -> None:
        self.spiked, self.fired = spiked, False

    def time_device(self, tables: Sequence[Table], batch_size: int, warmup: int, repeats: int) -> DeviceTiming:
        timing = super().time_device(tables, batch_size, warmup, repeats)
        if not self.fired and frozenset(t.name for t in tables) == self.spiked:
            self.fired = True
            return DeviceTiming(tuple(3 * v for v in timing.fwd_ms), timing.bwd_ms)
        return timing


def test_one_noisy_first_reading_does_not_pick_the_bottleneck_for_the_whole_budget() -> None:
    """Device 0 holds one heavy table (10) that no move or swap can improve, device 2 is the real bottleneck (14)
    and can go to 12; the first reading of device 0 says 30. The incumbent's devices are re-timed in every round,
    so after a few refused proposals device 0 reads 10 again and the refinement turns to device 2."""
    costs = {"A": 10, "B": 4, "C": 4, "D": 6, "E": 4, "F": 4}
    inv = Inventory(
        name="s",
        tables=tuple(Table(name=n, num_embeddings=1000, embedding_dim=8, pooling_factor=w) for n, w in costs.items()),
    )
    start = {"A": 0, "B": 1, "C": 1, "D": 2, "E": 2, "F": 2}  # 10 / 8 / 14
    oracle = Oracle(FirstReadingSpike(frozenset({"A"})), warmup=0, repeats=1)
    placed, trace = refine_measured(
        inv, start, TOPO, oracle, lambda names: float(sum(costs[n] for n in names)), 200.0, rounds=2, clock=Ticks()
    )
    assert trace.initial_ms == 14  # the start's bottleneck from all its timings: the spike outvoted
    assert any(s.devices[0] == 2 for s in trace.steps) and trace.kept >= 1
    assert true_max(inv, placed) == 12 and trace.final_ms == 12


def _worse_keeps(inv: Inventory, start: dict[str, int], trace: RefineTrace) -> int:
    """Kept proposals that made the true maximum of their two devices worse (replayed from the labels)."""
    by = inv.by_name()
    current, worse = dict(start), 0
    for s in (s for s in trace.steps if s.kept):
        words = s.proposal.split()
        if words[0] == "move":
            change = {words[1]: int(words[2].split("->")[1])}
        else:
            (u, bu), (w, dw) = words[1].split("@"), words[3].split("@")
            change = {u: int(dw), w: int(bu)}
        load = lambda p, dev: sum(by[t].pooling_factor for t, d in p.items() if d == dev)  # noqa: E731
        new = {**current, **change}
        worse += max(load(new, d) for d in s.devices) >= max(load(current, d) for d in s.devices) - 1e-9
        current = new
    return worse


def test_a_second_block_of_rounds_keeps_noise_from_piling_up_over_a_long_refinement(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No room to gain (an LPT start of 48 tables) and 5% timing noise: every kept proposal is noise. With one
    block of 3 rounds a neutral proposal passes one time in 20, and hundreds are tried; the confirmation block
    (3 fresh rounds that must pass too) makes it one in 400. Counted on the true costs, replayed; without the gain
    margin, whose rarer passes this arithmetic does not count."""
    import dreamshard.measured.duel as duel

    monkeypatch.setattr(duel, "MEASURED_GAIN_MARGIN", 0.0)
    import random

    r = random.Random(3)
    inv = Inventory(
        name="n",
        tables=tuple(
            Table(
                name=f"t{i:02d}",
                num_embeddings=1000,
                embedding_dim=8,
                pooling_factor=round(r.lognormvariate(0, 0.8), 2) + 0.1,
            )
            for i in range(48)
        ),
    )
    topo = Topology(num_devices=4, memory_per_device_gb=64.0, batch_size=512)
    loads, start = [0.0] * 4, {}
    for t in sorted(inv.tables, key=lambda t: -t.pooling_factor):
        d = loads.index(min(loads))
        start[t.name], loads[d] = d, loads[d] + t.pooling_factor
    by = inv.by_name()
    exact = lambda names: float(sum(by[n].pooling_factor for n in names))  # noqa: E731
    worse = {}
    for confirm in (0, 3):
        oracle = Oracle(NoisyBackend(0.05, seed=11, gaussian=True), warmup=0, repeats=1)
        placed, trace = refine_measured(
            inv, start, topo, oracle, exact, 800.0, rounds=3, clock=Ticks(), confirm=confirm
        )
        assert trace.tried > 200 and trace.confirm_rounds == confirm
        worse[confirm] = _worse_keeps(inv, start, trace)
    assert worse[0] >= 5 and worse[3] <= 1, worse
