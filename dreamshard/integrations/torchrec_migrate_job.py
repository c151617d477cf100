"""The model, plan and optimizers a checkpoint is moved under, and the rank entry ``dreamshard torchrec migrate``
runs (dreamshard.integrations.torchrec_ranks): DMP under the new plan with the fused optimizer the checkpoint's
tables were trained with (`torchrec_checkpoint.infer_optimizer`), its dense counterpart for the data-parallel
tables, and the job's own dense optimizer for every other parameter (an MLP's: `infer_dense_optimizer`), then
`torchrec_migrate.save_migrated`. torchrec and fbgemm_gpu are imported inside the functions (optional
dependencies)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn as nn

from dreamshard.errors import CheckpointError
from dreamshard.integrations.torchrec import sharding_plan
from dreamshard.integrations.torchrec_build import build_ebc, build_model
from dreamshard.integrations.torchrec_checkpoint import table_of
from dreamshard.integrations.torchrec_file import TorchRecPlanFile
from dreamshard.integrations.torchrec_migrate import save_migrated
from dreamshard.integrations.torchrec_model import load_model
from dreamshard.values import Inventory

Factory = Callable[[Any], torch.optim.Optimizer]


def dense_optimizer(kind: str, lr: float) -> Factory:
    """The torch optimizer factory of data-parallel tables matching fused `kind` (its state moves both ways)."""
    from torchrec.optim.optimizers import PartialRowWiseAdam  # optional dependency: torchrec
    from torchrec.optim.rowwise_adagrad import RowWiseAdagrad  # optional dependency: torchrec

    if kind == "exact_adagrad":
        return lambda ps: torch.optim.Adagrad(ps, lr=lr, eps=1e-8)
    if kind == "exact_row_wise_adagrad":
        return lambda ps: RowWiseAdagrad(ps, lr=lr, eps=1e-8)
    if kind == "adam":
        return lambda ps: torch.optim.Adam(ps, lr=lr)
    if kind == "partial_row_wise_adam":
        return lambda ps: PartialRowWiseAdam(ps, lr=lr)
    return lambda ps: torch.optim.SGD(ps, lr=lr)


def job_dense_optimizer(kind: str, lr: float) -> Factory:
    """The factory of the job's own dense optimizer (a `torchrec_checkpoint.DENSE_OPTIMIZERS` value): what holds
    the state its dense parameters were saved with."""
    if kind == "adagrad":
        return lambda ps: torch.optim.Adagrad(ps, lr=lr)
    if kind in ("adam", "adam_amsgrad"):
        return lambda ps: torch.optim.Adam(ps, lr=lr, amsgrad=kind == "adam_amsgrad")
    if kind == "sgd_momentum":
        return lambda ps: torch.optim.SGD(ps, lr=lr, momentum=0.9)
    if kind == "sgd":
        return lambda ps: torch.optim.SGD(ps, lr=lr)
    raise CheckpointError(f"dense optimizer '{kind}' is not one migrate rebuilds (sgd, sgd_momentum, adagrad, adam)")


def sharded(
    model: nn.Module,
    doc: TorchRecPlanFile,
    world_size: int,
    kind: str,
    lr: float,
    dense: str | Factory = "sgd",
    data_parallel: str | None = None,
) -> tuple[Any, Any]:
    """(DMP of `model` under `doc` on CPU, its optimizer: the fused `kind`, `dense_optimizer(data_parallel or
    kind)` for the data-parallel tables and `dense` (a `job_dense_optimizer` kind or a factory) for every other
    dense parameter, state initialised so a checkpoint can be loaded into it)."""
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
    params = {k: v for k, v in in_backward_optimizer_filter(dmp.named_parameters()) if v.requires_grad}
    groups: list[tuple[Mapping[str, Any], Factory]] = [
        ({k: v for k, v in params.items() if table_of(k)}, dense_optimizer(data_parallel or kind, lr)),
        (
            {k: v for k, v in params.items() if not table_of(k)},
            job_dense_optimizer(dense, lr) if isinstance(dense, str) else dense,
        ),
    ]
    optimizers: list[Any] = [dmp.fused_optimizer]
    optimizers += [KeyedOptimizerWrapper(dict(ps), factory) for ps, factory in groups if ps]
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
    written to the command's temporary directory. Returns the rank's `LoadReport` as JSON."""
    logging.getLogger("torchrec").setLevel(logging.ERROR)
    inventory = Inventory.model_validate(job["inventory"])
    doc = TorchRecPlanFile.model_validate(job["plan"])
    model, optimizer = sharded(
        job_model(inventory, job.get("model")),
        doc,
        doc.world_size,
        job["optimizer"],
        0.01,
        job["dense_optimizer"],
        job["data_parallel_optimizer"],
    )
    report = save_migrated(
        job["source"],
        job["tmp"],
        model,
        optimizer,
        renames=job["renames"],
        init=job["init"],
        allow_pickle=job["allow_pickle"],
    )
    return {"rank": rank, **report.model_dump(mode="json")}
