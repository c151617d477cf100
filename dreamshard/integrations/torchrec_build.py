"""TorchRec modules from an inventory: the names its tables take there (`torchrec_table_name`), their configs, and
the modules of both kinds (`build_ebc`, `build_model`) that tests, benches and the TorchRec planner shard
(docs/torchrec.md). torchrec is imported inside the functions (an optional dependency).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch.nn as nn

from dreamshard.errors import PlanError
from dreamshard.integrations import require_torchrec
from dreamshard.values import Inventory

if TYPE_CHECKING:  # optional dependency: torchrec (annotations only)
    from torchrec.modules.embedding_modules import EmbeddingBagCollection  # optional dependency: torchrec


def torchrec_table_name(name: str) -> str:
    """The name a dreamshard table gets in a TorchRec module: '.' (refused by TorchRec's module dicts) as '_',
    and a trailing '_table' where the name is an attribute of ``nn.ModuleDict`` (e.g. 'keys')."""
    safe = name.replace(".", "_")
    return f"{safe}_table" if hasattr(nn.ModuleDict(), safe) else safe


def module_names(inventory_names: Sequence[str], names: Mapping[str, str] | None) -> dict[str, str]:
    """{dreamshard table: TorchRec table}; PlanError if two tables would share a TorchRec name."""
    out = {n: (names or {}).get(n) or torchrec_table_name(n) for n in inventory_names}
    seen: dict[str, str] = {}
    for ours, theirs in out.items():
        if theirs in seen:
            raise PlanError(
                f"tables '{seen[theirs]}' and '{ours}' both map to TorchRec table '{theirs}'; pass names={{...}}"
            )
        seen[theirs] = ours
    return out


def table_configs(inventory: Inventory, rows: Mapping[str, int] | None = None) -> list[Any]:
    """One config per table: an ``EmbeddingBagConfig`` (sum pooling) per pooled table, an ``EmbeddingConfig`` per
    sequence table (`Table.pooled` false); its dtype, feature names = the table's `features`, else its TorchRec name;
    optionally with fewer rows (``rows[name]``: a scaled-down copy for CPU runs)."""
    require_torchrec()
    from torchrec.modules.embedding_configs import (  # optional dependency: torchrec
        DataType,
        EmbeddingBagConfig,
        EmbeddingConfig,
        PoolingType,
    )

    dtypes = {"fp32": DataType.FP32, "fp16": DataType.FP16}
    mapped = module_names(inventory.table_names, None)
    out: list[Any] = []
    for t in inventory.tables:
        common = {
            "name": mapped[t.name],
            "num_embeddings": int((rows or {}).get(t.name, t.num_embeddings)),
            "embedding_dim": t.embedding_dim,
            "feature_names": [f.name for f in t.features] or [mapped[t.name]],
            "data_type": dtypes[t.dtype],
        }
        out.append(EmbeddingBagConfig(**common, pooling=PoolingType.SUM) if t.pooled else EmbeddingConfig(**common))
    return out


def build_ebc(
    inventory: Inventory, device: str = "meta", rows: Mapping[str, int] | None = None
) -> EmbeddingBagCollection:
    """An ``EmbeddingBagCollection`` of the inventory's tables (on the meta device by default: DMP allocates only
    each rank's shards). PlanError when it holds sequence tables: `build_model` builds both kinds."""
    from torchrec.modules.embedding_modules import EmbeddingBagCollection  # optional dependency: torchrec

    sequence = [t.name for t in inventory.tables if not t.pooled]
    if sequence:
        raise PlanError(f"table '{sequence[0]}' is a sequence table (an EmbeddingCollection's); use build_model")
    return EmbeddingBagCollection(tables=table_configs(inventory, rows), device=torch.device(device))


def build_model(inventory: Inventory, device: str = "meta", rows: Mapping[str, int] | None = None) -> nn.ModuleDict:
    """The inventory's tables as TorchRec modules: ``ebc`` (an EmbeddingBagCollection of the pooled tables) and
    ``ec_<dim>`` (an EmbeddingCollection of the sequence tables of each dim: TorchRec's EC takes one dim), on the
    meta device by default; rows scaled as in `table_configs`."""
    # optional dependency: torchrec
    from torchrec.modules.embedding_modules import EmbeddingBagCollection, EmbeddingCollection

    configs = table_configs(inventory, rows)
    dev = torch.device(device)
    modules: dict[str, nn.Module] = {}
    pooled = [c for c, t in zip(configs, inventory.tables, strict=True) if t.pooled]
    if pooled:
        modules["ebc"] = EmbeddingBagCollection(tables=pooled, device=dev)
    by_dim: dict[int, list[Any]] = {}
    for c, t in zip(configs, inventory.tables, strict=True):
        if not t.pooled:
            by_dim.setdefault(t.embedding_dim, []).append(c)
    for dim, tables in sorted(by_dim.items()):
        modules[f"ec_{dim}"] = EmbeddingCollection(tables=tables, device=dev)
    return nn.ModuleDict(modules)
