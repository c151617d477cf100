"""A long command's output as it comes: each line handed on when the command writes it, and a heartbeat line when
it has been silent for `heartbeat_s` (a stage that trains for 14 minutes shows it is alive, in the flow log, at
least every `heartbeat_s`). The whole output is returned at the end, as `subprocess.run` would."""

from __future__ import annotations

import os
import queue
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

#: Gets each line of output (no newline), and the heartbeat lines.
OnLine = Callable[[str], None]
#: The longest silence before a heartbeat line (the flow log shows a stage's progress at least this often).
HEARTBEAT_S = 30.0


@dataclass
class Streamed:
    """What a streamed command did: its exit code and every line it wrote (stdout and stderr, interleaved)."""

    returncode: int
    lines: list[str] = field(default_factory=list)

    @property
    def output(self) -> str:
        return "".join(f"{line}\n" for line in self.lines)


def _pump(stream: object, lines: queue.Queue[str | None]) -> None:
    """Each line of `stream` into `lines` as it arrives; None at the end."""
    try:
        for line in stream:  # type: ignore[attr-defined]
            lines.put(line.rstrip("\n"))
    finally:
        lines.put(None)


def heartbeat_line(label: str, running_s: float, silent_s: float) -> str:
    return f"{label}: still running ({running_s:.0f} s so far, no output for {silent_s:.0f} s)"


def stream_command(
    argv: Sequence[str],
    cwd: str | Path,
    env: Mapping[str, str],
    on_line: OnLine,
    label: str,
    heartbeat_s: float | None = None,
) -> Streamed:
    """Run `argv` in `cwd`; every line goes to `on_line` when the command writes it (Python children unbuffered:
    PYTHONUNBUFFERED), and `heartbeat_line(label, ...)` after each `heartbeat_s` (default HEARTBEAT_S) of silence.
    OSError when it cannot start."""
    beat = HEARTBEAT_S if heartbeat_s is None else heartbeat_s
    proc = subprocess.Popen(
        list(argv),
        cwd=cwd,
        env={**os.environ, **env, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        bufsize=1,
    )
    lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=_pump, args=(proc.stdout, lines), daemon=True).start()
    done = Streamed(returncode=0)
    started = said = heard = time.monotonic()  # said: the last line handed on (or heartbeat); heard: last output
    while True:
        try:
            line = lines.get(timeout=max(0.05, beat - (time.monotonic() - said)))
        except queue.Empty:
            said = time.monotonic()
            on_line(heartbeat_line(label, said - started, said - heard))
            continue
        if line is None:
            break
        done.lines.append(line)
        on_line(line)
        said = heard = time.monotonic()
    done.returncode = proc.wait()
    return done
