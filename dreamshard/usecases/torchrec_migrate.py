"""`dreamshard torchrec migrate`: a training checkpoint saved under one plan rewritten for another (docs/torchrec.md,
"Moving a checkpoint to a new plan"). Everything that can be checked here is, before any rank starts: the
checkpoint (present, readable, not truncated), the plan against the model (every table, shapes) and the model's
tables against the checkpoint's; then the new plan's ranks run on this machine's CPUs over gloo
(dreamshard.integrations.torchrec_ranks), each moving its part (dreamshard.integrations.torchrec_migrate)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from dreamshard.documents import load_inventory
from dreamshard.errors import CheckpointError
from dreamshard.integrations.torchrec import sharding_plan
from dreamshard.integrations.torchrec_checkpoint import MODEL, Wanted, infer_optimizer, plan_moves, read_checkpoint
from dreamshard.integrations.torchrec_file import read_torchrec_plan
from dreamshard.integrations.torchrec_migrate_job import job_model
from dreamshard.integrations.torchrec_ranks import run_ranks
from dreamshard.usecases.base import Request, Result


class MigrateRequest(Request):
    source: Path  # the checkpoint saved under the old plan (a DCP directory)
    plan: Path  # the new plan: a TorchRec plan file (`dreamshard torchrec export`)
    inventory: Path
    out: Path  # the new checkpoint's directory (must not exist)
    model: str | None = None  # pkg.mod:build of the job's model; default: the inventory's modules
    timeout_s: float = 600.0


class MigrateResult(Result):
    out: Path
    world_size: int
    optimizer: str  # the fused optimizer the checkpoint was trained with
    translated: tuple[str, ...]  # tables whose state changed name or row-state cut (what DCP alone cannot load)
    relaid: tuple[str, ...]  # tables whose column cuts or data-parallel form changed
    tables: int
    bytes_written: int
    load_s: float  # the slowest rank's load + translate
    total_s: float  # checks, rank start, load and write


def _check(request: MigrateRequest) -> tuple[dict[str, Any], int, str]:
    """(the ranks' job, the world size, the optimizer): every check that needs no process group."""
    if request.out.exists():
        raise CheckpointError(f"--out {request.out} exists; choose a new directory")
    stored = read_checkpoint(request.source)
    inventory = load_inventory(request.inventory)
    doc = read_torchrec_plan(request.plan)
    model = job_model(inventory, request.model)
    sharding_plan(doc, model, doc.world_size)  # the plan against the model: every table, shapes (PlanError)
    wanted = {f"{MODEL}.{k}": Wanted(tuple(v.shape)) for k, v in model.state_dict().items()}
    plan_moves({k: v for k, v in stored.items() if k.startswith(f"{MODEL}.")}, wanted)
    kind = infer_optimizer(stored)
    job = {
        "inventory": inventory.model_dump(mode="json"),
        "plan": doc.model_dump(mode="json"),
        "model": request.model,
        "optimizer": kind,
        "source": str(request.source.resolve()),
        "out": str(request.out.resolve()),
    }
    return job, doc.world_size, kind


def migrate(request: MigrateRequest) -> MigrateResult:
    """Rewrite the checkpoint for the new plan (temporary directory, renamed when complete)."""
    t0 = time.perf_counter()
    job, world_size, kind = _check(request)
    reports = run_ranks("dreamshard.integrations.torchrec_migrate_job:migrate_rank", job, world_size, request.timeout_s)
    written = sum(p.stat().st_size for p in request.out.rglob("*") if p.is_file())
    return MigrateResult(
        out=request.out,
        world_size=world_size,
        optimizer=kind,
        translated=tuple(sorted({t for r in reports for t in r["translated_tables"]})),
        relaid=tuple(sorted({t for r in reports for t in r["relaid_tables"]})),
        tables=len(read_torchrec_plan(request.plan).tables),
        bytes_written=written,
        load_s=max(float(r["seconds"]) for r in reports),
        total_s=time.perf_counter() - t0,
    )
