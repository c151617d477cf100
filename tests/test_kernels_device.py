"""Kernels valid for the device type plan and measure; invalid ones are refused at plan time naming the table:
`dense` runs sharded tables as TorchRec runs it (table-, column-, row-wise); on cpu only fused and dense run, so a
table asking for a UVM kernel there is one line naming it (never TorchRec's traceback naming `t5`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dreamshard.cli.app import invoke
from dreamshard.documents import save_inventory
from dreamshard.errors import PlanError
from dreamshard.placement.validate import check_plan
from dreamshard.sharders import get_sharder
from dreamshard.sharders.torchrec_sharder import _named
from dreamshard.values import Inventory, Table, TableConstraints, Topology

CPU = Topology(num_devices=2, memory_per_device_gb=16.0)
CUDA = CPU.model_copy(update={"device_type": "cuda"})


def inventory(*kernels: str) -> Inventory:
    ad = Table(
        name="ad",
        num_embeddings=10000,
        embedding_dim=32,
        pooling_factor=2.0,
        constraints=TableConstraints(compute_kernels=kernels),
    )
    rest = (Table(name=f"t{i}", num_embeddings=5000, embedding_dim=16, pooling_factor=2.0) for i in range(5))
    return Inventory(name="kk", tables=(ad, *rest))


@pytest.mark.parametrize("sharder", ["dim_greedy", "dreamshard_lpt"])
def test_dense_runs_a_sharded_table(sharder: str) -> None:
    plan = get_sharder(sharder).shard(inventory("dense"), CPU)
    assert plan.kernels == {"ad": "dense"} and "ad" not in plan.data_parallel
    check_plan(inventory("dense"), plan)


def test_a_uvm_kernel_on_cuda_is_planned_and_on_cpu_refused_naming_the_table() -> None:
    plan = get_sharder("dim_greedy").shard(inventory("fused_uvm_caching"), CUDA)
    assert plan.kernels == {"ad": "fused_uvm_caching"}
    for sharder in ("dim_greedy", "dreamshard_lpt", "torchrec"):
        with pytest.raises(PlanError, match=r"table 'ad': constraint compute_kernels \['fused_uvm_caching'\]"):
            get_sharder(sharder).shard(inventory("fused_uvm_caching"), CPU)


def test_a_plan_file_running_uvm_on_cpu_is_refused(tmp_path: Path) -> None:
    plan = get_sharder("dim_greedy").shard(inventory("fused_uvm_caching"), CUDA)
    cpu_plan = plan.model_copy(update={"topology": CPU})
    with pytest.raises(PlanError, match="table 'ad'.*'fused_uvm_caching', which does not run on cpu devices"):
        check_plan(inventory("fused_uvm_caching", "fused"), cpu_plan)


def test_cli_plan_and_evaluate_with_dense_and_uvm(tmp_path: Path) -> None:
    save_inventory(inventory("dense"), tmp_path / "dense.yaml")
    save_inventory(inventory("fused_uvm_caching"), tmp_path / "uvm.yaml")
    code, _, err = invoke(
        ["plan", "-i", str(tmp_path / "dense.yaml"), "-d", "2", "-s", "dim_greedy", "-o", str(tmp_path / "p.json")]
    )
    assert code == 0, err
    code, _, err = invoke(
        ["evaluate", "-i", str(tmp_path / "dense.yaml"), "-p", str(tmp_path / "p.json"), "--backend", "simulator"]
    )
    assert code == 0, err
    for sharder in ("dim_greedy", "torchrec"):
        code, _, err = invoke(
            ["plan", "-i", str(tmp_path / "uvm.yaml"), "-d", "2", "-s", sharder, "-o", str(tmp_path / "q.json")]
        )
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and "table 'ad'" in lines[0] and "none runs on cpu" in lines[0], err
        assert not (tmp_path / "q.json").exists()


def test_torchrecs_enumerator_error_names_our_table() -> None:
    text = (
        "No available sharding type and compute kernel combination after applying user provided constraints for "
        "t0. Module: torchrec.modules.embedding_modules.EmbeddingBagCollection, sharder: X"
    )
    assert _named(text, inventory("dense")).endswith("for table 'ad'")
