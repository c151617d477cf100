"""What a long command shows while it works (docs/architecture/index.md, "Progress"): the use case's progress hook
(dreamshard.values.progress) made visible where the command runs.

- on a terminal: rich bars where the library draws them (training), else a status line showing the latest step;
- anywhere else (a pipe, a DVC stage whose output the orchestrator streams into the flow log): a line on stderr at
  most every 10 s, and the latest again after 30 s without a new one (dreamshard.usecases.progress), so a stage
  that trains for minutes says which iteration, step and loss it is at. The first line waits `FIRST_AFTER_S`: a
  command that refuses its input (or ends) sooner writes only its own line.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

from rich.console import Console

from dreamshard.usecases.progress import EVERY_S, progress_lines
from dreamshard.values.progress import Progress

#: Seconds of work before the first progress line on stderr (a refusal before then stays one line).
FIRST_AFTER_S = EVERY_S


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@contextlib.contextmanager
def lines_on_stderr(label: str) -> Iterator[Progress]:
    """Progress lines on stderr, on a terminal too: for a command that may ask a reviewer at the terminal
    (publish.require_human), whose question a status line would draw over."""
    with progress_lines(_stderr, label, first_after_s=FIRST_AFTER_S) as hook:
        yield hook


@contextlib.contextmanager
def lines_unless_bars(bars: bool, label: str) -> Iterator[Progress | None]:
    """The hook of a command whose library draws rich bars on a terminal: None while the bars show (`bars`),
    else progress lines on stderr."""
    if bars:
        yield None
        return
    with progress_lines(_stderr, label, first_after_s=FIRST_AFTER_S) as hook:
        yield hook


@contextlib.contextmanager
def status_or_lines(doing: str, label: str, enabled: bool = True) -> Iterator[Progress | None]:
    """The hook of a command that measures for a while without bars of its own (`plan --verify`): on a terminal a
    status line saying what it is `doing`, then its latest step; else progress lines on stderr, each starting with
    `label`; None when not `enabled`."""
    if not enabled:
        yield None
        return
    if not sys.stderr.isatty():
        with progress_lines(_stderr, label, first_after_s=FIRST_AFTER_S) as hook:
            yield hook
        return
    with Console(stderr=True, highlight=False).status(doing, spinner="dots") as status:
        yield lambda line: status.update(f"{label}: {line}")
