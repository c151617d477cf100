"""The model, plan and optimizer a checkpoint is moved under, and the rank entry ``dreamshard torchrec migrate``
runs (dreamshard.integrations.torchrec_ranks): DMP under the new plan with the fused optimizer the checkpoint was
trained with (`torchrec_checkpoint.infer_optimizer`) and its dense counterpart for data-parallel tables, then
`torchrec_migrate.migrate_checkpoint`. torchrec and fbgemm_gpu are imported inside the functions (optional
dependencies)."""

from __future__ import annotations

import logging
from typing import Any

import torch
import torch.nn as nn

from dreamshard.integrations.torchrec import sharding_plan
from dreamshard.integrations.torchrec_build import build_ebc, build_model
from dreamshard.integrations.torchrec_file import TorchRecPlanFile
from dreamshard.integrations.torchrec_migrate import migrate_checkpoint
from dreamshard.integrations.torchrec_model import load_model
from dreamshard.values import Inventory


def dense_optimizer(kind: str, lr: float) -> Any:
    """The torch optimizer factory of data-parallel tables matching fused `kind` (its state moves both ways)."""
    from torchrec.optim.rowwise_adagrad import RowWiseAdagrad  # optional dependency: torchrec

    if kind == "exact_adagrad":
        return lambda ps: torch.optim.Adagrad(ps, lr=lr, eps=1e-8)
    if kind == "exact_row_wise_adagrad":
        return lambda ps: RowWiseAdagrad(ps, lr=lr, eps=1e-8)
    return lambda ps: torch.optim.SGD(ps, lr=lr)


def sharded(model: nn.Module, doc: TorchRecPlanFile, world_size: int, kind: str, lr: float) -> tuple[Any, Any]:
    """(DMP of `model` under `doc` on CPU, its optimizer: the fused `kind` combined with `dense_optimizer` for the
    data-parallel tables, state initialised so a checkpoint can be loaded into it)."""
    from fbgemm_gpu.split_embedding_configs import EmbOptimType  # optional dependency: fbgemm_gpu
    from torchrec.distributed.embedding import EmbeddingCollectionSharder  # optional dependency: torchrec
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder  # optional dependency: torchrec
    from torchrec.distributed.model_parallel import DistributedModelParallel  # optional dependency: torchrec
    from torchrec.optim.keyed import CombinedOptimizer, KeyedOptimizerWrapper  # optional dependency: torchrec
    from torchrec.optim.optimizers import in_backward_optimizer_filter  # optional dependency: torchrec

    fused = {"optimizer": EmbOptimType(kind), "learning_rate": lr}
    sharders: list[Any] = [
        EmbeddingBagCollectionSharder(fused_params=fused),
        EmbeddingCollectionSharder(fused_params=fused),
    ]
    plan = sharding_plan(doc, model, world_size, sharders=sharders)
    dmp = DistributedModelParallel(model, device=torch.device("cpu"), plan=plan, sharders=sharders)
    dense = {k: v for k, v in in_backward_optimizer_filter(dmp.named_parameters()) if v.requires_grad}
    optimizers: list[Any] = [dmp.fused_optimizer]
    if dense:
        optimizers.append(KeyedOptimizerWrapper(dense, dense_optimizer(kind, lr)))
    optimizer = CombinedOptimizer(optimizers)
    optimizer.init_state()
    return dmp, optimizer


def job_model(inventory: Inventory, spec: str | None) -> nn.Module:
    """The job's model: `spec` (``pkg.mod:build``) when given, else the inventory's modules (an EBC alone when every
    table is pooled, as `build_ebc` names its state)."""
    if spec:
        return load_model(spec)
    return build_ebc(inventory) if all(t.pooled for t in inventory.tables) else build_model(inventory)


def migrate_rank(rank: int, job: dict[str, Any]) -> dict[str, Any]:
    """One rank of ``dreamshard torchrec migrate``: the model under the new plan, the checkpoint moved into it and
    written to the new directory. Returns the rank's `LoadReport` as JSON."""
    logging.getLogger("torchrec").setLevel(logging.ERROR)
    inventory = Inventory.model_validate(job["inventory"])
    doc = TorchRecPlanFile.model_validate(job["plan"])
    model, optimizer = sharded(job_model(inventory, job.get("model")), doc, doc.world_size, job["optimizer"], 0.01)
    report = migrate_checkpoint(job["source"], job["out"], model, optimizer)
    return {"rank": rank, **report.model_dump(mode="json")}
