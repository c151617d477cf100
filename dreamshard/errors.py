"""Typed errors. Every user-facing failure is a DreamshardError: one line naming what is wrong, exit code 2, no
traceback, credentials redacted (docs/architecture/stores.md, "Trust boundary")."""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit


class DreamshardError(Exception):
    """Base class. ``str(err)`` is the one-line message shown to the user."""

    exit_code: int = 2

    def __init__(self, message: str) -> None:
        # One line, and never a credential: URLs lose user:password@ and query values (redact_urls).
        super().__init__(redact_urls(" ".join(message.split())))


def first_line(e: object) -> str:
    """The first line of an exception's message (or its type name), for one-line errors."""
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


class InputFileError(DreamshardError):
    """A file the user named is missing, unreadable or not in the expected format."""


class InventoryError(DreamshardError):
    """An inventory (or one of its tables) is invalid."""


class TopologyError(DreamshardError):
    """A topology is invalid (device count, memory, batch size)."""


class PlanError(DreamshardError):
    """A plan is invalid or does not match its inventory/topology."""


def format_gb(gb: float) -> str:
    """A memory figure readable at any size: GB to 3 decimals, smaller ones in MB or KB (1 GB = 1024 MB)."""
    if gb >= 0.01 or gb <= 0:
        return f"{gb:.3f} GB"
    mb = gb * 1024
    return f"{mb:.3f} MB" if mb >= 0.01 else f"{mb * 1024:.1f} KB"


class InfeasiblePlacementError(DreamshardError):
    """A table fits on no device: names the table, its size and the largest free memory."""

    def __init__(self, table: str, table_gb: float, largest_free_gb: float, hint: str = "") -> None:
        self.table = table
        self.table_gb = table_gb
        self.largest_free_gb = largest_free_gb
        self.hint = hint
        msg = (
            f"table '{table}' ({format_gb(table_gb)}) fits on no device "
            f"(largest free memory {format_gb(largest_free_gb)}); "
            f"add devices, raise --memory-gb or shrink the table"
        )
        if hint:
            msg += f" ({hint})"
        super().__init__(msg)


class NoPlacementError(InfeasiblePlacementError):
    """A planner found no placement of the inventory as a whole (its tables fit one by one, not all together):
    an infeasible placement with no single table to name."""

    def __init__(self, message: str) -> None:
        DreamshardError.__init__(self, message)
        self.table, self.table_gb, self.largest_free_gb, self.hint = "", 0.0, 0.0, ""


class BrokenConstraintError(NoPlacementError, PlanError):
    """A planner that cannot be asked to honour a table's constraint (TorchRec's planner and a device pin or a
    shard count) planned it otherwise: it found no placement within the constraints (so a comparison reports it, and
    the gate accepts its absence as it does an infeasible baseline's), and its plan is refused (a PlanError). Names
    the `table` and the `constraint` it breaks (`<constraint>: <what the plan does>`)."""

    def __init__(self, planner: str, table: str, constraint: str, why: str = "") -> None:
        super().__init__(
            f"{planner}'s plan: table '{table}' breaks its constraint {constraint}" + (f" ({why})" if why else "")
        )
        self.table, self.constraint = table, constraint


class CheckpointError(DreamshardError):
    """A training checkpoint (torch.distributed.checkpoint) is missing, truncated or does not fit the model or the
    plan it is moved to: names the table and the field."""


class UnknownSharderError(DreamshardError):
    """The requested sharder name is not registered."""


class ProfilingError(DreamshardError):
    """A profiling backend could not run (missing device, bad settings)."""


class ModelError(DreamshardError):
    """A learned model is missing, corrupt or incompatible."""


class TrainingDataError(DreamshardError):
    """Measurement records a model would learn from are out of range, unbounded or contradictory
    (dreamshard.learning.records): names the record, the field and the limit."""


class StoreError(DreamshardError):
    """Object storage / plan store failure (credentials, endpoint, bucket, checksum)."""


class StorePathError(StoreError):
    """A local store's path is not usable as its layout needs: it leads out of the store (a link), or a file
    stands where a folder belongs (or a folder, FIFO... where an object belongs). Names the path (`key`)."""

    def __init__(self, key: str, where: str, problem: str, fix: str) -> None:
        self.key, self.problem, self.fix = key, problem, fix
        super().__init__(f"{key} in {where}: {problem}; {fix}")


class ConfigError(DreamshardError):
    """A params.yaml section or CLI option combination is invalid."""


class PipelineError(DreamshardError):
    """A pipeline workspace step failed: git, a DVC stage, push/pull, or reproducing a plan."""


#: A URL inside free text (a scheme, then everything up to whitespace or a quote).
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>`]+")


def redact_url(url: str) -> str:
    """`url` with credentials removed: user:password@ becomes ***@ and every query value becomes ***."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "***@" + netloc.rsplit("@", 1)[1]
    query = (
        "&".join(f"{kv.split('=', 1)[0]}=***" if "=" in kv else "***" for kv in parts.query.split("&"))
        if parts.query
        else ""
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


#: The characters of a URL scheme, and the longest scheme looked for behind a `://`.
_SCHEME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-")
_SCHEME_MAX = 64
_AFTER_SCHEME = re.compile(r"://[^\s'\"<>`]+")


def _redacted(url: str) -> str:
    return redact_url(url) if ("@" in url or "?" in url) else url


def redact_urls(text: str) -> str:
    """Every URL inside `text` passed through `redact_url` (for messages and logs). Linear in the text: each
    `://` is found once and its scheme looked for at most _SCHEME_MAX characters back (a long run of letters,
    e.g. a huge table name, is never rescanned from every position)."""
    if "://" not in text:
        return text
    out: list[str] = []
    done = 0
    for m in _AFTER_SCHEME.finditer(text):
        start = m.start()
        first = start
        while first > max(done, start - _SCHEME_MAX) and text[first - 1] in _SCHEME_CHARS:
            first -= 1
        while first < start and not text[first].isalpha():
            first += 1  # a scheme starts with a letter
        if first == start:
            continue  # no scheme: not a URL
        out += [text[done:first], _redacted(text[first : m.end()])]
        done = m.end()
    return "".join(out) + text[done:]
