"""Plans in TorchRec's terms: a plan written as TorchRec's plan file (`dreamshard torchrec export`; the file
`dreamshard.integrations.torchrec.load_sharding_plan` reads), and a TorchRec plan file turned into a plan
(`dreamshard torchrec import`) to evaluate or compare it (docs/architecture/measuring.md, "Integrations")."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from dreamshard.documents import describe_validation_error
from dreamshard.errors import TopologyError
from dreamshard.integrations.torchrec_file import (
    TorchRecPlanFile,
    check_kernel,
    plan_from_document,
    read_torchrec_plan,
    torchrec_document,
)
from dreamshard.usecases.base import Request, Result
from dreamshard.values import Inventory, Plan, Topology


class ExportRequest(Request):
    plan: Plan
    inventory: Inventory
    kernel: str | None = None  # the tables at the default kernel: fused or dense (cuda also: the UVM kernels)


class ExportResult(Result):
    document: TorchRecPlanFile  # the TorchRec plan file (writing it is the door's: save_torchrec_plan)
    tables: int
    column_wise: int  # tables split by columns
    world_size: int


def export(request: ExportRequest) -> ExportResult:
    """Write the TorchRec plan file of a plan, checked against its inventory first (every table once, devices,
    memory); each table's kernel is the plan's, `kernel` replacing the default `fused` where given."""
    plan = request.plan
    kernel = check_kernel(request.kernel, plan.topology.device_type) if request.kernel is not None else None
    doc = torchrec_document(plan, request.inventory, kernel)
    split = sum(1 for t in doc.tables.values() if t.sharding_type == "column_wise")
    return ExportResult(document=doc, tables=len(doc.tables), column_wise=split, world_size=doc.world_size)


class ImportRequest(Request):
    source: Path  # a TorchRec plan file (from --torchrec-out, or a bare {table: {...}} map)
    inventory: Inventory
    memory_gb: float
    devices: int | None = None  # the ranks (needed for a bare map; else the file's)
    batch_size: int = 2048
    sharder: str | None = None  # the plan's label (default: the file's, else torchrec)


class ImportResult(Result):
    plan: Plan
    inventory: Inventory


def _topology(devices: int, memory_gb: float, batch_size: int, device_type: str) -> Topology:
    try:
        return Topology.model_validate(
            {
                "num_devices": devices,
                "memory_per_device_gb": memory_gb,
                "batch_size": batch_size,
                "device_type": device_type,
            }
        )
    except ValidationError as e:
        raise TopologyError(f"topology {describe_validation_error(e)}") from None


def import_plan(request: ImportRequest) -> ImportResult:
    """A TorchRec plan file as a dreamshard plan of the inventory (memory checked; writing it is the door's)."""
    doc = read_torchrec_plan(request.source, request.devices)
    topo = _topology(doc.world_size, request.memory_gb, request.batch_size, doc.device_type)
    plan = plan_from_document(doc, request.inventory, topo, request.sharder)
    return ImportResult(plan=plan, inventory=request.inventory)
