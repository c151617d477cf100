"""Memory per tier: device (HBM) and host (DDR) bytes of a unit per kernel, as TorchRec 1.9.2's
storage estimator (`calculate_shard_storages`) counts them for fused, fused_uvm and fused_uvm_caching on cuda;
estimated, labelled so: no GPU measures them here. A plan with a caching table fits where the fused one does not."""

from __future__ import annotations

import warnings
from typing import Any, Literal

import pytest

from dreamshard.placement.device_memory import unit_memory
from dreamshard.placement.validate import check_plan
from dreamshard.sharders import get_sharder
from dreamshard.values import GB, Inventory, Table, TableConstraints, Topology

WORLD, LOCAL, RANK_BATCH = 4, 2, 128
KERNELS = ("fused", "fused_uvm", "fused_uvm_caching")
TABLES = (
    Table(name="ids", num_embeddings=100_000, embedding_dim=64, pooling_factor=3.5),
    Table(name="half", num_embeddings=20_001, embedding_dim=32, pooling_factor=20.0, dtype="fp16"),
)


def _topo(optimizer: Literal["sgd", "adam"]) -> Topology:
    return Topology(
        num_devices=WORLD,
        devices_per_host=LOCAL,
        device_type="cuda",
        memory_per_device_gb=16.0,
        batch_size=RANK_BATCH * WORLD,
        optimizer=optimizer,
        memory_model="torchrec",
    )


def _torchrec(table: Table, sharding: str, kernel: str, factor: float, optimizer: str) -> list[tuple[Any, int, int]]:
    """[(shard size, hbm, ddr)] of `table` under `kernel` as TorchRec's EmbeddingStorageEstimator counts them."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("torchrec")
    from torch.distributed.optim import _apply_optimizer_in_backward
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner import ParameterConstraints
    from torchrec.distributed.planner.enumerators import EmbeddingEnumerator
    from torchrec.distributed.planner.shard_estimators import EmbeddingStorageEstimator
    from torchrec.distributed.planner.types import KernelConfig, TopologyFactory, TrainerConfig
    from torchrec.distributed.types import CacheParams
    from torchrec.modules.embedding_configs import DataType, EmbeddingBagConfig
    from torchrec.modules.embedding_modules import EmbeddingBagCollection

    config = EmbeddingBagConfig(
        num_embeddings=table.num_embeddings,
        embedding_dim=table.embedding_dim,
        name="t0",
        feature_names=["f0"],
        data_type=DataType.FP16 if table.dtype == "fp16" else DataType.FP32,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ebc = EmbeddingBagCollection(tables=[config], device=torch.device("meta"))
        if optimizer == "adam":
            _apply_optimizer_in_backward(torch.optim.Adam, ebc.parameters(), {"lr": 0.1})
        constraints = {
            "t0": ParameterConstraints(
                sharding_types=[sharding],
                compute_kernels=[kernel],
                pooling_factors=[table.pooling_factor],
                cache_params=CacheParams(load_factor=factor),
            )
        }
        trainer = TrainerConfig(world_size=WORLD, local_world_size=LOCAL, hbm_cap_bytes=1 << 40, ddr_cap_bytes=1 << 40)
        topology = TopologyFactory.create_topology(
            trainer_config=trainer, kernel_config=KernelConfig(compute_device="cuda")
        )
        enumerator = EmbeddingEnumerator(
            topology=topology,
            batch_size=RANK_BATCH,
            constraints=constraints,
            estimator=[EmbeddingStorageEstimator(topology, constraints)],
        )
        (option,) = enumerator.enumerate(ebc, [EmbeddingBagCollectionSharder()])
    return [(list(s.size), s.storage.hbm, s.storage.ddr) for s in option.shards]


@pytest.mark.parametrize("optimizer", ("sgd", "adam"))
@pytest.mark.parametrize("kernel", KERNELS)
def test_per_tier_memory_equals_torchrec_storage_estimator(kernel: str, optimizer: Literal["sgd", "adam"]) -> None:
    for table in TABLES:
        for factor in (0.2, 0.5):
            theirs = _torchrec(table, "table_wise", kernel, factor, optimizer)
            ((size, hbm, ddr),) = theirs
            ours = unit_memory(table, _topo(optimizer), "table_wise", 1, kernel=kernel, load_factor=factor)
            assert ours.total == pytest.approx(hbm, rel=1e-3, abs=8), (table.name, kernel, factor)
            assert ours.host == pytest.approx(ddr, rel=1e-3, abs=8), (table.name, kernel, factor)


def test_a_caching_table_fits_where_the_fused_one_does_not() -> None:
    big = Table(name="big", num_embeddings=3_000_000, embedding_dim=128, pooling_factor=2.0)  # 1.43 GB
    topo = Topology(num_devices=2, device_type="cuda", memory_per_device_gb=1.0)
    caching = big.model_copy(
        update={"constraints": TableConstraints(compute_kernels=("fused_uvm_caching",), sharding_types=("table_wise",))}
    )
    inv = Inventory(name="tiers", tables=(caching,))
    plan = get_sharder("size_greedy").shard(inv, topo)
    assert plan.kernels == {"big": "fused_uvm_caching"} and plan.cache_load_factors == {"big": 0.2}
    assert max(plan.memory_per_device_gb) < 1.0 < big.size_bytes / GB
    check_plan(inv, plan)
