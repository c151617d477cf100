"""Memory tiers by cost (dreamshard.placement.options, "Memory tiers"): on cuda a table larger than every device, in
every layout, is cached from host memory (fused_uvm_caching) as TorchRec's planner caches it, and the layout reason
says so; a table with a layout in device memory keeps it; `enforce_hbm` and cpu devices have no host tier.
Memory is arithmetic (no table is allocated)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dreamshard.cli.app import invoke
from dreamshard.documents import save_inventory
from dreamshard.errors import InfeasiblePlacementError
from dreamshard.placement.validate import check_plan
from dreamshard.sharders import get_sharder
from dreamshard.values import Inventory, Table, TableConstraints, Topology

#: TorchRec's planner (1.9.2) places this table on 4 x 16 GB cuda row-wise with fused_uvm_caching (load factor 0.2).
BIG = Table(name="big", num_embeddings=200_000_000, embedding_dim=128, pooling_factor=1.0)  # 95.4 GB
SMALL = Table(name="small", num_embeddings=100_000, embedding_dim=64, pooling_factor=2.0)
CUDA = Topology(num_devices=4, memory_per_device_gb=16, device_type="cuda", optimizer="rowwise_adagrad")
INV = Inventory(name="huge", tables=(BIG, SMALL))


@pytest.mark.parametrize("name", ["size_greedy", "round_robin", "dreamshard_lpt"])
def test_a_table_larger_than_every_device_is_cached_as_torchrec_caches_it(name: str) -> None:
    plan = get_sharder(name).shard(INV, CUDA)
    check_plan(INV, plan)
    assert [r.device for r in plan.row_shards["big"]] == [0, 1, 2, 3]
    assert plan.kernels == {"big": "fused_uvm_caching"} and plan.cache_load_factors == {"big": 0.2}
    assert max(plan.memory_per_device_gb) < 16 < BIG.size_gb / 4  # row blocks in HBM would take 24 GB each
    pytest.importorskip("torchrec")
    theirs = get_sharder("torchrec").shard(INV, CUDA)
    assert (theirs.kernels.get("big"), theirs.cache_load_factors.get("big")) == ("fused_uvm_caching", 0.2)
    assert [r.device for r in theirs.row_shards["big"]] == [0, 1, 2, 3]
    if name == "dreamshard_lpt":
        reason = plan.layouts["big"]
        assert reason.startswith("row_wise x4 with fused_uvm_caching: 95.4 GB of weights"), reason
        assert "no layout in device memory fits, so it is cached from host memory" in reason, reason


def test_a_table_that_fits_device_memory_in_some_layout_stays_there() -> None:
    """38.1 GB on 4 x 16 GB: whole with a 0.2 cache (8.2 GB on one device) would fit, and has fewer units, but row
    blocks of 9.5 GB in HBM fit too: the cheaper tier wins, no cache."""
    ids = Table(name="ids", num_embeddings=80_000_000, embedding_dim=128, pooling_factor=1.0)
    inv = Inventory(name="ids", tables=(ids, SMALL))
    topo = Topology(num_devices=4, memory_per_device_gb=16, device_type="cuda")
    for name in ("size_greedy", "dreamshard_lpt"):
        plan = get_sharder(name).shard(inv, topo)
        assert "ids" in plan.row_shards and plan.kernels == {} and plan.cache_load_factors == {}, name


def test_no_host_tier_where_the_table_must_stay_in_device_memory_or_on_cpu() -> None:
    hbm = Inventory(name="hbm", tables=(BIG.model_copy(update={"constraints": TableConstraints(enforce_hbm=True)}),))
    for inv, topo in ((hbm, CUDA), (INV, CUDA.model_copy(update={"device_type": "cpu"}))):
        with pytest.raises(InfeasiblePlacementError) as e:
            get_sharder("size_greedy").shard(inv, topo)
        assert e.value.table == "big" and "cached from host memory" not in str(e.value)
    fused_only = BIG.model_copy(update={"constraints": TableConstraints(compute_kernels=("fused",))})
    with pytest.raises(InfeasiblePlacementError):
        get_sharder("size_greedy").shard(Inventory(name="fused", tables=(fused_only,)), CUDA)


def test_compare_shows_torchrecs_row_beside_the_others(tmp_path: Path) -> None:
    pytest.importorskip("torchrec")
    inv = save_inventory(INV, tmp_path / "inv.yaml")
    args = ["compare", "-i", str(inv), "-d", "4", "-m", "16", "--device-type", "cuda", "--optimizer"]
    args += ["rowwise_adagrad", "--sharders", "torchrec,size_greedy", "--backend", "simulator", "--rounds", "1"]
    code, out, err = invoke([*args, "--json"])
    assert code == 0, err
    measured = {r["sharder"]: r["overall_ms"] for r in json.loads(out)["results"]}
    assert set(measured) == {"torchrec", "size_greedy"} and all(ms > 0 for ms in measured.values()), measured
