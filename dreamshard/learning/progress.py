"""Training progress: a rich bar that degrades to nothing (tests, pipes, progress=False), and the progress hook
(dreamshard.values.progress) that gets a line per step with what the step did (docs/architecture/index.md,
"Progress")."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Protocol

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from dreamshard.values.progress import Progress as Report


class Advance(Protocol):
    """One step more (`n`), with what it showed (`note`: "loss 0.0123")."""

    def __call__(self, n: int = 1, note: str = "") -> None: ...


@contextlib.contextmanager
def progress_bar(label: str, total: int, enabled: bool = True, report: Report | None = None) -> Iterator[Advance]:
    """Yield `advance(n, note)`. Shows a rich bar on stderr when enabled (rich hides it when not a TTY); `report`
    gets `"<label> <done>/<total>, <note>"` at every advance."""
    done = 0

    def told(n: int) -> None:
        nonlocal done
        done += n

    def say(note: str) -> None:
        if report is not None:
            report(f"{label} {done}/{total}" + (f", {note}" if note else ""))

    if not enabled or total <= 0:

        def quiet(n: int = 1, note: str = "") -> None:
            told(n)
            say(note)

        yield quiet
        return
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as prog:
        task = prog.add_task(label, total=total)

        def advance(n: int = 1, note: str = "") -> None:
            prog.advance(task, n)
            told(n)
            say(note)

        yield advance
