"""Collective costs: ``torch.distributed`` micro-benchmarks fitted to alpha-beta models (cached per machine and
world size), the bytes each collective moves off one device, and a device's traffic costed on a topology with
hosts. The model and its assumptions: docs/architecture/measuring.md, "Communication costs".
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import get_args

from dreamshard.documents import atomic_write_text
from dreamshard.errors import first_line
from dreamshard.profiling.comm_fit import COLLECTIVE_BYTES, Benchmark, cached_fit, derive, measure_fit
from dreamshard.profiling.fit_quality import usable_cores
from dreamshard.values import CommModel, Topology, World
from dreamshard.values.costs import Collective
from dreamshard.values.topology import DEFAULT_BETA_MS_PER_MB

log = logging.getLogger(__name__)

COLLECTIVES: tuple[str, ...] = get_args(Collective)
#: A lower cap on the benchmark's ranks (env DREAMSHARD_COMM_MAX_PROCS); the cores (or GPUs) always cap them.
MAX_PROCS: int | None = (
    int(os.environ["DREAMSHARD_COMM_MAX_PROCS"]) if os.environ.get("DREAMSHARD_COMM_MAX_PROCS") else None
)
#: Fallback when no benchmark can run: loopback-like latency and ~2 GB/s.
DEFAULT_ALPHA_MS = 0.05
#: Assumed latency of a collective that crosses hosts (a parameter, like Topology.inter_host_gbps): 20 us.
INTER_HOST_LATENCY_MS = 0.02
#: The op a process group without a reduce-scatter is measured with instead (collectives.py).
_FALLBACK_METHOD = "all_reduce+slice"

_MEMO: dict[tuple[str, int, str], CommModel] = {}


def _check_collective(collective: str) -> None:
    if collective not in COLLECTIVES:
        raise ValueError(f"unknown collective '{collective}'; choose from {', '.join(COLLECTIVES)}")


def world_model(world: World, world_size: int, collective: Collective = "all_to_all") -> CommModel:
    """The comm model of a declared world (a profile or the job's own figures: dreamshard.values.world) for
    `world_size` devices: its alpha and its intra-host bandwidth, labelled `world:NAME` (not a benchmark); the
    inter-host tier is the topology's (`host_comm_model`). ValueError for a measured world: a fit gives it."""
    if world.measured or world.alpha_ms is None or world.intra_host_gbps is None:
        raise ValueError(f"world '{world.name}' is measured: its comm model is a fit, not a declaration")
    if world_size <= 1:
        return zero_model(collective)
    return CommModel(
        alpha_ms=world.alpha_ms,
        beta_ms_per_mb=1.0 / world.intra_host_gbps,  # 1 MB at g GB/s = 1e6 / (g 1e9) s = 1 / g ms
        backend=f"world:{world.name}",
        world_size=world_size,
        collective=collective,
    )


def declared(topology: Topology) -> World | None:
    """The topology's world when it declares its figures (a profile or the job's own), else None (measured)."""
    w = topology.world
    return w if w is not None and not w.measured else None


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
        return Benchmark(
            [(float(a), float(b)) for a, b in data["points"]],
            str(data["method"]),
            [(float(m), float(ms)) for m, ms in data.get("peer_points", [])],
        )


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


def benchmark_ranks(world_size: int, backend: str = "gloo", max_procs: int | None = None) -> tuple[int, int]:
    """(ranks to benchmark, cores or GPUs they may use): never more ranks than cores (gloo) or GPUs (nccl), nor
    than the world or `max_procs` (None: ``MAX_PROCS``, the environment's cap, if any)."""
    if backend == "nccl":  # one rank per GPU
        import torch  # loads torch: here, so that importing this module does not

        cores = torch.cuda.device_count()
    else:
        cores = usable_cores()
    cap = max_procs if max_procs is not None else MAX_PROCS
    procs = min(world_size, cores, cap) if cap is not None else min(world_size, cores)
    return procs, max(1, cores)


def comm_model_for(
    world_size: int,
    backend: str = "gloo",
    refit: bool = False,
    max_procs: int | None = None,
    collective: Collective = "all_to_all",
) -> CommModel:
    """The alpha-beta model of `collective` for ``world_size`` devices: the fit at as many ranks as the machine
    runs without sharing a core (memo -> a cache that passed the bar on this machine -> benchmark,
    `comm_fit.measure_fit`), derived for a larger world (`comm_fit.derive`)."""
    _check_collective(collective)
    if world_size <= 1:
        return zero_model(collective)
    procs, cores = benchmark_ranks(world_size, backend, max_procs)
    if procs < 2:
        why = f"{cores} {'GPU' if backend == 'nccl' else 'core'}(s): a benchmark of 2 ranks would share one"
        return default_model(world_size, collective).model_copy(update={"fallback": why})
    key = (backend, procs, collective)
    if not refit and key in _MEMO:
        return derive(_MEMO[key], world_size)
    path = _cache_path(backend, procs, collective)
    cached, why = (None, "") if refit else cached_fit(path, collective, cores)
    if cached is not None:
        _MEMO[key] = cached
        return derive(cached, world_size)
    if why:
        log.warning("refitting %s on %d ranks: %s", collective, procs, why)
    try:
        model = measure_fit(benchmark_collective, procs, backend, collective, cores, _labeller(backend))
    except Exception as e:  # any failure to start or run the processes: the labelled default instead
        log.warning(
            "%s benchmark (%s, %d procs) failed (%s); using the labelled default model",
            collective,
            backend,
            procs,
            first_line(e),
        )
        return default_model(world_size, collective).model_copy(
            update={"fallback": f"benchmark failed: {first_line(e)}"}
        )
    _MEMO[key] = model
    try:
        atomic_write_text(path, model.model_dump_json(indent=2))
    except OSError as e:
        log.warning("cannot write comm cache %s: %s", path, e.strerror)
    return derive(model, world_size)


def _labeller(backend: str) -> Callable[[str], str]:
    """The fit's label from the op that ran: the backend, marked when a reduce-scatter ran as all-reduce + slice."""
    return lambda method: f"{backend}:{method}" if method == _FALLBACK_METHOD else backend


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
    between hosts (docs/architecture/measuring.md, "Communication costs")."""
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
    inter_host_gbps`` (f = ``inter_host_fraction``; docs/architecture/measuring.md, "Communication costs"), labelled
    with the inter-host bandwidth parameter. ``collective`` (None: ``model.collective``) says how the bytes route."""
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


def cached_fits(backend: str = "gloo") -> list[tuple[Path, CommModel | None, str]]:
    """Every fit cached for `backend` in `cache_dir()`: (file, model or None if unreadable, "" when planning may
    reuse it, else why it will be measured again)."""
    rows: list[tuple[Path, CommModel | None, str]] = []
    for path in sorted(cache_dir().glob(f"comm-*{backend}-w*.json")):
        try:
            model: CommModel | None = CommModel.model_validate_json(path.read_text())
        except (OSError, ValueError):
            rows.append((path, None, "unreadable: refitted on next use"))
            continue
        assert model is not None
        cores = benchmark_ranks(model.world_size, backend)[1]
        ranks = model.measured_ranks or model.world_size
        why = (
            f"never used here: {ranks} ranks exceed this machine's {cores} cores"
            if ranks > cores
            else cached_fit(path, model.collective, cores)[1]
        )
        rows.append((path, model, why))
    return rows
