"""Progress lines for the doors (docs/architecture/index.md, "Progress"): what a long use case's progress hook
(dreamshard.values.progress) becomes in a log that a person reads.

The library says what it is doing as often as it likes (every measurement, every training step). `ProgressLines`
hands that on to a sink (a flow's logger, a terminal's stderr): the first line at once (or after `first_after_s`:
the CLI's stderr, where a refusal must stay one line), then at most one new line every `every_s` (the latest), and,
when nothing was handed on for `heartbeat_s` (a measurement or a search that takes minutes), the latest line again
with the time so far, so a log never stays silent longer than that.
`progress_lines` runs the heartbeat on a thread for the duration of a block.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator

from dreamshard.values.progress import Progress

#: The fewest seconds between two lines handed on (the latest line wins).
EVERY_S = 10.0
#: The longest silence: the latest line is repeated after this many seconds without a new one.
HEARTBEAT_S = 30.0


class ProgressLines:
    """A progress hook that hands lines on to `sink` at most every `every_s` seconds, and repeats the latest one
    (`beat`) after `heartbeat_s` seconds of silence. The first line waits `first_after_s` (a command that ends, or
    refuses its input, sooner says nothing more than its own output: a refusal stays one line). `clock` is
    injectable (tests script it)."""

    def __init__(
        self,
        sink: Callable[[str], None],
        label: str,
        every_s: float = EVERY_S,
        heartbeat_s: float = HEARTBEAT_S,
        clock: Callable[[], float] = time.monotonic,
        first_after_s: float = 0.0,
    ) -> None:
        self.sink, self.label, self.every_s, self.heartbeat_s, self.clock = sink, label, every_s, heartbeat_s, clock
        self.first_after_s = first_after_s
        self.started = clock()
        self.said_at: float | None = None  # when a line was last handed on (a repeat included)
        self.news_at: float | None = None  # when a new line was last handed on (what `every_s` spaces)
        self.latest = ""  # the latest line the work said
        self.pending = False  # the latest line was not handed on yet
        self.lines = 0  # lines the work said
        self._lock = threading.Lock()

    def _due(self, now: float) -> bool:
        """Whether a new line may be handed on now."""
        if self.news_at is None:
            return now - self.started >= self.first_after_s
        return now - self.news_at >= self.every_s

    def __call__(self, line: str) -> None:
        with self._lock:
            self.latest, self.pending, self.lines = line, True, self.lines + 1
            now = self.clock()
            if self._due(now):
                self._say(f"{self.label}: {line}", now, news=True)

    def beat(self) -> None:
        """Hand on the latest line if its time has come; after `heartbeat_s` of silence, repeat it with the time
        so far (called by `progress_lines`' thread about once a second)."""
        with self._lock:
            now = self.clock()
            quiet = now - (self.said_at if self.said_at is not None else self.started)
            if self.pending and self._due(now):
                self._say(f"{self.label}: {self.latest}", now, news=True)
            elif quiet >= self.heartbeat_s:
                doing = f"still at: {self.latest}" if self.latest else "still running"
                self._say(f"{self.label}: {doing} ({now - self.started:.0f} s so far)", now)

    def flush(self) -> None:
        """Hand on the latest line if it was held back, once progress is being shown (the end of the work)."""
        with self._lock:
            if self.pending and self.news_at is not None:
                self._say(f"{self.label}: {self.latest}", self.clock(), news=True)

    def _say(self, text: str, now: float, news: bool = False) -> None:
        self.sink(text)
        self.said_at = now
        if news:
            self.news_at, self.pending = now, False


@contextlib.contextmanager
def progress_lines(
    sink: Callable[[str], None],
    label: str,
    every_s: float = EVERY_S,
    heartbeat_s: float = HEARTBEAT_S,
    tick_s: float = 1.0,
    first_after_s: float = 0.0,
) -> Iterator[Progress]:
    """A progress hook for the block: lines go to `sink` as `ProgressLines` hands them on, a thread beats every
    `tick_s`, and the latest held-back line is handed on when the block ends normally (an error's own line is the
    last word)."""
    lines = ProgressLines(sink, label, every_s, heartbeat_s, first_after_s=first_after_s)
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(tick_s):
            lines.beat()

    thread = threading.Thread(target=beat, name=f"progress-{label}", daemon=True)
    thread.start()
    try:
        yield lines
    finally:
        stop.set()
        thread.join()
    lines.flush()
