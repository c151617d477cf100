"""The drift monitor measures paired (dreamshard.evaluation.drift, dreamshard.usecases.drift): the published plan and
a reference plan interleaved in the same rounds, judged on plan / reference against the ratio at publishing.

A host whose every timing is 1.8x slower (a scripted load factor with noise) and a real busy-loop process beside a
real CPU measurement leave the plan "not drifted", where comparing absolute milliseconds said +80%; a planted real
change (the tables of one of the plan's devices made 3x slower) is drifted, and calls for the fast path (replan)
while the hardware and the model's ranges are unchanged, a retrain when the hardware changed."""

from __future__ import annotations

import contextlib
import random
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from dreamshard.config.settings import Settings, resolve
from dreamshard.config.stages import DriftConfig
from dreamshard.errors import ConfigError
from dreamshard.evaluation.drift import (
    DriftReference,
    anchored_ratio,
    baseline_reference,
    calibration_reference,
    choose_path,
    hardware_change,
    judge_drift,
    measure_paired,
    read_history,
    record_check,
)
from dreamshard.evaluation.render import drift_line, trend_rows
from dreamshard.gate.bounds import ratio_bound
from dreamshard.gate.moves import move_charges, relative, uncharged_ratio
from dreamshard.inventory.synth import synth_inventory
from dreamshard.profiling import ProfileConfig
from dreamshard.profiling.oracle import Oracle
from dreamshard.profiling.simulator import SimulatorBackend, SimulatorParams
from dreamshard.sharders import get_sharder
from dreamshard.store import open_store, publish, push_inventory
from dreamshard.usecases import drift as drift_uc
from dreamshard.values import GateDecision, Inventory, Plan, Table, Topology
from dreamshard.values.drift import DriftCheck

TOPO = Topology(num_devices=2, memory_per_device_gb=4.0, batch_size=512, interconnect="fast")
CONFIDENCE, THRESHOLD, ROUNDS = 0.95, 0.2, 7


class ScriptedHost(SimulatorBackend):
    """A real (not simulated) backend: the simulator's device costs (each table named in `slow` costing that many
    times its own share: `SimulatorParams.table_slowdown`), times the host's `load` and a seeded noise (`noise`: the
    relative sd of a device timing)."""

    name = "cpu"
    operator = "scripted"
    device = "scripted-host"
    is_simulated = False

    def __init__(self, load: float = 1.0, noise: float = 0.03, slow: dict[str, float] | None = None) -> None:
        super().__init__(SimulatorParams(table_slowdown=tuple((slow or {}).items())))
        self.load, self.noise, self.rng = load, noise, random.Random(7)

    def compute_ms(self, tables: Sequence[Table], batch_size: int) -> tuple[float, float]:
        fwd, bwd = super().compute_ms(tables, batch_size)
        factor = self.load * max(0.5, self.rng.gauss(1.0, self.noise))
        return fwd * factor, bwd * factor


def oracle(**host: object) -> Oracle:
    return Oracle(ScriptedHost(**host), warmup=0, repeats=1)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def world() -> tuple[Inventory, Plan, Plan]:
    """An inventory, the published plan (measured as the gate records it) and its reference plan."""
    inv = synth_inventory(10, seed=3, name="drifty")
    plan = get_sharder("dim_greedy").shard(inv, TOPO)
    measured = Oracle(ScriptedHost(noise=0.0), warmup=0, repeats=1).measure(inv, plan.placement, TOPO)
    published = plan.model_copy(update={"measured": measured.costs, "measured_by": measured.backend})
    reference = get_sharder("round_robin").shard(inv, TOPO)
    assert reference.units() != published.units()
    return inv, published, reference


def check(world: tuple[Inventory, Plan, Plan], published_ratio: float | None, **host: object) -> DriftCheck:
    inv, plan, ref = world
    o = oracle(**host)
    paired = measure_paired(inv, plan, ref, o, ROUNDS)
    bound = ratio_bound(paired.plan_ms, paired.reference_ms, CONFIDENCE)
    source = "gate" if published_ratio is not None else "anchor"
    reference = DriftReference(ref, "baseline" if published_ratio else "calibration", published_ratio, source)
    return judge_drift(plan, reference, paired, bound, CONFIDENCE, THRESHOLD, o.info)


def quiet_ratio(world: tuple[Inventory, Plan, Plan]) -> float:
    """plan / reference on the quiet host, as the gate measured it when it published the plan."""
    inv, plan, ref = world
    paired = measure_paired(inv, plan, ref, oracle(), ROUNDS)
    return ratio_bound(paired.plan_ms, paired.reference_ms, CONFIDENCE).ratio


def test_a_busy_host_is_not_drift_where_absolute_milliseconds_said_it_was(world: tuple[Inventory, Plan, Plan]) -> None:
    """Every timing 1.8x slower and noisier (a load of 6 on the host): the absolute figure moved +80%, far past the
    20% threshold the old monitor fired on; the paired ratio stayed, so the plan has not drifted."""
    busy = check(world, quiet_ratio(world), load=1.8, noise=0.1)
    assert busy.host_change is not None and busy.host_change > 0.6  # what the absolute comparison saw
    assert not busy.drifted and busy.path == "none"
    assert busy.drift_low is not None and busy.drift_high is not None
    assert busy.drift_low <= busy.drift <= busy.drift_high and abs(busy.drift) < 0.1
    assert busy.rounds == ROUNDS and busy.reference == "round_robin" and busy.ratio_source == "gate"
    assert "ok" in drift_line(busy) and "not decisive" in drift_line(busy)


def test_one_devices_tables_made_slower_is_drift_and_calls_for_the_fast_path(
    world: tuple[Inventory, Plan, Plan],
) -> None:
    """The tables the plan put on device 0 cost 3x (their statistics moved): the plan lost ground against its
    reference beyond the noise; the hardware and the model's ranges are unchanged, so the path is the replan."""
    inv, plan, _ = world
    on_zero = {name: 3.0 for name, d in plan.placement.items() if d == 0}
    slowed = check(world, quiet_ratio(world), slow=on_zero)
    assert slowed.drifted and slowed.drift_low is not None and slowed.drift_low > THRESHOLD
    routed = choose_path(slowed, hardware_change(plan.measured_by, oracle().info), [])
    assert routed.path == "replan" and "fast path" in routed.path_reason
    assert "DRIFTED: replan" in drift_line(routed)
    other = oracle().info.model_copy(update={"device": "another-gpu"})
    retrain = choose_path(slowed, hardware_change(plan.measured_by, other), [])
    assert retrain.path == "retrain" and "device 'scripted-host' -> 'another-gpu'" in retrain.path_reason
    outside = choose_path(slowed, "", ["pooling factor 90 above the trained 40"])
    assert outside.path == "retrain" and "training ranges" in outside.path_reason
    assert choose_path(check(world, quiet_ratio(world)), "", ["x"]).path == "none"  # not drifted: no path at all


def test_a_wide_interval_is_not_drift_however_far_its_middle_moved(world: tuple[Inventory, Plan, Plan]) -> None:
    """Noise so large the interval straddles the threshold: the middle may sit past it, the verdict waits."""
    inv, plan, ref = world
    o = oracle()
    paired = measure_paired(inv, plan, ref, o, 3)
    reference = DriftReference(ref, "baseline", 1.0, "gate")

    class Wide:
        ratio, low, high = 1.3, 0.9, 1.9  # +30% in the middle, the interval from -10% to +90%

    wide = judge_drift(plan, reference, paired, Wide(), CONFIDENCE, THRESHOLD, o.info)
    assert wide.drift == pytest.approx(0.3) and not wide.drifted

    class Clear:
        ratio, low, high = 1.3, 1.25, 1.35

    assert judge_drift(plan, reference, paired, Clear(), CONFIDENCE, THRESHOLD, o.info).drifted
    with pytest.raises(ConfigError, match="threshold"):
        judge_drift(plan, reference, paired, Clear(), CONFIDENCE, 0.0, o.info)


def test_the_reference_is_the_gates_best_baseline_else_an_anchored_calibration(
    world: tuple[Inventory, Plan, Plan],
) -> None:
    inv, plan, _ = world
    decision = GateDecision(
        approved=True, outcome="approved", reason="approved", basis="measured", best_baseline="round_robin", ratio=0.9
    )
    found = baseline_reference(plan, inv, decision)
    assert found is not None and found.plan.sharder == "round_robin" and found.published_ratio == 0.9
    assert found.kind == "baseline" and found.source == "gate"
    charged = baseline_reference(plan, inv, decision.revised(uncharged_ratio=0.93))  # a re-plan: moves were charged
    assert charged is not None and charged.published_ratio == 0.93  # the drift check pairs the plans uncharged
    simulated = baseline_reference(plan, inv, decision.revised(basis="simulated"))  # the simulator's gate
    assert simulated is not None and simulated.published_ratio == 0.9
    for no in (
        None,  # the store holds no decision
        decision.revised(ratio=None),  # no measured ratio
        decision.revised(basis="predicted"),
        decision.revised(basis=None),
        decision.revised(proxy="cuda plan measured on cpu"),
        decision.revised(best_baseline="current"),  # the current plan of the day: no sharder re-plans it
        decision.revised(best_baseline="dim_greedy"),  # the plan's own placement: a reference equal to it
    ):
        assert baseline_reference(plan, inv, no) is None
    first = calibration_reference(plan, inv, ("dim_greedy", "size_greedy"), [])
    assert first.plan.sharder == "size_greedy" and first.published_ratio is None  # dim_greedy is the plan itself
    anchor = check(world, None)
    assert anchor.ratio_source == "anchor" and anchor.drift == 0.0 and not anchor.drifted
    assert anchor.published_ratio == anchor.ratio and "anchors" in anchor.path_reason
    assert anchored_ratio([anchor], plan.plan_id, "round_robin") == anchor.ratio
    assert anchored_ratio([anchor], "another-plan", "round_robin") is None
    with pytest.raises(ConfigError, match="drift.reference_sharders"):
        calibration_reference(plan, inv, ("dim_greedy",), [])


def test_a_replans_decision_keeps_the_ratio_as_measured_before_moves_were_charged(
    world: tuple[Inventory, Plan, Plan],
) -> None:
    """The gate charges a re-plan's contenders their moves; a drift check pairs the same plans uncharged, so the
    ratio it repeats is the measured one (charged, a steady plan read as drift)."""
    inv, plan, other = world
    plan_ms, base_ms = [1.0, 1.1, 0.9], [1.2, 1.3, 1.1]
    charges = move_charges(other, {"judged": plan, "round_robin": other}, inv, horizon=10)
    assert charges["judged"].per_step_ms > 0 and charges["round_robin"].per_step_ms == 0
    charged = relative(base_ms, charges["round_robin"].per_step_ms, charges["judged"].per_step_ms)
    measured = uncharged_ratio(plan_ms, {"round_robin": base_ms}, "round_robin", charges)
    assert measured == pytest.approx(ratio_bound(plan_ms, base_ms, 0.95).ratio)
    assert measured != pytest.approx(ratio_bound(plan_ms, charged, 0.95).ratio)
    assert uncharged_ratio(plan_ms, {"round_robin": base_ms}, "round_robin", {}) is None  # nothing charged
    assert uncharged_ratio(plan_ms, {"round_robin": base_ms}, "current", charges) is None  # no samples


def test_checks_keep_their_history_and_old_unpaired_checks_still_read(
    world: tuple[Inventory, Plan, Plan], tmp_path: Path
) -> None:
    store = open_store(str(tmp_path / "store"))
    old = DriftCheck.model_validate(  # a check written before paired checks (absolute ms)
        {
            "plan_id": "plan-old",
            "inventory_name": "drifty",
            "inventory_fingerprint": "f" * 64,
            "backend": "cpu",
            "rounds": 3,
            "now_ms": 24.65,
            "measured_ms": 18.16,
            "predicted_ms": None,
            "basis": "measured",
            "drift": 0.357,
            "drift_vs_predicted": None,
            "threshold": 0.2,
            "drifted": True,
        }
    )
    assert not old.paired and "DRIFTED" in drift_line(old)
    record_check(store, old)
    new = check(world, quiet_ratio(world), load=1.8)
    history = record_check(store, new, keep=2)
    assert read_history(store, "drifty") == history == [old, new]
    assert record_check(store, new, keep=2) == [new, new]  # the last `keep` checks, oldest first
    rows = trend_rows(history)  # newest first
    assert rows[0]["reference"] == "round_robin" and rows[0]["path"] == "none" and "[" in str(rows[0]["drift"])
    assert rows[1]["drift"] == "+35.7% (ms)" and rows[1]["reference"] == "-"


def test_drift_settings_refuse_a_reference_that_is_no_heuristic_and_too_few_rounds(tmp_path: Path) -> None:
    for bad, field in (({"reference_sharders": ["dreamshard"]}, "reference sharder"), ({"rounds": 1}, "rounds")):
        path = tmp_path / "p.yaml"
        path.write_text(f"drift: {bad}\n".replace("'", '"'))
        with pytest.raises(ConfigError, match=field):
            resolve(path)
    assert Settings().drift.rounds == 5 and Settings().drift.reference_sharders[0] == "dim_greedy"


@contextlib.contextmanager
def cpu_hog(processes: int = 2) -> Iterator[None]:
    """A real busy-loop process per core, started (and ended, by its pid) by the test."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(processes)]
    try:
        yield
    finally:
        for h in hogs:
            h.kill()
            h.wait()


@pytest.mark.timing  # measures on the real CPU and loads it: the serial timing step, nothing else on the cores
def test_the_same_plan_on_a_real_cpu_beside_a_busy_loop_is_not_drifted() -> None:
    """The real CPU backend, timed as the gate times (3 passes on the thread clock): the published ratio measured
    first, then the same plan and reference again with a busy loop on every core beside them: not drifted."""
    inv = synth_inventory(6, seed=5, name="hogged")
    topo = Topology(num_devices=2, memory_per_device_gb=1.0, batch_size=256, interconnect="fast")
    plan, ref = get_sharder("dim_greedy").shard(inv, topo), get_sharder("round_robin").shard(inv, topo)
    cpu = ProfileConfig(backend="cpu", warmup=1, repeats=2, statistic="median").oracle()
    try:
        with cpu.timing_as(3, "thread"):
            before = measure_paired(inv, plan, ref, cpu, 5)
            with cpu_hog():
                paired = measure_paired(inv, plan, ref, cpu, 5)
        published = ratio_bound(before.plan_ms, before.reference_ms, CONFIDENCE).ratio
        bound = ratio_bound(paired.plan_ms, paired.reference_ms, CONFIDENCE)
        got = judge_drift(
            plan, DriftReference(ref, "baseline", published, "gate"), paired, bound, CONFIDENCE, THRESHOLD, cpu.info
        )
    finally:
        cpu.close()
    assert not got.drifted, drift_line(got)


def published_store(world: tuple[Inventory, Plan, Plan], tmp_path: Path, ratio: float | None) -> str:
    """A store where the world's plan is current, the gate's record naming round_robin with `ratio` (None: a
    decision without a measured ratio: the monitor falls back to a calibration reference)."""
    inv, plan, _ = world
    uri = str(tmp_path / "store")
    store = open_store(uri)
    push_inventory(store, inv)
    decision = GateDecision(
        approved=True,
        outcome="approved",
        reason="approved",
        plan_id=plan.plan_id,
        basis="measured",
        best_baseline="round_robin",
        ratio=ratio,
    )
    publish(store, plan, decision)
    return uri


def test_the_use_case_measures_paired_on_the_gates_reference_and_routes_a_drift(
    world: tuple[Inventory, Plan, Plan], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the use case (what the CLI and the drift-monitor deployment call): the gate's record names the
    reference; a busy host is ok, the planted slow device is drifted with the replan path (the packaged model
    covers the inventory, the host is the one that measured the plan); `progress` gets a line per measurement."""
    inv, plan, _ = world
    uri = published_store(world, tmp_path, quiet_ratio(world))
    request = drift_uc.DriftRequest(inventory_name="drifty", store=uri)
    target = drift_uc.prepare(request)
    assert target.decision is not None and target.decision.best_baseline == "round_robin"
    lines: list[str] = []
    monkeypatch.setattr(Settings, "oracle", lambda self: oracle(load=1.8, noise=0.1))
    busy = drift_uc.measure(target, request, lines.append)
    rounds = request.settings.drift.rounds
    assert not busy.drifted and busy.reference_kind == "baseline" and busy.ratio_source == "gate"
    assert len(lines) == 2 * rounds and lines[0].startswith(f"round 1/{rounds}: measuring")  # one per measurement
    on_zero = {name: 3.0 for name, d in plan.placement.items() if d == 0}
    monkeypatch.setattr(Settings, "oracle", lambda self: oracle(slow=on_zero))
    slowed = drift_uc.measure(target, request)
    assert slowed.drifted and slowed.path == "replan", slowed.path_reason

    class OtherHost(ScriptedHost):
        device = "another-host"

    monkeypatch.setattr(Settings, "oracle", lambda self: Oracle(OtherHost(slow=on_zero), warmup=0, repeats=1))
    moved = drift_uc.measure(target, request)  # the same drift measured on other hardware: the model learned another
    assert moved.drifted and moved.path == "retrain" and "'scripted-host' -> 'another-host'" in moved.path_reason


def test_without_a_gate_ratio_the_first_check_anchors_a_calibration_reference(
    world: tuple[Inventory, Plan, Plan], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inv, plan, _ = world
    uri = published_store(world, tmp_path, None)
    settings = Settings(drift=DriftConfig(reference_sharders=("dim_greedy", "round_robin")))
    request = drift_uc.DriftRequest(settings=settings, inventory_name="drifty", store=uri)
    monkeypatch.setattr(Settings, "oracle", lambda self: oracle())
    first = drift_uc.run(request)
    assert first.check.reference == "round_robin" and first.check.ratio_source == "anchor"  # dim_greedy: the plan
    assert not first.check.drifted and first.check.published_ratio == first.check.ratio
    on_zero = {name: 3.0 for name, d in plan.placement.items() if d == 0}
    monkeypatch.setattr(Settings, "oracle", lambda self: oracle(slow=on_zero))
    second = drift_uc.run(request)
    assert second.check.published_ratio == first.check.ratio and second.check.drifted
    assert [c.plan_id for c in second.history] == [plan.plan_id] * 2
