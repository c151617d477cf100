"""All-to-all cost: a real ``torch.distributed`` micro-benchmark fitted to an alpha-beta model.

``benchmark_all_to_all`` starts ``min(world_size, max_procs)`` processes on 127.0.0.1 (a free port, gloo on
CPU; NCCL on GPUs when at least two are present), times ``all_to_all_single`` for several message sizes and
returns (megabytes leaving one rank, ms) points: the slowest rank of each repeat, median over repeats.
``fit_alpha_beta`` fits ``t = alpha + beta * MB`` by least squares with alpha, beta >= 0.

``comm_model_for(world_size, backend)`` returns the fitted ``CommModel``, cached per process and on disk
(``$DREAMSHARD_CACHE_DIR`` or ``~/.cache/dreamshard``, one JSON per backend / world size / torch version);
``refit=True`` forces a new benchmark. ``CommModel.world_size`` is the number of processes that really ran.
One device needs no communication (a zero model with backend ``none``). If the benchmark cannot run (no
loopback, spawn forbidden) the documented ``DEFAULT_ALPHA_MS`` / ``DEFAULT_BETA_MS_PER_MB`` are used and the
model is labelled ``backend="default"`` with a warning, never silently.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from dreamshard.errors import first_line
from dreamshard.io import atomic_write_text
from dreamshard.types import CommModel

log = logging.getLogger(__name__)

#: Bytes leaving one rank per all-to-all, benchmarked (16 KB ... 4 MB: a device's pooled outputs for
#: batch 2048 range from 128 KB (dim 16) to tens of MB; a few seconds in total on a laptop).
MESSAGE_BYTES: tuple[int, ...] = (16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20)
MAX_PROCS = int(os.environ.get("DREAMSHARD_COMM_MAX_PROCS", "4"))
#: Fallback when no benchmark can run: loopback-like latency and ~2 GB/s.
DEFAULT_ALPHA_MS = 0.05
DEFAULT_BETA_MS_PER_MB = 0.5

_MEMO: dict[tuple[str, int], CommModel] = {}

#: Fixed interconnect profiles (Topology.interconnect other than "measured"): not a benchmark, labelled so.
FAST_ALPHA_MS = 0.02
FAST_BETA_MS_PER_MB = 0.1  # 10 GB/s leaving each device


def profile_model(interconnect: str, world_size: int) -> CommModel:
    """The comm model of a fixed interconnect profile ("fast") for `world_size` devices."""
    if interconnect != "fast":
        raise ValueError(f"no fixed comm profile '{interconnect}'")
    if world_size <= 1:
        return zero_model()
    return CommModel(alpha_ms=FAST_ALPHA_MS, beta_ms_per_mb=FAST_BETA_MS_PER_MB, backend="profile:fast",
                     world_size=world_size)


def cache_dir() -> Path:
    env = os.environ.get("DREAMSHARD_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "dreamshard"


def _cache_path(backend: str, world_size: int) -> Path:
    ver = torch.__version__.replace("+", "_")
    return cache_dir() / f"comm-{backend}-w{world_size}-torch{ver}.json"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _worker(
    rank: int, world: int, port: int, backend: str, sizes: Sequence[int], warmup: int, repeats: int, out: str
) -> None:
    """One rank of the benchmark (module level so ``spawn`` can import it)."""
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    if os.path.exists("/sys/class/net/lo"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_threads(1)
    cuda = backend == "nccl"
    if cuda:
        torch.cuda.set_device(rank)
    dev = torch.device(f"cuda:{rank}" if cuda else "cpu")
    dist.init_process_group(backend, rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60))
    try:
        # Connections are set up lazily: a few untimed rounds first so the smallest size is not penalised.
        w = torch.ones(world * 16, device=dev)
        for _ in range(5):
            dist.all_to_all_single(torch.empty_like(w), w)
        results: list[tuple[float, float]] = []
        for nbytes in sizes:
            # Each rank sends nbytes to its peers in total: (world-1) chunks of nbytes/(world-1) bytes.
            chunk = max(1, int(nbytes / (world - 1) / 4))
            x = torch.ones(chunk * world, device=dev)
            y = torch.empty_like(x)
            times: list[float] = []
            for i in range(warmup + repeats):
                dist.barrier()
                if cuda:
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
                dist.all_to_all_single(y, x)
                if cuda:
                    torch.cuda.synchronize()
                if i >= warmup:
                    times.append((time.perf_counter() - t0) * 1e3)
            t = torch.tensor(times, dtype=torch.float64, device=dev)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)  # an all-to-all finishes when its slowest rank does
            sent_mb = chunk * 4 * (world - 1) / 1e6
            results.append((sent_mb, float(t.median().item())))
        if rank == 0:
            Path(out).write_text(json.dumps(results))
    finally:
        dist.destroy_process_group()


def _worker_main(argv: Sequence[str]) -> None:
    """Entry of one benchmark rank started as ``python -c`` (see ``benchmark_all_to_all``)."""
    rank, world, port, backend, sizes, warmup, repeats, out = argv
    _worker(int(rank), int(world), int(port), backend, [int(s) for s in sizes.split(",")], int(warmup), int(repeats), out)


def benchmark_all_to_all(
    world_size: int,
    backend: str = "gloo",
    sizes: Sequence[int] = MESSAGE_BYTES,
    warmup: int = 2,
    repeats: int = 7,
    timeout_s: float = 120.0,
) -> list[tuple[float, float]]:
    """Run the real all-to-all benchmark with ``world_size`` processes; (MB sent per rank, ms) points.

    Ranks are fresh interpreters (``sys.executable -c``), like ``torch.multiprocessing`` spawn, but they never
    re-import the caller's ``__main__``, so an unguarded user script cannot fork-bomb itself.
    """
    if world_size < 2:
        raise ValueError("all-to-all needs at least 2 processes")
    code = "import sys; from dreamshard.profiling.comm import _worker_main; _worker_main(sys.argv[1:])"
    with tempfile.TemporaryDirectory(prefix="dreamshard-a2a-") as tmp:
        out = os.path.join(tmp, "points.json")
        port = _free_port()
        args = [str(world_size), str(port), backend, ",".join(str(s) for s in sizes), str(warmup), str(repeats), out]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", code, str(rank), *args],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
            )
            for rank in range(world_size)
        ]
        errors: list[str] = []
        try:
            for p in procs:
                _, err = p.communicate(timeout=timeout_s)
                if p.returncode != 0:
                    lines = [ln for ln in err.decode(errors="replace").splitlines() if ln.strip()]
                    errors.append(lines[-1] if lines else f"exit code {p.returncode}")
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        if errors or not os.path.exists(out):
            raise RuntimeError(errors[0] if errors else "rank 0 wrote no result")
        return [(float(a), float(b)) for a, b in json.loads(Path(out).read_text())]


def fit_alpha_beta(points: Sequence[tuple[float, float]]) -> tuple[float, float, float]:
    """Least squares ``ms = alpha + beta * MB`` with alpha >= 0 and beta >= 0; returns (alpha, beta, r2)."""
    x = np.array([p[0] for p in points], dtype=np.float64)
    y = np.array([p[1] for p in points], dtype=np.float64)
    if x.size == 0:
        return 0.0, 0.0, 0.0
    candidates: list[tuple[float, float]] = []
    if x.size >= 2 and np.ptp(x) > 0:
        beta, alpha = np.polyfit(x, y, 1)
        if alpha >= 0 and beta >= 0:
            candidates.append((float(alpha), float(beta)))
    # Boundary solutions of the constrained problem (the optimum lies on one if OLS is infeasible).
    xx = float((x * x).sum())
    candidates.append((0.0, max(0.0, float((x * y).sum() / xx)) if xx > 0 else 0.0))
    candidates.append((max(0.0, float(y.mean())), 0.0))

    def sse(ab: tuple[float, float]) -> float:
        return float(((ab[0] + ab[1] * x - y) ** 2).sum())

    alpha, beta = min(candidates, key=sse)
    ss_tot = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - sse((alpha, beta)) / ss_tot if ss_tot > 0 else 1.0
    return alpha, beta, r2


def zero_model() -> CommModel:
    return CommModel(alpha_ms=0.0, beta_ms_per_mb=0.0, backend="none", world_size=1)


def default_model(world_size: int) -> CommModel:
    return CommModel(
        alpha_ms=DEFAULT_ALPHA_MS, beta_ms_per_mb=DEFAULT_BETA_MS_PER_MB, backend="default", world_size=world_size
    )


def comm_model_for(world_size: int, backend: str = "gloo", refit: bool = False, max_procs: int | None = None) -> CommModel:
    """The fitted alpha-beta model for ``world_size`` devices (memo -> disk cache -> benchmark)."""
    if world_size <= 1:
        return zero_model()
    procs = max(2, min(world_size, max_procs or MAX_PROCS))
    if backend == "nccl":  # one rank per GPU
        procs = max(2, min(procs, torch.cuda.device_count()))
    key = (backend, procs)
    if not refit and key in _MEMO:
        return _MEMO[key]
    path = _cache_path(backend, procs)
    if not refit and path.exists():
        try:
            model = CommModel.model_validate_json(path.read_text())
            _MEMO[key] = model
            return model
        except Exception:  # corrupt cache: refit
            pass
    try:
        points = benchmark_all_to_all(procs, backend)
    except Exception as e:  # noqa: BLE001 - any failure to start processes
        log.warning("all-to-all benchmark (%s, %d procs) failed (%s); using the labelled default model",
                    backend, procs, first_line(e))
        return default_model(procs)
    alpha, beta, r2 = fit_alpha_beta(points)
    model = CommModel(
        alpha_ms=alpha, beta_ms_per_mb=beta, backend=backend, world_size=procs,
        points=tuple((round(a, 6), round(b, 6)) for a, b in points), r2=round(r2, 6),
    )
    _MEMO[key] = model
    try:
        atomic_write_text(path, model.model_dump_json(indent=2))
    except OSError as e:
        log.warning("cannot write comm cache %s: %s", path, e.strerror)
    return model


def device_comm_bytes(batch_size: int, dims: Sequence[int], world_size: int, bytes_per_element: int = 4) -> float:
    """Bytes leaving one device in the forward all-to-all: its pooled outputs, the (N-1)/N share sent away.

    `dims` are the output widths of the device's tables (``Table.output_dim``: dim x the table's features, so a
    table serving k features sends k pooled outputs per sample)."""
    if world_size <= 1 or not dims:
        return 0.0
    return batch_size * sum(dims) * bytes_per_element * (world_size - 1) / world_size
