"""A rich progress bar that degrades to nothing (tests, pipes, progress=False)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


@contextlib.contextmanager
def progress_bar(label: str, total: int, enabled: bool = True) -> Iterator[Callable[[int], None]]:
    """Yield `advance(n)`. Shows a rich bar on stderr when enabled (rich hides it when not a TTY)."""
    if not enabled or total <= 0:
        yield _ignore
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

        def advance(n: int = 1) -> None:
            prog.advance(task, n)

        yield advance


def _ignore(n: int = 1) -> None:
    """`advance` when no bar is shown."""
