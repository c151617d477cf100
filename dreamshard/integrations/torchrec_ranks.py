"""Gloo ranks on this machine's CPUs for work that needs a process group (``dreamshard torchrec migrate``): `run_ranks`
starts `world_size` fresh interpreters that join one gloo group through a TCP store served here on 127.0.0.1, each
calling ``entry(rank, job)`` (a ``module:function`` of the package) and writing what it returns, or its one-line
error, beside the job. A rank's error is raised here as the same typed error; a run past `timeout_s` is a
ProfilingError. The ranks die with the calling process however it ends (dreamshard.integrations.processes), and
the job folders of a killed caller are removed by the next call."""

from __future__ import annotations

import contextlib
import datetime
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch.distributed as dist

from dreamshard import errors
from dreamshard.errors import DreamshardError, ProfilingError, first_line
from dreamshard.integrations.processes import owned_name, remove_stale

_CODE = (
    "import sys; from dreamshard.integrations.processes import die_with_parent; die_with_parent(int(sys.argv[3])); "
    "from dreamshard.integrations.torchrec_ranks import rank_main; rank_main(sys.argv[1:3])"
)
#: The job folders in the temporary directory: ``dreamshard-ranks-<pid>-<hex>`` (`processes.owned_name`).
_PREFIX = "dreamshard-ranks-"


def run_ranks(entry: str, job: Mapping[str, Any], world_size: int, timeout_s: float = 600.0) -> list[Any]:
    """What ``entry(rank, job)`` returned on every rank (JSON values), in rank order."""
    store = dist.TCPStore(
        "127.0.0.1", 0, world_size + 1, is_master=True, wait_for_workers=False,
        timeout=datetime.timedelta(seconds=timeout_s),
    )  # fmt: skip
    remove_stale(Path(tempfile.gettempdir()), _PREFIX)
    with _job_folder() as tmp:
        spec = Path(tmp) / "job.json"
        payload = {"entry": entry, "job": dict(job), "port": store.port, "world_size": world_size}
        spec.write_text(json.dumps({**payload, "timeout_s": timeout_s}))
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore", "LOCAL_WORLD_SIZE": str(world_size)}
        logs = [open(Path(tmp) / f"rank{r}.log", "wb") for r in range(world_size)]  # noqa: SIM115 - closed below
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", _CODE, str(spec), str(r), str(os.getpid())],
                stdout=logs[r],
                stderr=logs[r],
                env=env,
            )
            for r in range(world_size)
        ]
        try:
            _wait(procs, timeout_s)
        finally:
            for f in logs:
                f.close()
        return [_result(Path(tmp), r, p.returncode) for r, p in enumerate(procs)]


@contextlib.contextmanager
def _job_folder() -> Iterator[str]:
    """A fresh folder in the temporary directory named for this process, removed on the way out."""
    path = Path(tempfile.gettempdir()) / owned_name(_PREFIX)
    path.mkdir(mode=0o700)
    try:
        yield str(path)
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _wait(procs: list[subprocess.Popen[bytes]], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    try:
        for p in procs:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        raise ProfilingError(f"the ranks ran past {timeout_s:g} s") from None
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def _result(tmp: Path, rank: int, code: int | None) -> Any:
    """Rank `rank`'s return value; its typed error raised (the first rank's error wins: ranks are read in order)."""
    out = tmp / f"rank{rank}.out.json"
    if not out.is_file():
        lines = [ln for ln in (tmp / f"rank{rank}.log").read_text(errors="replace").splitlines() if ln.strip()]
        raise ProfilingError(f"rank {rank} exited with {code}: {first_line(lines[-1] if lines else 'no output')}")
    got = json.loads(out.read_text())
    if "error" in got:
        kind = getattr(errors, got["kind"], None)
        cls = kind if isinstance(kind, type) and issubclass(kind, DreamshardError) else ProfilingError
        raise cls(got["error"])
    return got["result"]


def rank_main(argv: list[str]) -> None:
    """One rank (started by `run_ranks`): argv = job file, rank."""
    spec, rank = Path(argv[0]), int(argv[1])
    job = json.loads(spec.read_text())
    timeout = datetime.timedelta(seconds=float(job["timeout_s"]))
    if os.path.exists("/sys/class/net/lo"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    out = spec.parent / f"rank{rank}.out.json"
    store = dist.TCPStore("127.0.0.1", int(job["port"]), int(job["world_size"]) + 1, is_master=False, timeout=timeout)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=int(job["world_size"]), timeout=timeout)
    try:
        module, _, name = str(job["entry"]).partition(":")
        result = getattr(importlib.import_module(module), name)(rank, job["job"])
        out.write_text(json.dumps({"result": result}))
    except DreamshardError as e:
        out.write_text(json.dumps({"error": str(e), "kind": type(e).__name__}))
    except Exception as e:  # the rank's own failure, reported in one line
        out.write_text(json.dumps({"error": f"rank {rank}: {type(e).__name__}: {first_line(e)}", "kind": ""}))
    finally:
        dist.destroy_process_group()
