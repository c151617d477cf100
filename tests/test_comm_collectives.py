"""Reduce-scatter and all-reduce: real gloo benchmarks fitted per collective, their caches (beside the
all-to-all's, never colliding), the rank-side fallback chain, the labelled defaults and the byte formulas."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
import torch

from dreamshard.profiling import collectives, comm, comm_fit
from dreamshard.values import CommModel, named_world

TINY = (16 << 10, 64 << 10, 256 << 10)  # bytes leaving a rank: keeps each real benchmark to ~2 s


def line_benchmark(alpha: float, beta: float, method: str) -> Callable[..., comm_fit.Benchmark]:
    """A benchmark whose every size (the held-out one last) takes exactly alpha + beta x MB."""

    def run(world: int, backend: str, collective: str, sizes: Sequence[int], *a: object) -> comm_fit.Benchmark:
        return comm_fit.Benchmark([(b / 1e6, alpha + beta * b / 1e6) for b in sizes], method, [(1, 1.0), (2, 1.0)])

    return run


@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DREAMSHARD_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(comm, "_MEMO", {})
    return tmp_path


@pytest.mark.parametrize("collective", ["reduce_scatter", "all_reduce"])
def test_real_gloo_fit_per_collective_and_its_cache(
    collective: str, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(comm_fit.COLLECTIVE_BYTES, collective, TINY)
    model = comm.comm_model_for(2, "gloo", refit=True, collective=collective)  # type: ignore[arg-type]
    # gloo runs both natively in torch >= 2.13 on CPU (no all_reduce+slice stand-in, so a plain label)
    assert model.collective == collective and model.backend == "gloo" and model.world_size == 2
    assert model.alpha_ms >= 0 and model.beta_ms_per_mb >= 0 and model.r2 is not None
    assert model.quality is not None and model.quality.ranks == 2 and model.measured_ranks == 2
    assert model.quality.held_out is not None  # a size measured beside the fit, never in it
    sizes = comm_fit.fit_sizes(collective, dense=model.quality.attempts > 1)  # type: ignore[arg-type]
    assert len(model.points) == len(sizes) and all(ms > 0 for _, ms in model.points)
    # the points are the bytes that really left a rank (tensor sizes rounded to whole floats per chunk)
    assert [mb for mb, _ in model.points] == pytest.approx([b / 1e6 for b in sizes], rel=1e-3)
    assert model.cost_ms(1e6) > 0
    files = sorted(p.name for p in cache.glob("*.json"))
    assert files == [comm._cache_path("gloo", 2, collective).name]
    assert files[0].startswith(f"comm-{collective}-gloo-w2-")

    # a new process (memo cleared) reads the disk cache instead of benchmarking again (a fit that passed, or a
    # labelled fallback within its hour)
    monkeypatch.setattr(comm, "_MEMO", {})

    def no_benchmark(*a: object, **k: object) -> comm_fit.Benchmark:
        raise AssertionError("benchmark re-ran despite the cache")

    monkeypatch.setattr(comm, "benchmark_collective", no_benchmark)
    assert comm.comm_model_for(2, "gloo", collective=collective) == model  # type: ignore[arg-type]


def test_cache_names_keep_the_all_to_all_file_and_never_collide(cache: Path) -> None:
    ver = torch.__version__.replace("+", "_")
    assert comm._cache_path("gloo", 4).name == f"comm-gloo-w4-torch{ver}.json"  # as before: old caches stay valid
    names = {comm._cache_path("gloo", 4, c).name for c in comm.COLLECTIVES}
    assert len(names) == 3


def test_a_cache_of_another_collective_is_not_taken(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a file under the reduce-scatter's name that holds an all-to-all model (hand-copied) is refitted
    a2a = CommModel(alpha_ms=0.1, beta_ms_per_mb=1.0, backend="gloo", world_size=2)
    comm._cache_path("gloo", 2, "reduce_scatter").write_text(a2a.model_dump_json())
    monkeypatch.setattr(comm, "benchmark_collective", line_benchmark(1.0 - 2 / 9, 20 / 9, "reduce_scatter_single"))
    m = comm.comm_model_for(2, "gloo", collective="reduce_scatter")
    assert m.collective == "reduce_scatter" and m.beta_ms_per_mb == pytest.approx(20 / 9)


def test_a_reduce_scatter_measured_as_all_reduce_is_labelled(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(comm, "benchmark_collective", line_benchmark(0.9, 1.0, "all_reduce+slice"))
    m = comm.comm_model_for(2, "gloo", collective="reduce_scatter")
    assert m.backend == "gloo:all_reduce+slice" and m.collective == "reduce_scatter"


def test_failed_benchmark_gives_a_labelled_default_per_collective(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*a: object, **k: object) -> comm_fit.Benchmark:
        raise RuntimeError("no loopback")

    monkeypatch.setattr(comm, "benchmark_collective", broken)
    m = comm.comm_model_for(3, "gloo", collective="all_reduce")
    assert m.backend == "default" and m.collective == "all_reduce" and m.alpha_ms == comm.DEFAULT_ALPHA_MS
    assert not list(cache.glob("*.json"))  # a default is never cached as if it were a fit
    one = comm.comm_model_for(1, collective="reduce_scatter")
    assert one.collective == "reduce_scatter" and one.cost_ms(1e9) == 0.0
    with pytest.raises(ValueError, match="unknown collective"):
        comm.comm_model_for(2, collective="broadcast")  # type: ignore[arg-type]


def test_rank_side_falls_back_when_the_process_group_lacks_a_reduce_scatter(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*a: object, **k: object) -> None:
        raise RuntimeError("ProcessGroupX does not support reduce_scatter")

    reduced: list[int] = []
    monkeypatch.setattr(collectives, "_RS_SINGLE", None)
    monkeypatch.setattr(collectives.dist, "reduce_scatter", refuse)
    monkeypatch.setattr(collectives.dist, "all_reduce", lambda x, *a, **k: reduced.append(x.numel()))
    name, op = collectives._pick_op("reduce_scatter", rank=1, world=2, dev=torch.device("cpu"))
    assert name == "all_reduce+slice" and reduced
    x = torch.arange(8, dtype=torch.float32)
    y = torch.zeros(8)
    op(y, x)
    assert y[:4].tolist() == [4.0, 5.0, 6.0, 7.0]  # rank 1's slice of the (here unreduced) input


@pytest.mark.parametrize("collective", ["all_to_all", "reduce_scatter", "all_reduce"])
@pytest.mark.parametrize("world", [2, 3, 4])
def test_rank_tensors_send_the_asked_bytes(collective: str, world: int) -> None:
    for nbytes in (16 << 10, 1 << 20, 32 << 20):
        chunk = collectives.chunk_elements(collective, nbytes, world)
        assert collectives.sent_megabytes(collective, chunk, world) == pytest.approx(nbytes / 1e6, rel=1e-3)


def test_byte_formulas() -> None:
    # reduce-scatter: partial sums of the whole batch x output dims, (n-1)/n of them sent
    assert comm.reduce_scatter_bytes(2048, [64, 32], 4) == pytest.approx(2048 * 96 * 4 * 3 / 4)
    assert comm.reduce_scatter_bytes(2048, [64], 1) == 0.0 and comm.reduce_scatter_bytes(2048, [], 4) == 0.0
    # all-reduce: rows x dim x 4 bytes of gradient, a ring sends 2(n-1)/n of it
    assert comm.all_reduce_bytes([(1000, 16), (500, 8)], 4) == pytest.approx((16000 + 4000) * 4 * 2 * 3 / 4)
    assert comm.all_reduce_bytes([(1000, 16)], 2, bytes_per_element=2) == pytest.approx(16000 * 2)
    assert comm.all_reduce_bytes([(1000, 16)], 1) == 0.0
    # the all-to-all's helper is unchanged
    assert comm.device_comm_bytes(2048, [16, 64], 4) == pytest.approx(2048 * 80 * 4 * 3 / 4)


def test_world_and_zero_models_carry_the_collective() -> None:
    assert comm.world_model(named_world("fast"), 4, "all_reduce").collective == "all_reduce"
    assert comm.world_model(named_world("fast"), 4).collective == "all_to_all"
    assert comm.zero_model("reduce_scatter").collective == "reduce_scatter"


def test_the_all_to_all_benchmark_times_only_the_bytes_leaving_a_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    # a rank's own chunk is a local copy as large as the message on 2 ranks (1/(N-1) of it on N): never timed
    calls: list[tuple[int, int, list[int], list[int]]] = []

    def record(y: torch.Tensor, x: torch.Tensor, out_splits: list[int], in_splits: list[int]) -> None:
        calls.append((y.numel(), x.numel(), list(out_splits), list(in_splits)))

    monkeypatch.setattr(collectives.dist, "all_to_all_single", record)
    for rank, world in ((0, 2), (1, 2), (2, 4)):
        (name, op), *_ = collectives._ops("all_to_all", rank, world)
        chunk = collectives.chunk_elements("all_to_all", 1 << 20, world)
        x = torch.zeros(chunk * world)
        op(torch.empty_like(x), x)
        _, sent, out_splits, in_splits = calls[-1]
        assert name == "all_to_all_single" and out_splits == in_splits
        assert in_splits[rank] == 0 and sum(in_splits) == sent == chunk * (world - 1)
        assert collectives.sent_megabytes("all_to_all", chunk, world) == pytest.approx(sent * 4 / 1e6)
