"""The measurement corpus: every device timing ever made, keyed by what it measured (docs/architecture/measuring.md,
"The measurement corpus").

A device's timing depends on the hardware, the backend and its settings, the batch size and the content of its
tables, never on the inventory version, the task or the other devices: it is stored once under the sha256 of
exactly that (`device_key`) and reused by any placement that puts the same tables on one device. The corpus is a
directory of JSONL files, one per writer (`WORKERS_WRITER`: the timings profiling workers sent back), read
together. Communication is not stored: it is recomputed from the world size's comm model.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import math
import os
import platform
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path

from pydantic import ValidationError

from dreamshard.documents import describe_validation_error, read_text
from dreamshard.errors import InputFileError, PlanError
from dreamshard.placement.expand import unit_table
from dreamshard.profiling.base import DeviceTiming
from dreamshard.values import BackendInfo, Table, Topology
from dreamshard.values.costs import MAX_RECORD_MS
from dreamshard.values.tables import StrictModel
from dreamshard.values.units import parse_unit

#: bump when what a timing means changes (the operator, the index synthesis): old entries stop matching.
#: 2: a table without an access histogram is measured with the assumed one (inventory.histogram), not uniformly.
CORPUS_VERSION = 2
#: the file of the timings profiling workers measured (merged by the dispatcher from the batches' shards)
WORKERS_WRITER = "profile-workers"


class CorpusEntry(StrictModel):
    """One device timing and what it was of."""

    key: str
    hardware: str
    backend: str
    batch_size: int
    tables: tuple[str, ...]  # names, for people reading the file
    fwd_ms: tuple[float, ...]
    bwd_ms: tuple[float, ...]
    rows_used: tuple[int, ...] = ()
    inventory: str = ""  # fingerprint of the inventory being measured when this timing was made
    info: BackendInfo | None = None  # the measuring backend's settings and index seed (the key's other parts)
    seed: int | None = None


@lru_cache(maxsize=4)
def hardware_id(device: str) -> str:
    """What the timings of `device` depend on besides the backend: machine, CPU model, torch build (and the GPU
    model for cuda devices). The torch build is read from its installed metadata, which names it as
    `torch.__version__` does, so only a cuda device loads torch here: the pipeline's orchestration and a simulated
    profiling run read the corpus's keys without it."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    parts = [platform.machine(), cpu, f"torch {_torch_version()}"]
    if device.startswith("cuda"):
        import torch  # loads torch

        if torch.cuda.is_available():
            parts.append(torch.cuda.get_device_name(0))
    return " | ".join(parts)


def _torch_version() -> str:
    """`torch.__version__`, from the installed metadata where there is some (a build without it loads torch)."""
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        import torch  # loads torch

        return str(torch.__version__)


def device_key(info: BackendInfo, seed: int, tables: Sequence[Table], hardware: str | None = None) -> str:
    """The corpus key of one device's timing (independent of the tables' order on the device); `hardware`: that of
    the machine that measures it (default: this one's)."""
    payload = {
        "v": CORPUS_VERSION,
        "hardware": hardware if hardware is not None else hardware_id(info.device),
        "backend": info.model_dump(mode="json", exclude={"statistic"}),  # the raw repeats serve either statistic
        "seed": seed,
        "tables": sorted(t.canonical_json() for t in tables),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def timing_problem(e: CorpusEntry) -> str | None:
    """Why an entry's timings are no timings: not finite, negative, above the bound every file of timings has
    (values.costs.MAX_RECORD_MS: what the measurement file would refuse never enters the corpus, to be reused and
    written there), or not forward/backward pairs."""
    times = (*e.fwd_ms, *e.bwd_ms)
    if not e.fwd_ms or len(e.fwd_ms) != len(e.bwd_ms):
        return "its timings are not forward/backward pairs"
    bad = next((x for x in times if not (math.isfinite(x) and 0.0 <= x <= MAX_RECORD_MS)), None)
    if bad is not None:
        return f"timing {bad:g} ms is outside 0..{MAX_RECORD_MS:g} (MAX_RECORD_MS)"
    return None


def entry_problem(e: CorpusEntry, tables: Mapping[str, Table]) -> str | None:
    """Why a timing someone else made (a profiling worker) cannot join the corpus, or None: it must name tables
    of `tables` (the batch's inventory), carry its backend settings, hold finite non-negative timings, and its key
    must be the key of exactly that content on its hardware (so it can never stand for other tables)."""
    if e.info is None or e.seed is None:
        return "it carries no backend settings"
    if e.info.name != e.backend or e.info.batch_size != e.batch_size:
        return "its backend settings disagree with its backend or batch size"
    if not e.tables:
        return "it names no table"
    measured: list[Table] = []
    for n in e.tables:  # a table of the batch's inventory, or a unit (shard, replica) of one
        try:
            measured.append(unit_table(tables, n))
        except PlanError:
            return f"table '{str(n)[:64]}' is not in the batch's inventory"
    if (why := timing_problem(e)) is not None:
        return why
    if e.key != device_key(e.info, e.seed, measured, e.hardware):
        return "its key is not the key of its tables, settings and hardware"
    return None


class DeviceCorpus:
    """Reads every `*.jsonl` of `root`; appends to `root/<writer>.jsonl`. Counts hits and misses."""

    def __init__(self, root: Path, writer: str, reuse: bool = True) -> None:
        """`reuse=False`: record only (measurement that must be fresh, e.g. refinement, still adds to it)."""
        if not writer or "/" in writer or writer.startswith("."):
            raise InputFileError(f"corpus writer name '{writer}' is not a plain file name")
        self.root = Path(root)
        if self.root.exists() and not self.root.is_dir():
            raise InputFileError(f"measurement corpus {self.root} is not a directory")
        self.path = self.root / f"{writer}.jsonl"
        self.reuse = reuse
        self.entries: dict[str, CorpusEntry] = {}
        # backend name -> (hardware, backend settings) of the last timing the profiling workers sent back
        self.worker_backend: dict[str, tuple[str, BackendInfo]] = {}
        self.hits = 0
        self.misses = 0
        for f in sorted(self.root.glob("*.jsonl")) if self.root.is_dir() else ():
            self._read(f)
        self.root.mkdir(parents=True, exist_ok=True)
        self.path.touch()  # the writer's file exists even when everything came from the corpus (a DVC output)
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):  # a killed writer's partial last entry: cut before appending
            with open(self.path, "rb+") as partial:
                partial.truncate(data.rfind(b"\n") + 1)

    def _read(self, path: Path) -> None:
        lines = read_text(path).splitlines()  # a regular UTF-8 file, else one line naming it
        for i, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                e = CorpusEntry.model_validate_json(line)
            except ValidationError as err:
                if i == len(lines) - 1:
                    continue  # a killed writer's last line: that timing is simply measured again
                raise InputFileError(f"{path}:{i + 1}: not a corpus entry ({describe_validation_error(err)})") from None
            if (why := timing_problem(e)) is not None:
                raise InputFileError(f"{path}:{i + 1}: not a corpus entry ({why})")
            self.entries.setdefault(e.key, e)
            if path.stem == WORKERS_WRITER and e.info is not None:
                self.worker_backend[e.backend] = (e.hardware, e.info)

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, key: str) -> DeviceTiming | None:
        e = self.entries.get(key) if self.reuse else None
        if e is None:
            self.misses += 1
            return None
        self.hits += 1
        return DeviceTiming(e.fwd_ms, e.bwd_ms, e.rows_used)

    def known_before(self, key: str, inventory: str) -> bool:
        """Whether `key` was measured for another inventory (version) than `inventory`: what the corpus held
        before this version's runs, so a resumed or repeated run decides as the first one did."""
        e = self.entries.get(key)
        return e is not None and e.inventory != inventory

    def add(
        self,
        key: str,
        info: BackendInfo,
        tables: Sequence[Table],
        timing: DeviceTiming,
        inventory: str = "",
        seed: int | None = None,
    ) -> None:
        if key in self.entries and self.reuse:
            return
        self.add_entry(
            CorpusEntry(
                key=key,
                hardware=hardware_id(info.device),
                backend=info.name,
                batch_size=info.batch_size,
                tables=tuple(t.name for t in tables),
                fwd_ms=tuple(timing.fwd_ms),
                bwd_ms=tuple(timing.bwd_ms),
                rows_used=tuple(timing.rows_used),
                inventory=inventory,
                info=info,
                seed=seed,
            )
        )

    def add_entry(self, e: CorpusEntry) -> bool:
        """Append one entry (made here or by a worker); False when the corpus already holds its key."""
        if e.key in self.entries and self.reuse:
            return False
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as f:
            f.write(e.model_dump_json() + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.entries.setdefault(e.key, e)
        return True

    def stats(self) -> dict[str, int]:
        return {"device_timings_measured": self.misses, "device_timings_reused": self.hits, "corpus_size": len(self)}


class TimingRecorder(DeviceCorpus):
    """A corpus in memory that reuses nothing and keeps what is measured: a profiling worker's, whose timings travel
    back in its batch's shard and join the dispatcher's corpus (``DeviceCorpus.add_entry`` under WORKERS_WRITER)."""

    def __init__(self) -> None:  # no directory: nothing is read or written
        self.reuse = False
        self.entries = {}
        self.worker_backend = {}
        self.recorded: list[CorpusEntry] = []
        self.hits = 0
        self.misses = 0

    def add_entry(self, e: CorpusEntry) -> bool:
        self.recorded.append(e)
        self.entries.setdefault(e.key, e)
        return True


def fused_operators(tables: list[Table], topology: Topology) -> list[tuple[list[Table], int]]:
    """How one device's units run, as (units, batch) per fused operator: whole tables, column shards and row shards
    in one at the global batch; data-parallel replicas in a second at the device's share of the batch. Each is one
    device timing (and one corpus entry): `_device_cost` measures these, the profile stage's corpus check
    (dreamshard.profiling.task_choice) looks these up."""
    replicas = [t for t in tables if parse_unit(t.name).kind == "replica"]
    rest = [t for t in tables if parse_unit(t.name).kind != "replica"]
    groups = [(rest, topology.batch_size)] if rest else []
    return groups + ([(replicas, max(1, topology.batch_size // topology.num_devices))] if replicas else [])
