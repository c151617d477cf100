"""A ranking model in three versions, for the model-change tests (tests/test_torchrec_migrate.py): an
EmbeddingBagCollection and a dense MLP over its pooled outputs. ``build_v1`` has tables user, item and ctx;
``build_v2`` drops ctx and adds ad; ``build_v3`` is v2 with item renamed product. Every third table has dim 8, so
the MLP (32 -> 8 -> 1) is the same in every version and a batch without ctx or ad ids gives it the same input.
Tables on the meta device (DMP allocates each rank's shards), the MLP on cpu with a fixed seed."""

from __future__ import annotations

import torch
import torch.nn as nn
from torchrec.modules.embedding_configs import EmbeddingBagConfig
from torchrec.modules.embedding_modules import EmbeddingBagCollection

from dreamshard.values import Inventory, Table

ROWS = {"user": 40, "item": 48, "product": 48, "ctx": 20, "ad": 24}
DIMS = {"user": 16, "item": 8, "product": 8, "ctx": 8, "ad": 8}
VERSIONS = {"v1": ("user", "item", "ctx"), "v2": ("user", "item", "ad"), "v3": ("user", "product", "ad")}


class Ranker(nn.Module):
    """Pooled embeddings, in the model's feature order -> MLP -> one score per sample."""

    def __init__(self, tables: tuple[str, ...]) -> None:
        super().__init__()
        configs = [
            EmbeddingBagConfig(name=t, num_embeddings=ROWS[t], embedding_dim=DIMS[t], feature_names=[t]) for t in tables
        ]
        self.features = tables
        self.ebc = EmbeddingBagCollection(tables=configs, device=torch.device("meta"))
        torch.manual_seed(7)
        self.mlp = nn.Sequential(nn.Linear(sum(DIMS[t] for t in tables), 8), nn.ReLU(), nn.Linear(8, 1))

    def forward(self, kjt: object) -> torch.Tensor:
        pooled = self.ebc(kjt)  # a KeyedTensor: its order follows the sharding, so the features are taken by name
        return self.mlp(torch.cat([pooled[f] for f in self.features], dim=1))


def inventory(version: str) -> Inventory:
    return Inventory(
        name=f"ranker-{version}",
        tables=tuple(
            Table(name=t, num_embeddings=ROWS[t], embedding_dim=DIMS[t], pooling_factor=1.0) for t in VERSIONS[version]
        ),
    )


def build_v1() -> Ranker:
    return Ranker(VERSIONS["v1"])


def build_v2() -> Ranker:
    return Ranker(VERSIONS["v2"])


def build_v3() -> Ranker:
    return Ranker(VERSIONS["v3"])
