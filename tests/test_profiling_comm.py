"""All-to-all: the constrained alpha-beta fit, the byte accounting, and a real gloo benchmark with its cache."""

from __future__ import annotations

from pathlib import Path

import pytest

from dreamshard.profiling import comm, comm_fit
from dreamshard.values import CommModel


def test_fit_recovers_a_line() -> None:
    pts = [(mb, 0.3 + 2.0 * mb) for mb in (0.01, 0.1, 1.0, 4.0)]
    a, b, r2 = comm_fit.fit_alpha_beta(pts)
    assert a == pytest.approx(0.3) and b == pytest.approx(2.0) and r2 == pytest.approx(1.0)


def test_fit_keeps_alpha_and_beta_non_negative() -> None:
    falling = [(0.01, 5.0), (0.1, 4.0), (1.0, 3.0), (4.0, 1.0)]  # OLS slope < 0
    a, b, _ = comm_fit.fit_alpha_beta(falling)
    assert a >= 0 and b == 0.0 and a == pytest.approx(3.25)
    through_zero = [(1.0, 0.5), (2.0, 2.5), (3.0, 4.5)]  # OLS intercept < 0
    a, b, _ = comm_fit.fit_alpha_beta(through_zero)
    assert a == 0.0 and b > 0


def test_device_bytes_follow_the_pooled_outputs() -> None:
    assert comm.device_comm_bytes(2048, [16, 64], 1) == 0.0
    assert comm.device_comm_bytes(2048, [], 4) == 0.0
    assert comm.device_comm_bytes(2048, [16, 64], 4) == pytest.approx(2048 * 80 * 4 * 3 / 4)
    m = CommModel(alpha_ms=0.2, beta_ms_per_mb=1.5, backend="gloo", world_size=2)
    assert m.cost_ms(0) == 0.0
    assert m.cost_ms(1e6) < m.cost_ms(4e6)
    assert comm.comm_model_for(1).cost_ms(1e9) == 0.0


@pytest.mark.timing  # compares message timings: run in the serial first step, nothing else loading the cores
def test_real_gloo_benchmark_fit_and_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DREAMSHARD_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(comm, "_MEMO", {})
    model = comm.comm_model_for(2, "gloo", refit=True)
    assert model.backend == "gloo" and model.world_size == 2
    assert model.alpha_ms >= 0 and model.beta_ms_per_mb >= 0
    assert model.quality is not None and model.quality.ranks == 2
    sizes = comm_fit.fit_sizes("all_to_all", dense=model.quality.attempts > 1)
    assert len(model.points) == len(sizes) and all(ms > 0 for _, ms in model.points)
    assert model.cost_ms(8e6) >= model.cost_ms(1e5) > 0
    # The biggest message takes longer than the smallest one: the benchmark measured real transfers.
    assert model.points[-1][1] > model.points[0][1]
    assert list(tmp_path.glob("comm-gloo-w2-*.json"))

    # A new process (memo cleared) reads the disk cache instead of benchmarking again.
    monkeypatch.setattr(comm, "_MEMO", {})

    def no_benchmark(*a: object, **k: object) -> list[tuple[float, float]]:
        raise AssertionError("benchmark re-ran despite the cache")

    monkeypatch.setattr(comm, "benchmark_collective", no_benchmark)
    assert comm.comm_model_for(2, "gloo") == model


def test_failed_benchmark_falls_back_to_a_labelled_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DREAMSHARD_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(comm, "_MEMO", {})

    def broken(*a: object, **k: object) -> list[tuple[float, float]]:
        raise RuntimeError("no loopback")

    monkeypatch.setattr(comm, "benchmark_collective", broken)
    m = comm.comm_model_for(3, "gloo")
    assert m.backend == "default" and m.alpha_ms == comm.DEFAULT_ALPHA_MS
    assert not list(tmp_path.glob("*.json"))  # a default is never cached as if it were a fit
