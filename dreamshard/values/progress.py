"""The progress hook of long library work (docs/architecture/index.md, "Progress"): a callable that gets one line
at a time saying what is being done ("round 3/5: measuring dim_greedy", "iteration 2/10: cost ensemble step
300/1500, loss 0.0123").

The library calls it as often as it has something to say and never imports Prefect; the doors decide what a line
becomes: a rich bar or a throttled line on a terminal's stderr (the CLI), a flow-log line at most every few seconds
and at least every 30 s (the flows: dreamshard.usecases.progress).
"""

from __future__ import annotations

from collections.abc import Callable

#: Gets a line saying what a long call is doing now (no newline).
Progress = Callable[[str], None]


def silent(_line: str) -> None:
    """The hook when nobody listens."""


def prefixed(progress: Progress | None, prefix: str) -> Progress | None:
    """`progress` with `prefix` before each line ("iteration 2/10: ..."); None stays None."""
    if progress is None:
        return None
    hook = progress
    return lambda line: hook(f"{prefix}{line}")
