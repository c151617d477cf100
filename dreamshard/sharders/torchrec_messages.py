"""What TorchRec's planner says, as dreamshard says it: its logs and warnings silenced (`quiet`), its failures
turned into one-line typed errors naming the table (`translate`), and the internal table names it is given
(`internal_name`). Used by dreamshard.sharders.torchrec_sharder (docs/architecture/measuring.md, "Integrations").
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import warnings
from collections.abc import Iterator

from dreamshard.errors import BrokenConstraintError, InfeasiblePlacementError, NoPlacementError, PlanError
from dreamshard.values import GB, Inventory, Topology

_SHARD_FAILED = re.compile(
    r"storage: Storage\((?P<need>[^)]*)\).*?of table (?P<table>\S+?),\s*"
    r"largest device storage: Storage\((?P<storage>[^)]*)\)",
    re.DOTALL,
)
_TORCHREC_HANDLER_LOGGER = re.compile(r"^[A-Za-z0-9]+Logger-[A-Za-z]+Handler$")
_GLOBAL_NEED = re.compile(r"Global storage requirement for model parallel: Storage\((?P<storage>[^)]*)\)")
_GLOBAL_HAVE = re.compile(r"Global storage available for model parallel: Storage\((?P<storage>[^)]*)\)")


def internal_name(i: int) -> str:
    """The name table i of an inventory has in TorchRec's planner (any inventory name works)."""
    return f"t{i}"


def storage_field(storage: str, key: str) -> float | None:
    """Read ``key`` (hbm/ddr) from TorchRec's ``Storage(hbm=1, ddr=2)`` or ``Storage(hbm = 0.1 GB, ...)``."""
    m = re.search(rf"{key}\s*=\s*([0-9.eE+-]+)\s*(GB)?", storage)
    if m is None:
        return None
    value = float(m.group(1))
    return value if m.group(2) else value / GB


def _torchrec_loggers() -> list[logging.Logger]:
    """TorchRec's loggers: the ``torchrec.*`` module loggers and its ``<Destination>-<Handler>`` ones."""
    names = [
        n
        for n in list(logging.root.manager.loggerDict)
        if n == "torchrec" or n.startswith("torchrec.") or _TORCHREC_HANDLER_LOGGER.match(n)
    ]
    return [logging.getLogger(n) for n in names]


@contextlib.contextmanager
def quiet(verbose: bool) -> Iterator[None]:
    """Silence TorchRec's loggers and warnings (stats box, topology advice) unless asked for them."""
    if verbose:
        yield
        return
    loggers = [*_torchrec_loggers(), logging.getLogger("torchrec")]
    old = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    root = logging.getLogger()
    root.addFilter(_from_torchrec_below_error)  # its planner also logs on the root logger ("Sharding spec not
    try:  # found" for every data-parallel table)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        root.removeFilter(_from_torchrec_below_error)
        for lg, level in zip(loggers, old, strict=True):
            lg.setLevel(level)


def _from_torchrec_below_error(record: logging.LogRecord) -> bool:
    """Keep a root-logger record unless TorchRec's code logged it below ERROR."""
    return record.levelno >= logging.ERROR or f"{os.sep}torchrec{os.sep}" not in record.pathname


def translate(
    err: Exception, inventory: Inventory, topology: Topology, reserve_fraction: float, torchrec_memory: bool
) -> Exception:
    """TorchRec's PlannerError (a multi-line box) -> our one-line typed error naming the limit/table."""
    text = str(err)
    kind = "hbm" if topology.device_type == "cuda" else "ddr"
    reserve = f", {reserve_fraction:.0%} reserved" if reserve_fraction else ""
    hint = f"torchrec planner, {topology.memory_per_device_gb:.4g} GB {kind} per device{reserve}"
    if torchrec_memory:
        hint += "; its estimate adds input/output buffers to each table"
    m = _SHARD_FAILED.search(text)
    if m is not None:
        idx = m.group("table")
        table = next((t for i, t in enumerate(inventory.tables) if internal_name(i) == idx), None)
        free = storage_field(m.group("storage"), kind)
        need = storage_field(m.group("need"), kind)
        if table is not None and free is not None:
            counted = ""
            if need is not None and torchrec_memory:
                counted = f"; it counts this table as {need:.3f} GB"
            return InfeasiblePlacementError(table.name, table.size_gb, free, hint + counted)
    need_match = _GLOBAL_NEED.search(text)
    have_match = _GLOBAL_HAVE.search(text)
    if need_match is not None and have_match is not None:
        need_gb = storage_field(need_match.group("storage"), kind)
        have_gb = storage_field(have_match.group("storage"), kind)
        if need_gb is not None and have_gb is not None:
            return NoPlacementError(
                f"torchrec planner found no plan: it needs {need_gb:.3f} GB, {have_gb:.3f} GB available over "
                f"{topology.num_devices} devices ({hint}); add devices or raise --memory-gb"
            )
    first = next((line.strip() for line in text.splitlines() if line.strip()), type(err).__name__)
    return PlanError(f"torchrec planner found no plan: {first} ({hint})")


def unhonoured(said: str, text: str, inventory: Inventory, topology: Topology) -> PlanError:
    """TorchRec's enumerator found no (sharding type, kernel) for a table (`text`, its error; `said`, its first
    line with our table names): a BrokenConstraintError naming the table and the constraint it cannot honour on
    these devices when the table constrains its types or kernels (so `compare` measures its plan without that
    constraint, labelled, and the gate reports its absence), else a PlanError with TorchRec's line."""
    names = {internal_name(i): t for i, t in enumerate(inventory.tables)}
    found = re.search(r"\bt\d+\b", text.split(". Module:")[0])
    table = names.get(found.group(0)) if found else None
    c = table.constraints if table is not None else None
    if table is None or c is None or (c.sharding_types is None and c.compute_kernels is None):
        return PlanError(f"torchrec planner cannot place: {said}")
    field = "sharding_types" if c.sharding_types is not None else "compute_kernels"
    asked = list(getattr(c, field))
    why = f"TorchRec's planner offers none of them for this table on {topology.device_type}: {said}"
    return BrokenConstraintError("torchrec planner", table.name, f"{field} {asked}: none is offered", why)
