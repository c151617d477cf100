"""One rank of the collective micro-benchmarks (docs/architecture/measuring.md, "Communication costs").

Each rank is a fresh interpreter started by `comm.benchmark_collective` (`_worker_main`). A message size is the
bytes leaving one rank in one call (what `CommModel.cost_ms` takes); `chunk_elements` sizes the tensors from it.
Per size: `warmup` untimed calls; then `repeats` passes over the sizes, each timing every size once after a
barrier, and per size the median over passes of the slowest rank's time (`_interleaved_ms`). The all-to-all sends
each peer its chunk and keeps none for itself (a split of 0 to its own rank): the time is that of the bytes leaving
the rank, which is what a fit charges per MB. With the rank's own chunk in the call, 2 ranks timed a local copy as
large as the message (20-40% of the time at 2-8 MB) that an N-device all-to-all pays on only 1/(N-1) of its bytes
(`comm_fit.BENCHMARK_PROTOCOL`). A process group without a reduce-scatter runs all-reduce and a local slice
instead, and rank 0's result says which op ran (`method`).
"""

from __future__ import annotations

import datetime
import json
import os
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

import torch
import torch.distributed as dist

COLLECTIVES: tuple[str, ...] = ("all_to_all", "reduce_scatter", "all_reduce")

#: the reduce-scatter on one tensor: reduce_scatter_single from torch 2.13 (reduce_scatter_tensor, deprecated
#: there, before it)
_RS_SINGLE = getattr(dist, "reduce_scatter_single", None) or getattr(dist, "reduce_scatter_tensor", None)


def chunk_elements(collective: str, nbytes: int, world: int) -> int:
    """Floats per chunk (a rank's tensor is ``world`` chunks) so that one call sends ``nbytes`` from a rank.

    All-to-all and reduce-scatter send the ``world - 1`` chunks the peers own; a ring all-reduce (reduce-scatter
    then all-gather) sends twice that, so its chunks are half as big."""
    per_peer = nbytes / (world - 1) / 4
    if collective == "all_reduce":
        per_peer /= 2  # ring: reduce-scatter then all-gather, each (world-1) chunks
    return max(1, int(per_peer))


def sent_megabytes(collective: str, chunk: int, world: int) -> float:
    """Megabytes leaving one rank in one call with chunks of ``chunk`` floats."""
    factor = 2 if collective == "all_reduce" else 1
    return factor * chunk * 4 * (world - 1) / 1e6


def _ops(collective: str, rank: int, world: int) -> list[tuple[str, Callable[[torch.Tensor, torch.Tensor], None]]]:
    """The ways to run `collective` on (output, input) tensors, preferred first."""
    if collective == "all_to_all":

        def peers_only(y: torch.Tensor, x: torch.Tensor) -> None:
            c = x.numel() // world
            splits = [0 if i == rank else c for i in range(world)]
            dist.all_to_all_single(y[: c * (world - 1)], x[: c * (world - 1)], splits, splits)

        return [("all_to_all_single", peers_only)]
    if collective == "all_reduce":
        return [("all_reduce", lambda y, x: dist.all_reduce(x))]
    if collective != "reduce_scatter":
        raise ValueError(f"unknown collective '{collective}'; choose from {', '.join(COLLECTIVES)}")

    def rs_lists(y: torch.Tensor, x: torch.Tensor) -> None:
        out = y[: x.numel() // world]
        dist.reduce_scatter(out, list(x.chunk(world)))

    def ar_slice(y: torch.Tensor, x: torch.Tensor) -> None:
        dist.all_reduce(x)
        c = x.numel() // world
        y[:c].copy_(x[rank * c : (rank + 1) * c])

    ops: list[tuple[str, Callable[[torch.Tensor, torch.Tensor], None]]] = []
    if _RS_SINGLE is not None:
        single = _RS_SINGLE
        ops.append((single.__name__, lambda y, x: single(y[: x.numel() // world], x)))
    return [*ops, ("reduce_scatter", rs_lists), ("all_reduce+slice", ar_slice)]


def _pick_op(collective: str, rank: int, world: int, dev: torch.device) -> tuple[str, Callable[..., None]]:
    """The first op the process group runs (gloo raises before any traffic for an op it lacks, on every rank
    alike), after a few untimed calls: connections are set up lazily, so the smallest size is not penalised."""
    last: Exception | None = None
    for name, op in _ops(collective, rank, world):
        try:
            for _ in range(5):
                x = torch.zeros(world * 16, device=dev)
                op(torch.empty_like(x), x)
            return name, op
        except (RuntimeError, NotImplementedError, ValueError) as e:  # not supported by this process group
            last = e
    raise RuntimeError(f"no way to run {collective}: {last}")


def _worker(
    rank: int,
    world: int,
    port: int,
    backend: str,
    collective: str,
    sizes: Sequence[int],
    warmup: int,
    repeats: int,
    out: str,
) -> None:
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
        method, op = _pick_op(collective, rank, world, dev)
        calls: list[Callable[[], None]] = []
        sent: list[float] = []
        for nbytes in sizes:
            chunk = chunk_elements(collective, nbytes, world)
            x = torch.zeros(chunk * world, device=dev)
            calls.append(partial(op, torch.empty_like(x), x))
            sent.append(sent_megabytes(collective, chunk, world))
        results = list(zip(sent, _interleaved_ms(calls, dev, warmup, repeats, cuda), strict=True))
        peers = _peer_points(rank, world, dev, min(sizes), warmup, repeats, cuda)
        if rank == 0:
            Path(out).write_text(json.dumps({"points": results, "method": method, "peer_points": peers}))
    finally:
        dist.destroy_process_group()


#: Messages per call of the per-peer benchmark: the same bytes cut into more messages, as a rank of a larger world
#: sends one to each peer (docs/architecture/measuring.md, "Communication costs": deriving larger worlds).
PEER_MESSAGES: tuple[int, ...] = (1, 2, 4, 8)


def _peer_points(
    rank: int, world: int, dev: torch.device, nbytes: int, warmup: int, repeats: int, cuda: bool
) -> list[tuple[int, float]]:
    """(messages, ms) of sending `nbytes` to the next rank (and receiving as much from the previous one) cut into
    1, 2, 4, 8 messages: the slope is what one more peer costs a collective beyond its bytes."""
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    calls: list[Callable[[], None]] = []
    for m in PEER_MESSAGES:
        n = max(1, nbytes // 4 // m)
        send = [torch.zeros(n, device=dev) for _ in range(m)]
        recv = [torch.empty(n, device=dev) for _ in range(m)]
        calls.append(partial(_exchange, send, recv, nxt, prv))
    return list(zip(PEER_MESSAGES, _interleaved_ms(calls, dev, warmup, repeats, cuda), strict=True))


def _exchange(send: list[torch.Tensor], recv: list[torch.Tensor], nxt: int, prv: int) -> None:
    """Send `send` to rank `nxt` and receive `recv` from rank `prv`, every message in flight together."""
    ops = [dist.P2POp(dist.isend, x, nxt) for x in send] + [dist.P2POp(dist.irecv, y, prv) for y in recv]
    for req in dist.batch_isend_irecv(ops):
        req.wait()


def _timed_ms(call: Callable[[], None], cuda: bool) -> float:
    """ms of one `call` started right after a barrier of every rank."""
    dist.barrier()
    if cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    call()
    if cuda:
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3


def _interleaved_ms(
    calls: Sequence[Callable[[], None]], dev: torch.device, warmup: int, repeats: int, cuda: bool
) -> list[float]:
    """ms of each of `calls` (one per size, ascending): `warmup` untimed calls each, then `repeats` passes that time
    every call once, and per call the median over passes of the slowest rank's time (a collective finishes when its
    slowest rank does). Passes alternate direction (up, down, up...), so a call always follows a neighbouring size:
    right after the largest, a small exchange once ran 4x slow. Interleaved, a slow spell of the machine falls on
    every size alike instead of bending one point of the fit (docs/architecture/measuring.md, "Communication costs")."""
    for call in calls:
        for _ in range(warmup):
            _timed_ms(call, cuda)
    times: list[list[float]] = [[] for _ in calls]
    for p in range(repeats):
        order = range(len(calls)) if p % 2 == 0 else range(len(calls) - 1, -1, -1)
        for i in order:
            times[i].append(_timed_ms(calls[i], cuda))
    t = torch.tensor(times, dtype=torch.float64, device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return [float(v) for v in t.median(dim=1).values.tolist()]


def _worker_main(argv: Sequence[str]) -> None:
    """Entry of one benchmark rank started as ``python -c`` (see ``comm.benchmark_collective``)."""
    rank, world, port, backend, collective, sizes, warmup, repeats, out = argv
    _worker(
        int(rank),
        int(world),
        int(port),
        backend,
        collective,
        [int(s) for s in sizes.split(",")],
        int(warmup),
        int(repeats),
        out,
    )
