"""The judge's collective timing: a device's bytes exchanged on real ranks, timed, no fitted model anywhere.

`CommRanks` (the judge's side) starts ``python bench/judge_comm.py`` as 2 rank processes (gloo, one torch thread
each, not pinned) once per judge session; never more ranks than this process may run on
(`len(os.sched_getaffinity(0))`), and at least 2. Each request names one exchange: its bytes, its message count and
whether it reduces; both ranks run it and report their times per repeat.

Emulating N devices on 2 ranks: a device of an N-device world sends its bytes to N - 1 peers, so each rank sends
its peer N - 1 messages of bytes / (N - 1) each and receives as many (`torch.distributed.batch_isend_irecv`, one
tag per message), timed from a barrier until every message is complete; a reducing exchange (reduce-scatter,
all-reduce) also adds each received chunk into an accumulator inside the timed region. A repeat's time is the max
over the two ranks; a figure is the median over repeats. What the emulation leaves out: contention of N devices
for one link, and links between hosts (a plan's hosts are timed as one flat host).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

from judge_protocol import answer_lines, private_reply

HERE = Path(__file__).resolve().parent
RANKS = 2


def usable_cores() -> int:
    return len(os.sched_getaffinity(0))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class CommRanks:
    """The judge's handle on its rank processes (a context manager; `close` ends them)."""

    def __init__(self) -> None:
        cores = sorted(os.sched_getaffinity(0))
        if len(cores) < RANKS:
            raise RuntimeError(
                f"the judge times collectives on {RANKS} ranks but this process has {len(cores)} core(s)"
            )
        port = _free_port()
        self._procs = []
        for rank in range(RANKS):
            env = {
                **os.environ,
                "OMP_NUM_THREADS": "1",
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port),
                "RANK": str(rank),
                "WORLD_SIZE": str(RANKS),
            }
            cmd = [sys.executable, str(HERE / "judge_comm.py")]
            self._procs.append(subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env))
        for reply in self._replies():
            assert reply.get("ready"), reply

    def _replies(self) -> list[dict[str, Any]]:
        out = []
        for p in self._procs:
            assert p.stdout is not None
            line = p.stdout.readline()
            if not line:
                raise RuntimeError(f"a judge rank exited (code {p.poll()})")
            reply = json.loads(line)
            if "error" in reply:
                raise RuntimeError(f"a judge rank failed: {reply['error']}")
            out.append(reply)
        return out

    def time_exchange(self, nbytes: float, messages: int, reduce: bool, warmup: int, repeats: int) -> list[float]:
        """ms per repeat (max over the ranks) of exchanging `nbytes` as `messages` messages each way."""
        if nbytes <= 0 or messages < 1:
            return [0.0] * repeats
        request = {"bytes": nbytes, "messages": messages, "reduce": reduce, "warmup": warmup, "repeats": repeats}
        for p in self._procs:
            assert p.stdin is not None
            p.stdin.write(json.dumps(request) + "\n")
            p.stdin.flush()
        per_rank = [r["ms"] for r in self._replies()]
        return [max(xs) for xs in zip(*per_rank, strict=True)]

    def close(self) -> None:
        for p in self._procs:
            if p.poll() is None and p.stdin is not None:
                p.stdin.close()
        for p in self._procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def __enter__(self) -> CommRanks:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: Sizes a round's pace is measured at (log-spaced over the round's exchanges), and the least bytes among them.
PACE_POINTS = 5
PACE_MIN_BYTES = 4096.0


def pace_sizes(exchanged: list[float]) -> list[float]:
    """PACE_POINTS sizes from the smallest to the largest of `exchanged` (bytes > 0), log-spaced."""
    lo = max(PACE_MIN_BYTES, min(exchanged))
    hi = max(lo * 4.0, max(exchanged))
    step = (hi / lo) ** (1.0 / (PACE_POINTS - 1))
    return [lo * step**k for k in range(PACE_POINTS)]


def fit_pace(
    ranks: CommRanks, sizes: list[float], messages: int, reduce: bool, warmup: int, repeats: int
) -> tuple[float, float]:
    """(alpha ms, beta ms per byte): least squares over `sizes`, each timed on the ranks (median of `repeats`), both
    clipped at 0. The judge's paced comm: this machine's pace, measured on the spot in every round."""
    import statistics

    xs = sizes
    ys = [statistics.median(ranks.time_exchange(n, messages, reduce, warmup, repeats)) for n in xs]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    beta = max(0.0, sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx) if sxx > 0 else 0.0
    return max(0.0, my - beta * mx), beta


# ----------------------------------------------------------------------------------------- a rank process


def exchange(request: dict[str, Any]) -> list[float]:
    """Run one request on this rank (the process group is up): ms per timed repeat."""
    import torch
    import torch.distributed as dist

    peer = 1 - dist.get_rank()
    k = int(request["messages"])
    elements = max(1, int(float(request["bytes"]) / k / 4))
    send = torch.ones(elements, dtype=torch.float32)
    recv = [torch.empty(elements, dtype=torch.float32) for _ in range(k)]
    acc = torch.zeros(elements, dtype=torch.float32)
    out = []
    for it in range(int(request["warmup"]) + int(request["repeats"])):
        ops = [dist.P2POp(dist.isend, send, peer, tag=i) for i in range(k)]
        ops += [dist.P2POp(dist.irecv, recv[i], peer, tag=i) for i in range(k)]
        dist.barrier()
        t0 = time.perf_counter()
        for req in dist.batch_isend_irecv(ops):
            req.wait()
        if request["reduce"]:
            for chunk in recv:
                acc.add_(chunk)
        ms = (time.perf_counter() - t0) * 1e3
        if it >= int(request["warmup"]):
            out.append(ms)
    return out


def serve(stdin: IO[str], reply: IO[str]) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
    reply.write(json.dumps({"ready": True}) + "\n")
    reply.flush()
    try:
        answer_lines(stdin, reply, lambda request: {"ms": exchange(request)})
    finally:
        dist.destroy_process_group()


def main() -> None:
    serve(sys.stdin, private_reply())


if __name__ == "__main__":
    main()
