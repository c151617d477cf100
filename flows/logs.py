"""A known error is one line in a flow's logs too (docs/architecture/rules.md, "Where each rule lives": one-line typed
errors). Prefect logs the exception of a failed task run, and again of the flow run it fails, with its traceback
(`exc_info`); for the library's typed errors (`DreamshardError`: bad input, a refused plan, a missing inventory) that
traceback says nothing the one line does not, and buries it. `one_line_known_errors()` (called when a flow module is
imported) adds a filter to Prefect's run and engine loggers that logs such a record as `TypeName: first line`, without
the traceback. The failure itself is untouched: the task and flow runs still end Failed, and the error still propagates
to the caller as its own type (the CLI prints its one line). Any other exception keeps its traceback."""

from __future__ import annotations

import logging

from dreamshard.errors import DreamshardError, first_line

#: The loggers that record a failed run's exception: the run loggers (shown in the UI, sent to the API) and the
#: engines' own.
LOGGERS = ("prefect.task_runs", "prefect.flow_runs", "prefect.engine", "prefect.flow_engine", "prefect.task_engine")


class OneLineKnownErrors(logging.Filter):
    """A record carrying a DreamshardError: its message becomes the error's one line, its traceback is dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, DreamshardError):
            record.msg = "%s: %s"
            record.args = (type(exc).__name__, first_line(exc))
            record.exc_info = None
            record.exc_text = None
            record.stack_info = None
        return True


def one_line_known_errors() -> None:
    """Install the filter on Prefect's run and engine loggers (once per logger; repeated calls add nothing)."""
    for name in LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, OneLineKnownErrors) for f in logger.filters):
            logger.addFilter(OneLineKnownErrors())
