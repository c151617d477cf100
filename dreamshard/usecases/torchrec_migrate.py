"""`dreamshard torchrec migrate`: a training checkpoint saved under one plan (and model version) rewritten for another
(docs/torchrec.md, "Moving a checkpoint to a new plan", "When the model changes").

Everything that can be checked here is, before any rank starts: the output path, the plan's world size against
this machine's cores, the checkpoint (present, its metadata read without running code, not truncated), the plan
against the model (every table, shapes), the model's state against the checkpoint's (what is carried, initialised,
dropped, renamed) and the optimizers the checkpoint was trained with (a fused one with no CPU kernel is refused).
Then the new plan's ranks run on this machine's CPUs over gloo (dreamshard.integrations.torchrec_ranks), each
moving its part into a temporary directory beside the output (dreamshard.integrations.torchrec_migrate), which this
command renames into place once every rank has reported success. The ranks die with the command; a killed
command's temporary directory is removed by the next run to the same output."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dreamshard.documents import load_inventory
from dreamshard.errors import CheckpointError, ProfilingError
from dreamshard.integrations.processes import owned_name, remove_stale
from dreamshard.integrations.torchrec import sharding_plan
from dreamshard.integrations.torchrec_checkpoint import (
    CPU_OPTIMIZERS,
    MODEL,
    infer_dense_optimizer,
    infer_optimizer,
    read_checkpoint,
)
from dreamshard.integrations.torchrec_file import read_torchrec_plan
from dreamshard.integrations.torchrec_migrate_job import job_model
from dreamshard.integrations.torchrec_moves import Moves, Wanted, plan_moves
from dreamshard.integrations.torchrec_ranks import run_ranks
from dreamshard.usecases.base import Request, Result


class MigrateRequest(Request):
    source: Path  # the checkpoint saved under the old plan (a DCP directory)
    plan: Path  # the new plan: a TorchRec plan file (`dreamshard torchrec export`)
    inventory: Path
    out: Path  # the new checkpoint's directory (must not exist)
    model: str | None = None  # pkg.mod:build of the job's model; default: the inventory's modules
    renames: dict[str, str] = {}  # tables renamed since the checkpoint: {old: new}
    init: tuple[str, ...] = ()  # tables and dense modules started as the model initialises them (changed shapes)
    allow_pickle: bool = False  # read the checkpoint's pickles as DCP does (trusted checkpoints only)
    timeout_s: float = 600.0


class MigrateResult(Result):
    out: Path
    world_size: int
    optimizer: str  # the fused optimizer the checkpoint's tables were trained with
    dense_optimizer: str  # the job's own dense optimizer, as its dense parameters' state says
    translated: tuple[str, ...]  # tables whose state changed name or row-state cut (what DCP alone cannot load)
    relaid: tuple[str, ...]  # tables whose column cuts or data-parallel form changed
    carried: tuple[str, ...]
    initialised: tuple[str, ...]  # tables new in the model: as the model initialised them
    dropped: tuple[str, ...]  # tables of the checkpoint the model no longer has
    renamed: tuple[tuple[str, str], ...]
    dense_carried: tuple[str, ...]
    dense_initialised: tuple[str, ...]
    dense_dropped: tuple[str, ...]
    tables: int
    bytes_written: int
    load_s: float  # the slowest rank's load + translate
    total_s: float  # checks, rank start, load and write


def usable_cores() -> int:
    """The CPU cores this process may run on."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1


def _check_out(out: Path) -> None:
    """The output path: not there at all (a dangling link is refused, never written through), in a folder."""
    if out.is_symlink():
        raise CheckpointError(f"--out {out} is a link (to {os.readlink(out)}); choose a new directory")
    if out.exists():
        raise CheckpointError(f"--out {out} exists; choose a new directory")
    if out.parent.is_symlink() and not out.parent.exists():
        raise CheckpointError(f"--out {out}: its folder {out.parent} is a dangling link")
    if out.parent.exists() and not out.parent.is_dir():
        raise CheckpointError(f"--out {out}: {out.parent} is not a directory")


def _temporary(out: Path) -> str:
    return f".{out.name}.tmp-"


def _check(request: MigrateRequest) -> tuple[dict[str, Any], int, Moves]:
    """(the ranks' job, the world size, the model's moves): every check that needs no process group."""
    _check_out(request.out)
    doc = read_torchrec_plan(request.plan)
    cores = usable_cores()
    if doc.world_size > cores:
        raise ProfilingError(
            f"the plan has {doc.world_size} ranks and migrate runs one process per rank on this machine's {cores} "
            f"CPU cores; run it on a machine with {doc.world_size} cores, or load the old checkpoint in the job "
            f"(load_checkpoint)"
        )
    stored = read_checkpoint(request.source, request.allow_pickle)
    kind, data_parallel = infer_optimizer(stored)
    for name in dict.fromkeys((kind, data_parallel)):
        if name not in CPU_OPTIMIZERS:
            raise CheckpointError(
                f"the checkpoint's tables were trained with {name} (Adam or LAMB: the same state), which fbgemm "
                f"runs on no cpu device (its cpu kernels: {', '.join(CPU_OPTIMIZERS)}) and migrate runs its ranks "
                f"on cpu; load the old checkpoint in the job (load_checkpoint, on cuda)"
            )
    dense = infer_dense_optimizer(stored)
    inventory = load_inventory(request.inventory)
    model = job_model(inventory, request.model)
    sharding_plan(doc, model, doc.world_size)  # the plan against the model: every table, shapes (PlanError)
    wanted = {f"{MODEL}.{k}": Wanted(tuple(v.shape)) for k, v in model.state_dict().items()}
    model_state = {k: v for k, v in stored.items() if k.startswith(f"{MODEL}.")}
    moves = plan_moves(model_state, wanted, request.renames, request.init)
    job = {
        "inventory": inventory.model_dump(mode="json"),
        "plan": doc.model_dump(mode="json"),
        "model": request.model,
        "optimizer": kind,
        "data_parallel_optimizer": data_parallel,
        "dense_optimizer": dense,
        "renames": dict(request.renames),
        "init": list(request.init),
        "allow_pickle": request.allow_pickle,
        "source": str(request.source.resolve()),
    }
    return job, doc.world_size, moves


def _union(reports: list[Mapping[str, Any]], key: str) -> tuple[str, ...]:
    return tuple(sorted({t for r in reports for t in r[key]}))


def migrate(request: MigrateRequest) -> MigrateResult:
    """Rewrite the checkpoint for the new plan and model (a temporary directory renamed into place by this
    command once every rank has reported success)."""
    t0 = time.perf_counter()
    out = request.out
    job, world_size, moves = _check(request)
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(out.parent, _temporary(out))
    tmp = out.parent / owned_name(_temporary(out))
    try:
        reports = run_ranks(
            "dreamshard.integrations.torchrec_migrate_job:migrate_rank",
            {**job, "tmp": str(tmp.resolve())},
            world_size,
            request.timeout_s,
        )
        if not (tmp / ".metadata").is_file():
            raise CheckpointError(f"the ranks reported success but wrote no checkpoint into {tmp}")
        _check_out(out)  # nothing appeared there while the ranks ran
        tmp.rename(out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    written = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    return MigrateResult(
        out=out,
        world_size=world_size,
        optimizer=job["optimizer"],
        dense_optimizer=job["dense_optimizer"],
        translated=_union(reports, "translated_tables"),
        relaid=_union(reports, "relaid_tables"),
        carried=moves.carried,
        initialised=moves.initialised,
        dropped=moves.dropped,
        renamed=moves.renamed,
        dense_carried=moves.dense_carried,
        dense_initialised=moves.dense_initialised,
        dense_dropped=moves.dense_dropped,
        tables=len(read_torchrec_plan(request.plan).tables),
        bytes_written=written,
        load_s=max(float(r["seconds"]) for r in reports),
        total_s=time.perf_counter() - t0,
    )
