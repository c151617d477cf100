"""Column shards a GPU team would run: none narrower than TorchRec's MIN_CW_DIM (128 columns, or
the dim when narrower) unless the table's `min_partition` allows it. Failed before: a 1e9 x 64 table on 16 x 16 GB
became 16 column shards of width 4, and a dim-64 table could be cut into 16 shards of 4."""

from __future__ import annotations

from pathlib import Path

import pytest
from toy_cost import toy_model

from dreamshard.placement.options import MIN_COLUMN_WIDTH, max_shards, min_column_width, table_options
from dreamshard.sharders import get_sharder
from dreamshard.values import Inventory, Table, TableConstraints, Topology


def _table(name: str, rows: int, dim: int, **constraints: object) -> Table:
    c = TableConstraints(**constraints) if constraints else None  # type: ignore[arg-type]
    return Table(name=name, num_embeddings=rows, embedding_dim=dim, pooling_factor=2.0, constraints=c)


def _widths(table: Table, topology: Topology) -> set[int]:
    return {table.embedding_dim // o.shards for o in table_options(table, topology) if o.kind == "column_wise"}


def test_no_option_cuts_a_column_shard_narrower_than_the_minimum() -> None:
    topo = Topology(num_devices=16, memory_per_device_gb=16)
    assert MIN_COLUMN_WIDTH == 128
    assert _widths(_table("d64", 1000, 64), topo) == set()  # narrower than 128: its columns stay together
    assert _widths(_table("d128", 1000, 128), topo) == set()
    assert _widths(_table("d512", 1000, 512), topo) == {256, 128}
    assert min_column_width(_table("d64", 1000, 64)) == 64
    assert max_shards(_table("d64", 1000, 64), topo) == 16  # row blocks still cut it


def test_min_partition_overrides_the_minimum() -> None:
    topo = Topology(num_devices=16, memory_per_device_gb=16)
    assert _widths(_table("d64", 1000, 64, min_partition=16), topo) == {32, 16}
    assert _widths(_table("d512", 1000, 512, min_partition=256), topo) == {256}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("model")
    toy_model(d)
    return d


@pytest.mark.parametrize("sharder", ["dreamshard", "size_greedy", "dim_greedy"])
def test_a_huge_narrow_table_is_row_sharded_not_cut_into_slivers(sharder: str, model_dir: Path) -> None:
    huge = _table("ids", 1_000_000_000, 64)
    small = [_table(f"s{i}", 100_000, 32) for i in range(4)]
    inv = Inventory(name="huge64", tables=(huge, *small))
    topo = Topology(num_devices=16, memory_per_device_gb=16)
    opts = {"model_dir": model_dir} if sharder == "dreamshard" else {}
    plan = get_sharder(sharder, **opts).shard(inv, topo)
    assert "ids" not in plan.column_shards and len(plan.row_shards["ids"]) == 16
    for table, shards in plan.column_shards.items():
        dim = inv.by_name()[table].embedding_dim
        assert all(s.end - s.start >= min(128, dim) for s in shards), (table, shards)
