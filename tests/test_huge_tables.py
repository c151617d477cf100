"""Tables larger than a device: every sharder that can split cuts them (column shards of any
count, row-wise, table-row-wise), the learned one as its cost ranks the options; memory is arithmetic (no table
is ever allocated)."""

from __future__ import annotations

from pathlib import Path

import pytest
from toy_cost import toy_model

from dreamshard.cli.app import invoke
from dreamshard.documents import load_plan, save_inventory
from dreamshard.errors import InfeasiblePlacementError
from dreamshard.placement.validate import check_plan
from dreamshard.sharders import get_sharder
from dreamshard.values import GB, Inventory, Plan, Table, TableConstraints, Topology

SPLITTING_HEURISTICS = ("size_greedy", "dim_greedy", "lookup_greedy", "round_robin", "random")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("model")
    toy_model(d)
    return d


def _table(name: str, rows: int, dim: int, pf: float = 4.0) -> Table:
    return Table(name=name, num_embeddings=rows, embedding_dim=dim, pooling_factor=pf)


def _huge_inventory() -> Inventory:
    """One 2e9 x 4 id table (29.8 GB) beside small ones."""
    small = [_table(f"s{i}", 100_000 * (i + 1), 16) for i in range(6)]
    return Inventory(name="huge", tables=(_table("ids", 2_000_000_000, 4, 1.0), *small))


def _must_split_inventory() -> Inventory:
    """12 tables on 4 x 0.15 GB: two 0.2 GB tables (dim 64) and ten of 0.018 GB. Two shards each (0.1 GB) leave
    room for only 8 of the ten; one of them cut four ways (0.05 GB) packs."""
    big_rows = int(0.2 * GB) // (64 * 4)
    small_rows = int(0.018 * GB) // (16 * 4)
    narrow = TableConstraints(min_partition=16)  # 4 column shards of 16: allowed by the tables' min_partition
    big = [_table(f"big{i}", big_rows, 64).model_copy(update={"constraints": narrow}) for i in range(2)]
    return Inventory(name="must-split", tables=(*big, *(_table(f"t{i}", small_rows, 16) for i in range(10))))


@pytest.mark.parametrize("name", SPLITTING_HEURISTICS)
def test_a_heuristic_row_shards_a_table_larger_than_a_device(name: str) -> None:
    inv = _huge_inventory()
    topo = Topology(num_devices=8, memory_per_device_gb=16)
    assert inv.by_name()["ids"].size_bytes > topo.memory_per_device_bytes
    plan = get_sharder(name).shard(inv, topo)
    assert "ids" in plan.row_shards and len(plan.row_shards["ids"]) == 8
    assert max(plan.memory_per_device_gb) <= 16
    check_plan(inv, plan)


def test_a_heuristic_table_row_shards_it_over_one_host_when_row_wise_is_forbidden() -> None:
    base = _huge_inventory()
    ids = base.by_name()["ids"].model_copy(update={"constraints": TableConstraints(sharding_types=("table_row_wise",))})
    inv = Inventory(name="huge", tables=(ids, *base.tables[1:]))
    topo = Topology(num_devices=8, memory_per_device_gb=16, devices_per_host=4)
    plan = get_sharder("size_greedy").shard(inv, topo)
    devices = [rs.device for rs in plan.row_shards["ids"]]
    assert len(devices) == 4 and len({topo.host_of(d) for d in devices}) == 1
    check_plan(inv, plan)


@pytest.mark.parametrize("name", SPLITTING_HEURISTICS)
def test_two_tables_that_must_be_split_four_ways_plan(name: str) -> None:
    inv = _must_split_inventory()
    topo = Topology(num_devices=4, memory_per_device_gb=0.15)
    plan = get_sharder(name).shard(inv, topo)
    cuts = [_units(plan, t) for t in ("big0", "big1")]
    assert min(cuts) >= 2 and sum(cuts) > 4, cuts  # two shards each leave no room: more were tried
    check_plan(inv, plan)


def _units(plan: Plan, table: str) -> int:
    return len(plan.column_shards.get(table, ())) + len(plan.row_shards.get(table, ()))


def test_the_learned_sharders_keep_the_cheapest_layout_that_packs() -> None:
    """The first layout that packs row-shards big1 (predicted ~3x the best); a 4-way column cut packs too."""
    inv, topo = _must_split_inventory(), Topology(num_devices=4, memory_per_device_gb=0.15)
    for name in ("dreamshard", "dreamshard_lpt", "dreamshard_rl"):
        plan = get_sharder(name).shard(inv, topo)  # the packaged model
        check_plan(inv, plan)
        assert not plan.row_shards and max(_units(plan, t) for t in ("big0", "big1")) == 4, (name, plan.row_shards)


def test_the_learned_sharders_plan_both_cases(model_dir: Path) -> None:
    for inv, topo in (
        (_huge_inventory(), Topology(num_devices=8, memory_per_device_gb=16)),
        (_huge_inventory(), Topology(num_devices=8, memory_per_device_gb=16, devices_per_host=4)),
        (_must_split_inventory(), Topology(num_devices=4, memory_per_device_gb=0.15)),
    ):
        for name in ("dreamshard", "dreamshard_lpt", "dreamshard_rl"):
            plan = get_sharder(name, model_dir=model_dir).shard(inv, topo)
            check_plan(inv, plan)
            assert plan.row_shards or plan.column_shards


def test_plan_cli_row_shards_the_huge_table_also_with_types_row_wise(model_dir: Path, tmp_path: Path) -> None:
    inv = save_inventory(_huge_inventory(), tmp_path / "inv.yaml")
    for extra in ([], ["--types", "row_wise"]):
        out = tmp_path / f"p{len(extra)}.json"
        code, _, err = invoke(
            ["plan", "-i", str(inv), "-d", "8", "-m", "16", "--model", str(model_dir), *extra, "-o", str(out)]
        )
        assert code == 0, err
        plan = load_plan(out)
        assert "ids" in plan.row_shards and plan.fits_memory()


def test_a_table_no_sharding_fits_is_named_in_one_line() -> None:
    inv = Inventory(name="x", tables=(_table("ids", 2_000_000_000, 4, 1.0),))
    topo = Topology(num_devices=2, memory_per_device_gb=4)  # 15 GB row blocks
    with pytest.raises(InfeasiblePlacementError) as ei:
        get_sharder("size_greedy").shard(inv, topo)
    assert ei.value.table == "ids" and "\n" not in str(ei.value) and "row blocks" in str(ei.value)
