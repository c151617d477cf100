"""Inventories: from a file (validated, normalised) or the synthetic pool of the `inventory` section (the `inventory`
stage, `dreamshard inventory validate | synth | fingerprint`), from a TorchRec model, a DLRM trace or a public
dataset's preset, and pushed to the store as a new version (`inventory push`)."""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import entry_points
from pathlib import Path

from pydantic import Field

from dreamshard.documents import check_outputs, load_inventory, save_inventory
from dreamshard.errors import ConfigError
from dreamshard.integrations.torchrec_job import job_topology, load_topology
from dreamshard.inventory.presets import DEFAULT_POOLING, DEFAULT_ZIPF_EXPONENT, PRESETS, preset_inventory
from dreamshard.store import InventoryRef, open_store, push_inventory
from dreamshard.usecases.base import Request, Result
from dreamshard.values import Inventory
from dreamshard.values.names import check_inventory_names


class InventoryRequest(Request):
    source: Path | None = None  # an inventory file; None: the synthetic pool of settings.inventory
    out: Path | None = None


class InventoryResult(Result):
    inventory: Inventory
    out: Path | None = None

    @property
    def total_gb(self) -> float:
        return sum(t.size_gb for t in self.inventory.tables)


def run(request: InventoryRequest) -> InventoryResult:
    if request.out is not None:
        check_outputs({"INVENTORY": request.source}, {"--output": request.out})
    if request.source is not None:
        inv = load_inventory(request.source)
    else:
        inv = check_inventory_names(request.settings.inventory.synthesize())
    if request.out is not None:
        save_inventory(inv, request.out)
    return InventoryResult(inventory=inv, out=request.out)


class PresetRequest(Request):
    """`inventory preset`: the categorical tables of a public dataset (presets.PRESETS) from its cardinalities."""

    preset: str
    out: Path
    dim: int | None = None  # default: the preset's
    pooling: float = DEFAULT_POOLING
    zipf_exponent: float = DEFAULT_ZIPF_EXPONENT
    name: str | None = None


def preset_names() -> tuple[str, ...]:
    """The public datasets `inventory preset` knows (dreamshard.inventory.presets)."""
    return tuple(PRESETS)


def preset(request: PresetRequest) -> InventoryResult:
    inv = preset_inventory(
        request.preset, dim=request.dim, pooling=request.pooling, zipf_exponent=request.zipf_exponent, name=request.name
    )
    save_inventory(inv, request.out)
    return InventoryResult(inventory=inv, out=request.out)


class FromTraceRequest(Request):
    """`inventory from-trace`: an open DLRM embedding trace (a torch file of indices, offsets, lengths)."""

    trace: Path
    out: Path
    name: str | None = None  # default: the file's stem
    max_tables: int | None = None
    batch_size: int | None = None  # samples per batch of the reuse histograms (default: all)
    dim: int = 64


def from_trace(request: FromTraceRequest) -> InventoryResult:
    from dreamshard.inventory.trace import inventory_from_trace  # loads torch: this use case only

    check_outputs({"TRACE": request.trace}, {"--output": request.out})
    inv = inventory_from_trace(
        request.trace, name=request.name, batch_size=request.batch_size, max_tables=request.max_tables, dim=request.dim
    )
    save_inventory(inv, request.out)
    return InventoryResult(inventory=inv, out=request.out)


class FromTorchrecRequest(Request):
    """`inventory from-torchrec`: the model (`pkg.mod:build` or `file.py:build`), its KJT batches file, the team's
    constraints file (`.py` defining `constraints`, or YAML/JSON) and the training job (`world_size` and the
    options that need it, or TorchRec's `Topology`, whose bandwidths are recorded as the job's world)."""

    model: str
    batches: Path | None = None
    batch_size: int | None = None
    planned_batch_size: int = 2048
    name: str | None = None
    out: Path
    allow_pickle: bool = False
    constraints: Path | None = None
    world_size: int | None = None
    devices_per_host: int | None = None
    memory_gb: float | None = None
    optimizer: str | None = None
    device_type: str | None = None
    torchrec_topology: str | None = None  # `pkg.mod:name` / `file.py:name`: TorchRec's Topology (or what builds it)
    world: str | None = None  # the job's world by name (fast, nvlink-ib, host, measured)


def from_torchrec(request: FromTorchrecRequest) -> InventoryResult:
    """The inventory of a TorchRec model measured from its batches, with its constraints and job
    (integrations.torchrec_model), written to `out`."""
    # loads torch: this use case only
    from dreamshard.integrations.torchrec_model import load_model, measure_module

    check_outputs({"--batches": request.batches, "--constraints": request.constraints}, {"--output": request.out})
    if request.batches is not None and request.batch_size is None:
        raise ConfigError("--batches needs --batch-size (the samples per batch in the file)")
    r = request
    topology = load_topology(r.torchrec_topology) if r.torchrec_topology is not None else None
    job = job_topology(
        r.world_size,
        r.devices_per_host,
        r.memory_gb,
        r.optimizer,
        r.device_type,
        r.planned_batch_size,
        topology=topology,
        world=r.world,
    )
    inv, notes = measure_module(
        load_model(r.model),
        r.batches,
        r.batch_size,
        r.planned_batch_size,
        r.name,
        r.allow_pickle,
        constraints=r.constraints,
        job=job,
    )
    save_inventory(inv, r.out)
    return InventoryResult(inventory=inv, out=r.out, warnings=notes)


#: Entry point group of the functions told about a new inventory version: `notifier(ref) -> str | None` (an
#: event id, or None when nothing was sent). The Prefect flows register one that emits
#: `dreamshard.inventory.changed`, which the orchestrator deployment's trigger listens for.
NOTIFIER_GROUP = "dreamshard.notifiers"


class PushRequest(Request):
    source: Path
    store: str | None = None  # None: publish.store_uri, where the pipeline and the replan read inventories
    endpoint_url: str | None = None
    notify: bool = True


class PushResult(Result):
    ref: InventoryRef
    notes: list[str] = Field(default_factory=list)  # what each notifier did


def notifiers() -> dict[str, Callable[[InventoryRef], str | None]]:
    return {ep.name: ep.load() for ep in entry_points(group=NOTIFIER_GROUP)}


def push(request: PushRequest) -> PushResult:
    """Store the inventory as a new version (if new) and point `current` at it (in `store`, else publish.store_uri);
    tell the notifiers."""
    inv = load_inventory(request.source)
    uri = request.store or request.settings.publish.store_uri
    ref = push_inventory(open_store(uri, endpoint_url=request.endpoint_url), inv, store_uri=uri)
    notes: list[str] = []
    if ref.changed and request.notify:
        found = notifiers()
        if not found:
            notes.append("no notifier installed (the Prefect flows provide one): no event emitted")
        for name, notify in found.items():
            event_id = notify(ref)
            notes.append(
                f"{name}: emitted dreamshard.inventory.changed ({event_id})"
                if event_id
                else f"{name}: no event emitted (no Prefect API configured: set PREFECT_API_URL to trigger "
                f"the deployment)"
            )
    return PushResult(ref=ref, notes=notes)
