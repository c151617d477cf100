"""A real client: TorchRec's DistributedModelParallel on 2 CPU ranks (gloo, loopback) trains with exported plans.

Each plan trains one step in fresh rank processes (tests/dmp_support.py): the table-wise, column-wise and row-wise
plans together in one run, the table-row-wise plan (another host layout) in its own. From every rank's state_dict
the tests check that each table's shards (column ranges, row blocks, data-parallel replicas) sit exactly on the
planned ranks, that the pooled outputs match the weights (so columns are where the plan says), that training
changed every shard and that the loss is finite.
"""

from __future__ import annotations

import math

import pytest
from dmp_support import DmpResult, DmpSettings, expected_holders, run_dmp

from dreamshard.integrations.torchrec_file import TorchRecPlanFile, plan_from_document, torchrec_document
from dreamshard.placement.expand import fold_units
from dreamshard.sharders import get_sharder, make_plan
from dreamshard.values import ColumnShard, Inventory, Plan, Table, Topology, shard_name
from dreamshard.values.units import row_shards_for

INV = Inventory(
    name="dmp",
    tables=tuple(
        Table(name=name, num_embeddings=rows, embedding_dim=dim, pooling_factor=pooling)
        for name, rows, dim, pooling in [
            ("user.id", 3000, 16, 1.0),
            ("item", 2000, 32, 4.0),
            ("ctx", 50, 8, 0.6),
            ("hist", 800, 24, 12.0),
            ("geo", 120, 8, 1.0),
            ("ad", 1500, 48, 2.0),
        ]
    ),
)
TOPO = Topology(num_devices=2, memory_per_device_gb=0.01, batch_size=64)
SETTINGS = DmpSettings(world_size=2, batch_size=64, warmup=0, steps=1, rounds=1, timeout_s=240)


def _check(result: DmpResult, name: str, doc: TorchRecPlanFile, kernels: set[str] | None = None) -> None:
    assert result.holders(name) == expected_holders(doc)
    assert result.output_error(name) < 1e-4  # pooled outputs = sums of the planned weights
    assert result.all_changed(name)  # the update reached every shard
    assert result.losses_finite(name) and all(len(r.losses[name]) == 1 for r in result.ranks)
    assert all(math.isfinite(x) and x > 0 for x in result.round_ms(name))
    used = {k for r in result.ranks for k in r.kernels[name].values()}
    assert used == (kernels or {t.compute_kernel for t in doc.tables.values()})


def _table_wise() -> Plan:
    plan = get_sharder("lookup_greedy").shard(INV, TOPO)
    assert set(plan.placement.values()) == {0, 1}
    return plan


#: Hand-made column splits: equal halves on both ranks, unequal 8|24|16 with rank 0 twice, and a table split in two
#: shards on one rank.
COLUMN_SHARDS = {
    "item": (ColumnShard(start=0, end=16, device=1), ColumnShard(start=16, end=32, device=0)),
    "ad": (
        ColumnShard(start=0, end=8, device=0),
        ColumnShard(start=8, end=32, device=1),
        ColumnShard(start=32, end=48, device=0),
    ),
    "hist": (ColumnShard(start=0, end=12, device=1), ColumnShard(start=12, end=24, device=1)),
}


def _column_wise() -> Plan:
    return make_plan(INV, TOPO, {"user.id": 0, "ctx": 1, "geo": 0}, "hand", column_shards=COLUMN_SHARDS)


def _row_wise() -> Plan:
    """Row blocks over both ranks, a replica on every rank."""
    plan = make_plan(
        INV,
        TOPO,
        {"user.id": 0, "geo": 0, "ad": 1},
        "hand",
        row_shards={"item": row_shards_for(2000, [0, 1]), "hist": row_shards_for(800, [0, 1])},
        data_parallel=["ctx"],
    )
    assert plan.sharding_types() == {"table_wise": 3, "row_wise": 2, "data_parallel": 1}
    return plan


@pytest.fixture(scope="module")
def trained() -> tuple[dict[str, Plan], dict[str, TorchRecPlanFile], DmpResult]:
    """The table-wise, column-wise and row-wise plans (fused; column- and row-wise also dense) trained in one DMP run:
    the ranks' process start and TorchRec import are most of a run, and the plans are independent there."""
    plans = {"greedy": _table_wise(), "column": _column_wise(), "row": _row_wise()}
    docs = {"greedy": torchrec_document(plans["greedy"], INV)}  # fused kernel, exact SGD in the backward
    for name in ("column", "row"):
        docs[f"{name}-fused"] = torchrec_document(plans[name], INV)
        docs[f"{name}-dense"] = torchrec_document(plans[name], INV, "dense")
    return plans, docs, run_dmp(INV, docs, SETTINGS)


def test_dmp_trains_a_table_wise_plan_on_the_planned_ranks(trained) -> None:
    plans, docs, result = trained
    _check(result, "greedy", docs["greedy"])
    held = {t: sorted(by_rank) for t, by_rank in result.holders("greedy").items()}
    assert held == {t: [d] for t, d in plans["greedy"].placement.items()}


def test_dmp_trains_column_shards_and_they_round_trip(trained) -> None:
    """Column splits with the fused and the dense kernel. What the ranks hold folds back into the plan."""
    plans, docs, result = trained
    plan = plans["column"]
    for name in ("column-fused", "column-dense"):
        _check(result, name, docs[name])
    units = {
        (
            table
            if (c0, c1) == (0, INV.by_name()[table].embedding_dim) and table not in COLUMN_SHARDS
            else shard_name(table, c0, c1)
        ): rank
        for table, by_rank in result.holders("column-fused").items()
        for rank, boxes in by_rank.items()
        for (_, _, c0, c1) in boxes
    }
    folded = fold_units(INV, units)
    assert folded.placement == plan.placement and folded.column_shards == plan.column_shards
    assert not folded.row_shards and not folded.data_parallel
    again = plan_from_document(docs["column-fused"], INV, TOPO)
    assert (again.placement, again.column_shards) == (plan.placement, plan.column_shards)


def test_dmp_trains_row_wise_and_data_parallel_tables_and_they_round_trip(trained) -> None:
    """Row blocks over both ranks (fused and dense), a replica on every rank (dense); what the ranks hold is
    what the plan says and the file reads back into the same plan."""
    plans, docs, result = trained
    plan, fused = plans["row"], docs["row-fused"]
    assert fused.tables["ctx"].compute_kernel == "dense" and fused.tables["item"].row_ranges == (
        (0, 1000),
        (1000, 2000),
    )
    _check(result, "row-fused", fused, kernels={"fused", "dense"})
    _check(result, "row-dense", docs["row-dense"], kernels={"dense"})
    assert result.holders("row-fused")["item"] == {0: ((0, 1000, 0, 32),), 1: ((1000, 2000, 0, 32),)}
    assert result.holders("row-fused")["ctx"] == {0: ((0, 50, 0, 8),), 1: ((0, 50, 0, 8),)}
    again = plan_from_document(fused, INV, TOPO)
    assert (again.placement, again.row_shards, again.data_parallel) == (
        plan.placement,
        plan.row_shards,
        plan.data_parallel,
    )


def test_dmp_trains_a_table_row_wise_plan_on_two_hosts_of_one_rank() -> None:
    """table_row_wise on CPU/gloo: 2 hosts x 1 rank (LOCAL_WORLD_SIZE=1), the table's row blocks on host 1."""
    topo = TOPO.model_copy(update={"devices_per_host": 1})
    plan = make_plan(
        INV,
        topo,
        {"user.id": 0, "geo": 0, "ad": 1, "hist": 0, "ctx": 1},
        "hand",
        row_shards={"item": row_shards_for(2000, [1])},
    )
    assert plan.sharding_type("item") == "table_row_wise"
    doc = torchrec_document(plan, INV)
    assert doc.local_world_size == 1
    result = run_dmp(INV, {"twrw": doc}, SETTINGS.model_copy(update={"local_world_size": 1}))
    _check(result, "twrw", doc)
    assert result.holders("twrw")["item"] == {1: ((0, 2000, 0, 32),)}
    assert plan_from_document(doc, INV, topo).row_shards == plan.row_shards
