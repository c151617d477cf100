"""Collective costs: ``torch.distributed`` micro-benchmarks fitted to alpha-beta models (cached per machine and
world size), the bytes each collective moves off one device, and a device's traffic costed on a topology with
hosts. The model and its assumptions: docs/architecture.md, "Communication costs".
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple, get_args

import numpy as np

from dreamshard.documents import atomic_write_text
from dreamshard.errors import first_line
from dreamshard.values import CommModel, Topology
from dreamshard.values.costs import Collective

log = logging.getLogger(__name__)

#: Bytes leaving one rank per all-to-all, benchmarked (16 KB ... 4 MB: a device's pooled outputs for
#: batch 2048 range from 128 KB (dim 16) to tens of MB).
MESSAGE_BYTES: tuple[int, ...] = (16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20)
#: ... per reduce-scatter: a device's partial pooled sums of its row-wise tables for the whole batch
#: (batch 2048 x dim 64 x 4 = 512 KB per table; several tables: MBs).
REDUCE_SCATTER_BYTES: tuple[int, ...] = (64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20)
#: ... per all-reduce: 2(n-1)/n of the dense gradients of small replicated tables (KBs to tens of MB).
ALL_REDUCE_BYTES: tuple[int, ...] = (64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 32 << 20)
COLLECTIVE_BYTES: dict[str, tuple[int, ...]] = {
    "all_to_all": MESSAGE_BYTES,
    "reduce_scatter": REDUCE_SCATTER_BYTES,
    "all_reduce": ALL_REDUCE_BYTES,
}
COLLECTIVES: tuple[str, ...] = get_args(Collective)
MAX_PROCS = int(os.environ.get("DREAMSHARD_COMM_MAX_PROCS", "4"))
#: Fallback when no benchmark can run: loopback-like latency and ~2 GB/s.
DEFAULT_ALPHA_MS = 0.05
DEFAULT_BETA_MS_PER_MB = 0.5
#: Assumed latency of a collective that crosses hosts (a parameter, like Topology.inter_host_gbps): 20 us.
INTER_HOST_LATENCY_MS = 0.02
#: The op a process group without a reduce-scatter is measured with instead (collectives.py).
_FALLBACK_METHOD = "all_reduce+slice"

_MEMO: dict[tuple[str, int, str], CommModel] = {}

#: Fixed interconnect profiles (Topology.interconnect other than "measured"): not a benchmark, labelled so.
FAST_ALPHA_MS = 0.02
FAST_BETA_MS_PER_MB = 0.1  # 10 GB/s leaving each device


def _check_collective(collective: str) -> None:
    if collective not in COLLECTIVES:
        raise ValueError(f"unknown collective '{collective}'; choose from {', '.join(COLLECTIVES)}")


def profile_model(interconnect: str, world_size: int, collective: Collective = "all_to_all") -> CommModel:
    """The comm model of a fixed interconnect profile ("fast") for `world_size` devices."""
    if interconnect != "fast":
        raise ValueError(f"no fixed comm profile '{interconnect}'")
    if world_size <= 1:
        return zero_model(collective)
    return CommModel(
        alpha_ms=FAST_ALPHA_MS,
        beta_ms_per_mb=FAST_BETA_MS_PER_MB,
        backend="profile:fast",
        world_size=world_size,
        collective=collective,
    )


def cache_dir() -> Path:
    env = os.environ.get("DREAMSHARD_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "dreamshard"


def _cache_path(backend: str, world_size: int, collective: str = "all_to_all") -> Path:
    import torch  # loads torch (the fit's cache key names its version): here, so that importing this module does not

    ver = torch.__version__.replace("+", "_")
    stem = f"comm-{backend}" if collective == "all_to_all" else f"comm-{collective}-{backend}"  # a2a: old name
    return cache_dir() / f"{stem}-w{world_size}-torch{ver}.json"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Benchmark(NamedTuple):
    """What one benchmark run returned: (MB sent per rank, ms) points and the op that ran (collectives.py)."""

    points: list[tuple[float, float]]
    method: str


def benchmark_collective(
    world_size: int,
    backend: str = "gloo",
    collective: Collective = "all_to_all",
    sizes: Sequence[int] | None = None,
    warmup: int = 2,
    repeats: int = 7,
    timeout_s: float = 120.0,
) -> Benchmark:
    """Run the real benchmark of `collective` with ``world_size`` processes (``sizes``: bytes leaving a rank,
    default ``COLLECTIVE_BYTES[collective]``).

    Ranks are fresh interpreters (``sys.executable -c``), like ``torch.multiprocessing`` spawn, but they never
    re-import the caller's ``__main__``, so an unguarded user script cannot fork-bomb itself.
    """
    _check_collective(collective)
    if world_size < 2:
        raise ValueError(f"{collective} needs at least 2 processes")
    sizes = COLLECTIVE_BYTES[collective] if sizes is None else sizes
    code = "import sys; from dreamshard.profiling.collectives import _worker_main; _worker_main(sys.argv[1:])"
    with tempfile.TemporaryDirectory(prefix="dreamshard-comm-") as tmp:
        out = os.path.join(tmp, "points.json")
        port = _free_port()
        args = [
            str(world_size),
            str(port),
            backend,
            collective,
            ",".join(str(s) for s in sizes),
            str(warmup),
            str(repeats),
            out,
        ]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", code, str(rank), *args],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                env=env,
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
        data = json.loads(Path(out).read_text())
        return Benchmark([(float(a), float(b)) for a, b in data["points"]], str(data["method"]))


def benchmark_all_to_all(
    world_size: int,
    backend: str = "gloo",
    sizes: Sequence[int] = MESSAGE_BYTES,
    warmup: int = 2,
    repeats: int = 7,
    timeout_s: float = 120.0,
) -> list[tuple[float, float]]:
    """Run the real all-to-all benchmark with ``world_size`` processes; (MB sent per rank, ms) points."""
    if world_size < 2:
        raise ValueError("all-to-all needs at least 2 processes")
    return benchmark_collective(world_size, backend, "all_to_all", sizes, warmup, repeats, timeout_s).points


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


def zero_model(collective: Collective = "all_to_all") -> CommModel:
    return CommModel(alpha_ms=0.0, beta_ms_per_mb=0.0, backend="none", world_size=1, collective=collective)


def default_model(world_size: int, collective: Collective = "all_to_all") -> CommModel:
    return CommModel(
        alpha_ms=DEFAULT_ALPHA_MS,
        beta_ms_per_mb=DEFAULT_BETA_MS_PER_MB,
        backend="default",
        world_size=world_size,
        collective=collective,
    )


def comm_model_for(
    world_size: int,
    backend: str = "gloo",
    refit: bool = False,
    max_procs: int | None = None,
    collective: Collective = "all_to_all",
) -> CommModel:
    """The fitted alpha-beta model of `collective` for ``world_size`` devices (memo -> disk cache -> benchmark)."""
    _check_collective(collective)
    if world_size <= 1:
        return zero_model(collective)
    procs = max(2, min(world_size, max_procs or MAX_PROCS))
    if backend == "nccl":  # one rank per GPU
        import torch  # loads torch: here, so that importing this module does not

        procs = max(2, min(procs, torch.cuda.device_count()))
    key = (backend, procs, collective)
    if not refit and key in _MEMO:
        return _MEMO[key]
    path = _cache_path(backend, procs, collective)
    if not refit and path.exists():
        try:
            model = CommModel.model_validate_json(path.read_text())
            if model.collective == collective:
                _MEMO[key] = model
                return model
        except Exception:  # corrupt cache: refit
            pass
    label = backend
    try:
        if collective == "all_to_all":
            points = benchmark_all_to_all(procs, backend)
        else:
            points, method = benchmark_collective(procs, backend, collective)
            label = f"{backend}:{method}" if method == _FALLBACK_METHOD else backend
    except Exception as e:  # any failure to start or run the processes: the labelled default instead
        log.warning(
            "%s benchmark (%s, %d procs) failed (%s); using the labelled default model",
            collective,
            backend,
            procs,
            first_line(e),
        )
        return default_model(procs, collective)
    alpha, beta, r2 = fit_alpha_beta(points)
    model = CommModel(
        alpha_ms=alpha,
        beta_ms_per_mb=beta,
        backend=label,
        world_size=procs,
        collective=collective,
        points=tuple((round(a, 6), round(b, 6)) for a, b in points),
        r2=round(r2, 6),
    )
    _MEMO[key] = model
    try:
        atomic_write_text(path, model.model_dump_json(indent=2))
    except OSError as e:
        log.warning("cannot write comm cache %s: %s", path, e.strerror)
    return model


# ----------------------------------------------------------------------------- bytes leaving one device


def device_comm_bytes(batch_size: int, dims: Sequence[float], world_size: int, bytes_per_element: int = 4) -> float:
    """Bytes leaving one device in the forward all-to-all: its outputs, the (N-1)/N share sent away.

    `dims` are the output elements per sample of the device's units (``Table.output_elements_per_sample``: a
    pooled table's dim x its features, so a table serving k features sends k pooled outputs per sample; a sequence
    table's dim x its lookups per sample, one row per looked-up id)."""
    if world_size <= 1 or not dims:
        return 0.0
    return batch_size * sum(dims) * bytes_per_element * (world_size - 1) / world_size


def reduce_scatter_bytes(batch_size: int, dims: Sequence[float], world_size: int, bytes_per_element: int = 4) -> float:
    """Bytes leaving one device in the reduce-scatter of row-wise tables' pooled outputs (a sequence table's row
    shards send their looked-up rows by the all-to-all instead: `device_comm_bytes`).

    `dims`: the output widths (``Table.output_dim``) of the pooled row-wise tables the device holds rows of;
    `world_size`: the devices sharing those tables' rows (the reduce-scatter's group). Each device has partial
    sums for the whole global batch, ``batch x output_dim x 4`` bytes per table, and sends the (n-1)/n that
    the other devices own."""
    if world_size <= 1 or not dims:
        return 0.0
    return batch_size * sum(dims) * bytes_per_element * (world_size - 1) / world_size


def all_reduce_bytes(shapes: Sequence[tuple[int, int]], world_size: int, bytes_per_element: int = 4) -> float:
    """Bytes leaving one device in the all-reduce of data-parallel tables' gradients.

    `shapes`: (rows, dim) of each replicated table; its dense gradient is ``rows x dim x bytes_per_element``
    bytes (4: fp32), and a ring all-reduce over `world_size` devices sends ``2 (n-1)/n`` of it."""
    if world_size <= 1 or not shapes:
        return 0.0
    grad = sum(rows * dim for rows, dim in shapes) * bytes_per_element
    return grad * 2 * (world_size - 1) / world_size


# ----------------------------------------------------------------------------- a topology with hosts


def inter_host_beta_ms_per_mb(topology: Topology) -> float:
    """ms per MB at ``topology.inter_host_gbps`` (a topology parameter, never measured here)."""
    return 1.0 / topology.inter_host_gbps  # 1 MB / (gbps x 1e9 B/s) = 1e-3 / gbps s = 1 / gbps ms


def inter_host_fraction(topology: Topology, collective: Collective = "all_to_all") -> float:
    """The share of a device's bytes that crosses hosts: 0 on a flat topology; an all-to-all's bytes go evenly to
    the other devices, (N - L) / (N - 1) of them on other hosts; a ring collective's every byte waits for the hop
    between hosts (docs/architecture.md, "Communication costs")."""
    _check_collective(collective)
    n, local = topology.num_devices, topology.local_world_size
    if topology.hosts <= 1 or n <= 1:
        return 0.0
    if collective == "all_to_all":
        return (n - local) / (n - 1)
    return 1.0  # a ring's steps wait for its slowest hop, the one between hosts


def host_comm_model(topology: Topology, model: CommModel, collective: Collective | None = None) -> CommModel:
    """`model` (one device's measured, intra-host rate) as one device's cost on `topology`: on a flat topology
    `model` itself; with hosts ``alpha' = max(alpha, INTER_HOST_LATENCY_MS)`` and ``beta' = beta + f /
    inter_host_gbps`` (f = ``inter_host_fraction``; docs/architecture.md, "Communication costs"), labelled with the
    inter-host bandwidth parameter. ``collective`` (None: ``model.collective``) says how the bytes route."""
    route = collective or model.collective
    f = inter_host_fraction(topology, route)
    if f <= 0.0:
        return model
    return CommModel(
        alpha_ms=max(model.alpha_ms, INTER_HOST_LATENCY_MS),
        beta_ms_per_mb=model.beta_ms_per_mb + f * inter_host_beta_ms_per_mb(topology),
        backend=f"{model.backend}+inter-host {topology.inter_host_gbps:g} GB/s (parameter)",
        world_size=model.world_size,
        collective=route,
    )


def device_comm_ms(topology: Topology, model: CommModel, nbytes: float, collective: Collective | None = None) -> float:
    """One device's cost (ms) of sending `nbytes` in one `collective` (None: ``model.collective``) on
    `topology`: ``model.cost_ms(nbytes)`` exactly on a flat topology; with hosts the bytes that cross hosts also
    pay the inter-host link, ``Topology.inter_host_gbps`` (a parameter; `host_comm_model`). 0 for no bytes."""
    return host_comm_model(topology, model, collective).cost_ms(nbytes)
