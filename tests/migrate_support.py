"""Rank side of tests/test_torchrec_migrate.py (imported by the rank processes `run_ranks` starts; tests/ is put on
their PYTHONPATH): train under plan A, save with DCP, restart under plan B and report the full state both saw.

``scenario_rank(rank, job)`` runs every scenario of the job: DMP under A (`torchrec_migrate_job.sharded`), 3 steps,
``dcp.save`` of ``{"model", "optim"}``, 2 more steps (the losses A would have had next); then DMP under B, the
checkpoint loaded (`load_checkpoint`, or plain DCP with ``"plain": true``), 2 steps. Rank 0 writes, per scenario,
the full weights and optimizer state (gathered from every rank's shards) under A and B and the losses to
``<dir>/<scenario>.pt``; then the model change (`model_change_rank`). ``verify_rank`` loads a rewritten checkpoint
under B with plain DCP and writes the same.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

from dreamshard.integrations.torchrec_build import build_ebc
from dreamshard.integrations.torchrec_checkpoint import table_of
from dreamshard.integrations.torchrec_file import TorchRecPlanFile
from dreamshard.integrations.torchrec_migrate import _dcp_reason, _flatten, load_checkpoint
from dreamshard.integrations.torchrec_migrate_job import job_model, sharded
from dreamshard.integrations.torchrec_moves import field_of
from dreamshard.values import Inventory

LR = 0.05


def batch(inventory: Inventory, rank: int, step: int, empty: tuple[str, ...] = ()) -> Any:
    """A fixed local batch of `rank` at `step`: 4 samples, 0-2 ids per table (none for the tables in `empty`)."""
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor  # optional dependency: torchrec

    g = torch.Generator().manual_seed(rank * 1000 + step)
    lengths = torch.randint(0, 3, (4 * len(inventory.tables),), generator=g)
    for i, t in enumerate(inventory.tables):
        if t.name in empty:
            lengths[4 * i : 4 * i + 4] = 0
    values = [
        torch.randint(0, t.num_embeddings, (int(lengths[4 * i : 4 * i + 4].sum()),), generator=g)
        for i, t in enumerate(inventory.tables)
    ]
    return KeyedJaggedTensor(keys=inventory.table_names, values=torch.cat(values), lengths=lengths.int())


def step(model: Any, optimizer: Any, kjt: Any) -> float:
    optimizer.zero_grad()
    out = model(kjt)
    out = out.wait() if hasattr(out, "wait") else out
    loss = (out if isinstance(out, torch.Tensor) else out.values()).pow(2).mean()
    loss.backward()
    optimizer.step()
    return float(loss.detach())


def full_state(model: Any, optimizer: Any) -> dict[str, torch.Tensor]:
    """{'<table>.weight' | '<table>.<field>': the full tensor}, gathered from every rank's shards (a collective)."""
    flat = dict(_flatten("", {"model": model.state_dict(), "optim": optimizer.state_dict()}))
    mine: dict[str, tuple[tuple[int, ...], list[tuple[tuple[int, ...], torch.Tensor]]]] = {}
    for key, value in flat.items():
        name = _canonical(key)
        if name is None:
            continue
        if hasattr(value, "local_shards"):
            pieces = [(tuple(s.metadata.shard_offsets), s.tensor.detach().clone()) for s in value.local_shards()]
        else:
            pieces = [((0,) * value.dim(), value.detach().clone())]
        mine[name] = (tuple(value.size()), pieces)
    everyone: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    out: dict[str, torch.Tensor] = {}
    for part in everyone:
        for name, (size, pieces) in part.items():
            full = out.setdefault(name, torch.zeros(size))
            for offsets, t in pieces:
                full[tuple(slice(o, o + n) for o, n in zip(offsets, t.shape, strict=True))] = t
    return out


def _canonical(key: str) -> str | None:
    """'<table>.weight' or '<table>.<field>' (fused and dense names alike) of a table's flat state key; a dense
    parameter's key without its 'model.' / 'optim.state.' prefix."""
    if key.startswith("model."):
        table = table_of(key[6:])
        return f"{table}.weight" if table else key[6:]
    body = key.removeprefix("optim.state.")
    if body == key:
        return None
    head, _, rest = body.partition(".weight.")
    table = table_of(f"{head}.weight")
    if table is None:
        return body
    field = field_of(rest, table)
    return None if field == "step" else f"{table}.{field}"


def scenario_rank(rank: int, job: dict[str, Any]) -> dict[str, Any]:
    logging.getLogger("torchrec").setLevel(logging.ERROR)
    inventory = Inventory.model_validate(job["inventory"])
    root = Path(job["dir"])
    out: dict[str, Any] = {}
    for name, sc in job["scenarios"].items():
        a, b = (TorchRecPlanFile.model_validate(sc[k]) for k in ("a", "b"))
        model, opt = sharded(build_ebc(inventory), a, 2, sc["optimizer"], LR)
        losses_a = [step(model, opt, batch(inventory, rank, s)) for s in range(3)]
        dcp.save({"model": model.state_dict(), "optim": opt.state_dict()}, checkpoint_id=str(root / name))
        saved = full_state(model, opt)
        losses_a += [step(model, opt, batch(inventory, rank, s)) for s in (3, 4)]
        model_b, opt_b = sharded(build_ebc(inventory), b, 2, sc["optimizer"], LR)
        error, report = "", None
        try:
            if sc.get("plain"):
                state = {"model": model_b.state_dict(), "optim": opt_b.state_dict()}
                dcp.load(state, checkpoint_id=str(root / name))
                model_b.load_state_dict(state["model"])
                opt_b.load_state_dict(state["optim"])
            else:
                report = load_checkpoint(root / name, model_b, opt_b).model_dump()
        except BaseException as e:  # what plain DCP says (its CheckpointException is a BaseException)
            error = _dcp_reason(e) if hasattr(e, "failures") else f"{type(e).__name__}: {e}"[:300]
        dist.barrier()
        restored = full_state(model_b, opt_b) if not error else {}
        losses_b = [step(model_b, opt_b, batch(inventory, rank, s)) for s in (3, 4)] if not error else []
        if rank == 0:
            torch.save({"saved": saved, "restored": restored}, root / f"{name}.pt")
        out[name] = {"losses_a": losses_a, "losses_b": losses_b, "error": error, "report": report}
    if "model_change" in job:
        out["model_change"] = model_change_rank(rank, {**job["model_change"], "dir": job["dir"]})
    return out


def model_change_rank(rank: int, job: dict[str, Any]) -> dict[str, Any]:
    """Model v1 (tests/migrate_models.py: tables user, item, ctx and an MLP; EXACT_ROWWISE_ADAGRAD for the tables,
    Adagrad for the MLP) trained under plan A and saved; then v2 (ctx removed, ad added) under plan B built twice
    from the same seed: fresh, and with the checkpoint loaded (`load_checkpoint`). The batches carry no ctx or ad
    ids, so v2's losses continue v1's. Rank 0 writes the full states to ``<dir>/model_change.pt``."""
    import migrate_models

    logging.getLogger("torchrec").setLevel(logging.ERROR)
    root = Path(job["dir"])
    a, b = (TorchRecPlanFile.model_validate(job[k]) for k in ("a", "b"))
    v1, v2 = migrate_models.inventory("v1"), migrate_models.inventory("v2")
    empty = ("ctx", "ad")
    model, opt = sharded(migrate_models.build_v1(), a, 2, "exact_row_wise_adagrad", LR, "adagrad")
    losses_a = [step(model, opt, batch(v1, rank, s, empty)) for s in range(3)]
    dcp.save({"model": model.state_dict(), "optim": opt.state_dict()}, checkpoint_id=str(root / "model_change"))
    saved = full_state(model, opt)
    losses_a += [step(model, opt, batch(v1, rank, s, empty)) for s in (3, 4)]
    fresh_model, fresh_opt = sharded(migrate_models.build_v2(), b, 2, "exact_row_wise_adagrad", LR, "adagrad")
    fresh = full_state(fresh_model, fresh_opt)
    model_b, opt_b = sharded(migrate_models.build_v2(), b, 2, "exact_row_wise_adagrad", LR, "adagrad")
    report = load_checkpoint(root / "model_change", model_b, opt_b).model_dump()
    restored = full_state(model_b, opt_b)
    losses_b = [step(model_b, opt_b, batch(v2, rank, s, empty)) for s in (3, 4)]
    if rank == 0:
        torch.save({"saved": saved, "restored": restored, "fresh": fresh}, root / "model_change.pt")
    return {"losses_a": losses_a, "losses_b": losses_b, "report": report}


def verify_rank(rank: int, job: dict[str, Any]) -> dict[str, Any]:
    """Load a rewritten checkpoint under plan B with plain DCP (the model `job['model']` when given, else the
    inventory's EBC); rank 0 writes the full state to job['pt']."""
    logging.getLogger("torchrec").setLevel(logging.ERROR)
    inventory = Inventory.model_validate(job["inventory"])
    model, opt = sharded(
        job_model(inventory, job.get("model")),
        TorchRecPlanFile.model_validate(job["b"]),
        2,
        job["optimizer"],
        LR,
        job.get("dense", "sgd"),
    )
    state = {"model": model.state_dict(), "optim": opt.state_dict()}
    dcp.load(state, checkpoint_id=job["checkpoint"])
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["optim"])
    restored = full_state(model, opt)
    if rank == 0:
        torch.save(restored, job["pt"])
    return {"loss": step(model, opt, batch(inventory, rank, 3, ("ctx", "ad")))}
