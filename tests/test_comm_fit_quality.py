"""Collective fits that describe the machine: never more ranks than cores, a quality bar (r2, monotone points, a
held-out size), a re-measurement and then a labelled fallback, derived larger worlds, caches that are refitted
when stale, foreign or failing, and the fit a plan records."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from dreamshard.cli.app import invoke
from dreamshard.learning.model_store import PACKAGED_DIR, load_model
from dreamshard.learning.planning_cost import comm_for
from dreamshard.profiling import comm, comm_fit, fit_quality
from dreamshard.sharders import get_sharder
from dreamshard.values import CommModel, Inventory, Table, Topology

Calls = list[tuple[int, int, int]]  # (ranks, sizes, repeats) of each benchmark run


def fake_benchmark(calls: Calls, shapes: Sequence[Callable[[float], float]]) -> Callable[..., comm_fit.Benchmark]:
    """A benchmark whose n-th run times a size of MB megabytes as ``shapes[n](MB)`` (the last shape repeats), with a
    per-peer cost of 0.05 ms a message."""

    def run(world: int, backend: str, collective: str, sizes: Sequence[int], warmup: int, repeats: int):
        calls.append((world, len(sizes), repeats))
        shape = shapes[min(len(calls), len(shapes)) - 1]
        peers = [(m, 0.3 + 0.05 * m) for m in (1, 2, 4, 8)]
        return comm_fit.Benchmark([(b / 1e6, shape(b / 1e6)) for b in sizes], "all_to_all_single", peers)

    return run


def line(mb: float) -> float:
    return 0.5 + 2.0 * mb


def scheduler_noise(mb: float) -> float:
    """What 4 ranks on 2 cores measured: 16 KB 3.78 ms, 262 KB 0.63 ms (not monotone, r2 ~0.3)."""
    return {0.016384: 3.78, 0.065536: 1.2, 0.262144: 0.63, 1.048576: 2.1, 4.194304: 4.0}.get(round(mb, 6), 1.0)


@pytest.fixture()
def cores2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Calls:
    """An empty cache, a machine of 2 cores, and the list the fake benchmarks append to."""
    monkeypatch.setenv("DREAMSHARD_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(comm, "_MEMO", {})
    monkeypatch.setattr(comm, "MAX_PROCS", None)
    monkeypatch.setattr(comm, "usable_cores", lambda: 2)
    return []


def test_never_more_ranks_than_cores_and_larger_worlds_are_derived(
    cores2: Calls, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(comm, "benchmark_collective", fake_benchmark(cores2, [line]))
    m8 = comm.comm_model_for(8, "gloo", max_procs=4)  # a cap above the cores does not raise them
    assert [ranks for ranks, _, _ in cores2] == [2]
    assert m8.world_size == 8 and m8.measured_ranks == 2 and m8.derived
    assert m8.beta_ms_per_mb == pytest.approx(2.0)  # bytes already carry the (N-1)/N share: beta as measured
    assert m8.per_peer_ms == pytest.approx(0.05)
    assert m8.alpha_ms == pytest.approx(0.5 + 0.05 * (7 - 1))  # 6 more peers than the 2-rank benchmark had
    m2 = comm.comm_model_for(2, "gloo")
    assert m2.alpha_ms == pytest.approx(0.5) and not m2.derived and len(cores2) == 1  # one fit per machine
    ar = comm_fit.derive(m2.model_copy(update={"collective": "all_reduce"}), 4)
    assert ar.alpha_ms == pytest.approx(0.5 + 0.05 * (6 - 2))  # a ring all-reduce: 2 (N-1) messages


def test_one_core_is_a_labelled_fallback_without_a_benchmark(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DREAMSHARD_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(comm, "_MEMO", {})
    monkeypatch.setattr(comm, "usable_cores", lambda: 1)
    monkeypatch.setattr(comm, "benchmark_collective", lambda *a, **k: pytest.fail("benchmarked on one core"))
    m = comm.comm_model_for(4, "gloo")
    assert m.backend == "default" and m.fallback is not None and "1 core" in m.fallback
    assert "fallback" in m.describe()


def test_oversubscribed_or_non_monotone_points_are_refused_and_remeasured(
    cores2: Calls, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(comm, "benchmark_collective", fake_benchmark(cores2, [scheduler_noise, line]))
    m = comm.comm_model_for(4, "gloo")
    assert len(cores2) == 2  # the first fit failed the bar: measured again
    first, second = cores2
    assert second[2] == 3 * first[2] and second[1] > first[1]  # more repeats and more sizes
    assert m.quality is not None and m.quality.passed and m.quality.attempts == 2 and m.fallback is None
    q = fit_quality.assess([(0.01, 1.0), (0.1, 1.1), (1.0, 2.0)], 1.0, 1.0, 0.99, None, ranks=4, cores=2, repeats=7)
    assert not q.passed and "4 ranks on 2 cores" in q.problems[0]


def test_a_fit_that_fails_twice_is_a_labelled_fallback_refitted_later(
    cores2: Calls, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(comm, "benchmark_collective", fake_benchmark(cores2, [scheduler_noise]))
    m = comm.comm_model_for(2, "gloo")
    assert len(cores2) == 2 and m.fallback is not None and "quality bar" in m.fallback
    assert m.quality is not None and not m.quality.passed and not m.quality.monotone
    assert "not monotone" in m.describe() or "not monotone" in m.fallback
    path = comm._cache_path("gloo", 2)
    assert path.exists()  # kept for `profile comm --show` and an hour's reuse, labelled
    monkeypatch.setattr(comm, "_MEMO", {})
    assert comm.comm_model_for(2, "gloo") == m and len(cores2) == 2  # within the hour: reused, said so
    old = m.quality.model_copy(update={"measured_at": datetime.now(timezone.utc) - timedelta(hours=2)})
    path.write_text(m.model_copy(update={"quality": old}).model_dump_json())
    monkeypatch.setattr(comm, "_MEMO", {})
    comm.comm_model_for(2, "gloo")
    assert len(cores2) == 4  # an old failing fit is measured again


def test_stale_foreign_and_unrated_caches_are_refitted(cores2: Calls, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(comm, "benchmark_collective", fake_benchmark(cores2, [line]))
    good = comm.comm_model_for(2, "gloo")
    assert good.quality is not None and good.quality.passed
    path = comm._cache_path("gloo", 2)
    for quality, why in (
        (good.quality.model_copy(update={"measured_at": datetime(2020, 1, 1, tzinfo=timezone.utc)}), "days old"),
        (good.quality.model_copy(update={"machine": "elsewhere / 64 cores"}), "another machine"),
        (good.quality.model_copy(update={"protocol": 1}), "benchmark protocol 1"),
        (None, "no quality record"),
    ):
        path.write_text(good.model_copy(update={"quality": quality}).model_dump_json())
        model, reason = comm_fit.cached_fit(path, "all_to_all", 2)
        assert model is None and why in reason
    path.write_text(good.model_dump_json())
    assert comm_fit.cached_fit(path, "all_to_all", 2) == (good, "")


def test_the_shipped_cards_noisy_fits_are_not_planned_on(cores2: Calls, monkeypatch: pytest.MonkeyPatch) -> None:
    card = load_model(PACKAGED_DIR).card
    fits = [c for c in card.comm_models if c.collective == "all_to_all"]
    assert fits and all(comm_fit.distrust(c) for c in fits)  # r2 0.60-0.78, not monotone
    monkeypatch.setattr(comm, "benchmark_collective", fake_benchmark(cores2, [line]))
    used = comm_for(Topology(num_devices=4, memory_per_device_gb=16.0), card.comm_models)
    assert used is not None and used.quality is not None and used.quality.passed and used.measured_ranks == 2
    hand_set = CommModel(alpha_ms=0.1, beta_ms_per_mb=1.0, backend="gloo", world_size=2)
    assert comm_fit.distrust(hand_set) == ""  # no points: a model set by hand is taken as given


def test_a_plan_records_the_fits_it_was_costed_with(cores2: Calls, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(comm, "benchmark_collective", fake_benchmark(cores2, [line]))
    inv = Inventory(
        name="fits",
        tables=tuple(
            Table(name=f"t{i}", num_embeddings=1000 * (i + 1), embedding_dim=16, pooling_factor=2.0) for i in range(6)
        ),
    )
    plan = get_sharder("dreamshard").shard(inv, Topology(num_devices=4, memory_per_device_gb=16.0, batch_size=512))
    assert plan.comm_fits and plan.comm_fits[0].collective == "all_to_all"
    assert plan.comm_fits[0].quality is not None and plan.comm_fits[0].quality.passed
    assert plan.comm_fits[0].world_size == 4 and plan.comm_fits[0].measured_ranks == 2


def test_profile_comm_shows_points_quality_and_what_planning_reuses(
    cores2: Calls, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(comm, "benchmark_collective", fake_benchmark(cores2, [line]))
    comm.comm_model_for(2, "gloo")
    noisy = CommModel(
        alpha_ms=3.8, beta_ms_per_mb=0.41, backend="gloo", world_size=4, points=((0.016, 3.78), (0.262, 0.63)), r2=0.28
    )
    comm._cache_path("gloo", 4).write_text(noisy.model_dump_json())
    code, out, _ = invoke(["profile", "comm", "--show", "-n", "8"])
    assert code == 0
    assert "r2 1.000, monotone, held-out 0%, 2 ranks on 2 cores, passed" in out and "reused by planning" in out
    assert "never used here: 4 ranks exceed this machine's 2 cores" in out
    assert "for 8 devices: 0.800 ms + 2.000 ms/MB" in out  # 0.5 + 6 x 0.05
    code, out, _ = invoke(["profile", "comm", "--json"])
    rows = json.loads(out)
    assert code == 0
    assert [r["reused_by_planning"] for r in rows] == [True, False]
    assert rows[0]["model"]["quality"]["held_out"]["megabytes"] == pytest.approx(0.786432)


def test_profile_without_an_inventory_is_one_line() -> None:
    code, _, err = invoke(["profile", "-o", "x.jsonl"])
    lines = err.strip().splitlines()
    assert code != 0 and len(lines) == 1 and "needs --inventory and --output" in lines[0]
