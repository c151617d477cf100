"""Memory as TorchRec counts it: dreamshard.placement.device_memory.

The defaults (sgd, memory model "weights") are table weights exactly, as before; each optimizer and each sharding
type follows TorchRec's storage estimator, checked against TorchRec 1.9.2's own `EmbeddingStorageEstimator` run
through its enumerator on meta tensors (no device, no process group). TorchRec's sharder offers row_wise and
table_row_wise only on a "cuda" compute device, so those (and every type, once more) are estimated on a cuda
TorchRec topology of meta tensors; its cuda figure is HBM (state + input + output), its cpu figure DDR (the same
sum), so the totals compare on either.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from dreamshard.errors import PlanError
from dreamshard.placement.device_memory import SHARDING_TYPES, MemoryBreakdown, device_memory, unit_memory
from dreamshard.placement.expand import expand
from dreamshard.values import ColumnShard, Feature, Inventory, Table, Topology
from dreamshard.values.units import row_shards_for

WORLD, LOCAL, RANK_BATCH = 4, 2, 128
OPTIMIZERS = ("sgd", "rowwise_adagrad", "adam")
#: Tables for the TorchRec comparison: two features with pooling above and below 1, rows that do not divide by
#: the world size, fp16, and a wide one.
TABLES = (
    Table(
        name="shared",
        num_embeddings=1000,
        embedding_dim=64,
        pooling_factor=3.5,
        features=(Feature(name="a", pooling_factor=3.0), Feature(name="b", pooling_factor=0.5)),
    ),
    Table(name="half", num_embeddings=1001, embedding_dim=32, pooling_factor=20.0, dtype="fp16"),
    Table(name="wide", num_embeddings=5000, embedding_dim=256, pooling_factor=0.25),
)


def topo(optimizer: str = "sgd", model: str = "torchrec", **kw: Any) -> Topology:
    return Topology(
        num_devices=WORLD,
        devices_per_host=LOCAL,
        memory_per_device_gb=16.0,
        batch_size=RANK_BATCH * WORLD,
        optimizer=optimizer,
        memory_model=model,
        **kw,
    )


def cut(table: Table, rows: int, cols: int) -> Table:
    return table.model_copy(update={"num_embeddings": rows, "embedding_dim": cols})


# ---------------------------------------------------------------------------------------------- defaults, formulas


def test_defaults_are_the_weights_exactly() -> None:
    plain = Topology(num_devices=3, memory_per_device_gb=1.0)
    assert (plain.optimizer, plain.memory_model, plain.memory_reserve) == ("sgd", "weights", 0.0)
    for t in TABLES:
        for sharding in SHARDING_TYPES:
            assert unit_memory(t, plain, sharding, 3) == MemoryBreakdown(weights=t.size_bytes)
    inv = Inventory(name="inv", tables=TABLES)
    shards = {"wide": (ColumnShard(start=0, end=64, device=1), ColumnShard(start=64, end=256, device=2))}
    units, placed = expand(inv, {"shared": 0, "half": 2}, shards)
    weights = [0, 0, 0]
    for name, d in placed.items():
        weights[d] += units.by_name()[name].size_bytes
    got = [m.total for m in device_memory(units, placed, plain)]
    assert got == weights  # today's figures (weights only): old plan files still check
    assert all(m.optimizer == m.io == 0 for m in device_memory(units, placed, plain))


def test_each_optimizer() -> None:
    t = TABLES[0]  # 1000 x 64 fp32
    w = t.size_bytes
    assert unit_memory(t, topo("sgd", "weights")) == MemoryBreakdown(weights=w)
    assert unit_memory(t, topo("adam", "weights")) == MemoryBreakdown(weights=w, optimizer=2 * w)
    assert unit_memory(t, topo("rowwise_adagrad", "weights")) == MemoryBreakdown(weights=w, optimizer=1000 * 4)
    # fp16: TorchRec counts the state in the table's dtype (one 2-byte element per row)
    assert unit_memory(TABLES[1], topo("rowwise_adagrad", "weights")).optimizer == 1001 * 2
    # a row shard's state is its rows'; a column shard's is its width's share of the table's one element per row
    assert unit_memory(cut(t, 250, 64), topo("rowwise_adagrad", "weights"), "row_wise", 4).optimizer == 250 * 4
    assert unit_memory(cut(t, 1000, 16), topo("rowwise_adagrad", "weights"), "column_wise", 4).optimizer == 1000
    assert (
        unit_memory(cut(t, 1000, 16), topo("rowwise_adagrad", "weights"), "column_wise", 1, table_dim=64).optimizer
        == 1000
    )
    # data parallel: each replica holds the whole table and its whole state; no gradient counted (as TorchRec)
    assert unit_memory(t, topo("adam", "weights"), "data_parallel", WORLD).total == 3 * w


def test_each_sharding_type_io() -> None:
    t = TABLES[0]  # features a (L=3) and b (L=0.5): inputs 3.5 x B, pooled outputs 1.5 x B per rank
    b_in, b_out, W = 3.5 * RANK_BATCH, 1.5 * RANK_BATCH, WORLD
    expect = {
        "table_wise": (t, b_in * W * 8 + b_out * W * 64 * 4),
        "column_wise": (cut(t, 1000, 16), b_in * W * 8 + b_out * W * 16 * 4),
        "row_wise": (cut(t, 250, 64), b_in * W / 4 * 8 + b_out * W * 64 * 4),
        "table_row_wise": (cut(t, 500, 64), b_in * W / 2 * 8 + b_out * W * 64 * 4),
        "data_parallel": (t, b_in * 8 + b_out * 64 * 4),
    }
    shards = {"table_wise": 1, "column_wise": 4, "row_wise": 4, "table_row_wise": LOCAL, "data_parallel": WORLD}
    for sharding, (unit, io) in expect.items():
        m = unit_memory(unit, topo(), sharding, shards[sharding])
        assert m == MemoryBreakdown(weights=unit.size_bytes, io=int(io)), sharding
        assert unit_memory(unit, topo(model="weights"), sharding, shards[sharding]).io == 0
    # the batch is global: twice the devices at the same global batch halve the per-rank inputs
    wide = Topology(num_devices=8, memory_per_device_gb=16.0, batch_size=RANK_BATCH * WORLD, memory_model="torchrec")
    assert unit_memory(t, wide, "data_parallel", 8).io * 2 == pytest.approx(expect["data_parallel"][1], abs=2)


def test_device_memory_sums_units_and_column_shards_default_to_column_wise() -> None:
    inv = Inventory(name="inv", tables=TABLES)
    shards = {"shared": (ColumnShard(start=0, end=16, device=1), ColumnShard(start=16, end=64, device=2))}
    units, placed = expand(inv, {"half": 0, "wide": 1}, shards)
    tp = topo("rowwise_adagrad")
    got = device_memory(units, placed, tp)
    by = units.by_name()
    assert got[0] == unit_memory(by["half"], tp)
    assert got[1] == unit_memory(by["wide"], tp) + unit_memory(by["shared@0:16"], tp, "column_wise", 2, table_dim=64)
    assert got[3] == MemoryBreakdown()
    # unequal widths: the shards' row-wise state adds up to one element per row of the table
    assert got[1].optimizer + got[2].optimizer - unit_memory(by["wide"], tp).optimizer == 1000 * 4
    given = device_memory(units, placed, tp, {"half": ("data_parallel", WORLD)})
    assert given[0] == unit_memory(by["half"], tp, "data_parallel", WORLD)


def test_row_shard_and_replica_units_of_a_plan() -> None:
    """The units dreamshard.placement.expand makes: a row shard's pooling is its share of the lookups (the table's is
    recovered from it), row shards on one host of several are table-row-wise, a replica is data-parallel."""
    inv = Inventory(name="inv", tables=TABLES)
    tp = topo("rowwise_adagrad")
    rows = {"shared": row_shards_for(1000, list(range(WORLD))), "half": row_shards_for(1001, [2, 3])}
    units, placed = expand(inv, {}, {}, rows, ("wide",), tp)
    by = units.by_name()
    got = device_memory(units, placed, tp)
    full = {"shared": TABLES[0], "half": TABLES[1]}
    for d in range(WORLD):
        want = unit_memory(TABLES[2], tp, "data_parallel", WORLD)  # the replica of "wide"
        for (a, b), table, sharding, k in (
            ((250 * d, 250 * d + 250), "shared", "row_wise", WORLD),
            ((501 * (d - 2), min(1001, 501 * (d - 1))), "half", "table_row_wise", 2),
        ):
            if a >= 0:
                assert f"{table}@r{a}:{b}" in by
                want = want + unit_memory(full[table].model_copy(update={"num_embeddings": b - a}), tp, sharding, k)
        assert (got[d].weights, got[d].optimizer) == (want.weights, want.optimizer), d
        assert got[d].io == pytest.approx(want.io, abs=4), d  # the recovered pooling: float rounding in a ceil
    assert by["shared@r0:250"].pooling_factor == pytest.approx(3.5 / 4)  # the unit's share, not the table's


def test_bad_input_is_a_one_line_plan_error_naming_the_unit() -> None:
    t = TABLES[0]
    for sharding, k, match in (
        ("diagonal", 1, "unknown sharding type 'diagonal'"),
        ("row_wise", 0, "num_shards"),
        ("row_wise", -2, "num_shards"),
        ("column_wise", True, "num_shards"),
    ):
        with pytest.raises(PlanError, match=match) as err:
            unit_memory(t, topo(), sharding, k)
        assert "'shared'" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(PlanError, match="table_dim"):
        unit_memory(t, topo(), "column_wise", 2, table_dim=8)
    inv = Inventory(name="inv", tables=TABLES)
    with pytest.raises(PlanError, match="unit 'nope'"):
        device_memory(inv, {"nope": 0}, topo())
    for d in (WORLD, -1, True, 1.0):
        with pytest.raises(PlanError, match="unit 'half' placed on device"):
            device_memory(inv, {"half": d}, topo())  # type: ignore[dict-item]
    with pytest.raises(PlanError, match="unit 'half': unknown sharding"):
        device_memory(inv, {"half": 0}, topo(), {"half": ("grid", 1)})


# ----------------------------------------------------------------------------------- against TorchRec's estimator


def _torchrec_shards(
    table: Table, sharding: str, optimizer: str | None, device: str = "cuda", fused_params: dict[str, Any] | None = None
) -> list[tuple[list[int], int]]:
    """[(shard size [rows, cols], hbm + ddr bytes)] of `table` as TorchRec 1.9.2's EmbeddingStorageEstimator
    counts it for one sharding type on a WORLD-rank topology of LOCAL-rank hosts, batch RANK_BATCH per rank."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("torchrec")
    from torch.distributed.optim import _apply_optimizer_in_backward
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner import ParameterConstraints
    from torchrec.distributed.planner.enumerators import EmbeddingEnumerator
    from torchrec.distributed.planner.shard_estimators import EmbeddingStorageEstimator
    from torchrec.distributed.planner.types import KernelConfig, TopologyFactory, TrainerConfig
    from torchrec.modules.embedding_configs import DataType, EmbeddingBagConfig
    from torchrec.modules.embedding_modules import EmbeddingBagCollection
    from torchrec.optim import RowWiseAdagrad

    classes = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "rowwise_adagrad": RowWiseAdagrad}
    config = EmbeddingBagConfig(
        num_embeddings=table.num_embeddings,
        embedding_dim=table.embedding_dim,
        name="t0",
        feature_names=list(table.feature_names),
        data_type=DataType.FP16 if table.dtype == "fp16" else DataType.FP32,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ebc = EmbeddingBagCollection(tables=[config], device=torch.device("meta"))
        if optimizer is not None:  # what TorchRec's estimator reads: the parameter's `_optimizer_classes`
            _apply_optimizer_in_backward(classes[optimizer], ebc.parameters(), {"lr": 0.1})
        constraints = {
            "t0": ParameterConstraints(
                sharding_types=[sharding],
                compute_kernels=["dense" if sharding == "data_parallel" else "fused"],
                pooling_factors=[f.pooling_factor for f in table.feature_list],
                min_partition=table.embedding_dim // 4,
            )
        }  # column_wise: 4 shards
        trainer = TrainerConfig(world_size=WORLD, local_world_size=LOCAL, hbm_cap_bytes=1 << 40, ddr_cap_bytes=1 << 40)
        topology = TopologyFactory.create_topology(
            trainer_config=trainer, kernel_config=KernelConfig(compute_device=device)
        )
        enumerator = EmbeddingEnumerator(
            topology=topology,
            batch_size=RANK_BATCH,
            constraints=constraints,
            estimator=[EmbeddingStorageEstimator(topology, constraints)],
        )
        options = enumerator.enumerate(ebc, [EmbeddingBagCollectionSharder(fused_params=fused_params)])
    (option,) = options
    assert option.sharding_type == sharding
    return [(list(s.size), s.storage.hbm + s.storage.ddr) for s in option.shards]


def _ours(table: Table, sharding: str, optimizer: str, shards: list[tuple[list[int], int]]) -> list[int]:
    tp = topo(optimizer)
    return [unit_memory(cut(table, rows, cols), tp, sharding, len(shards)).total for (rows, cols), _ in shards]


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
@pytest.mark.parametrize("sharding", SHARDING_TYPES)
def test_matches_torchrec_storage_estimator_within_5_percent(sharding: str, optimizer: str) -> None:
    for table in TABLES:
        devices = ("cuda",) if sharding in ("row_wise", "table_row_wise") else ("cuda", "cpu")
        for device in devices:
            theirs = _torchrec_shards(table, sharding, optimizer, device)
            expected_shards = {
                "table_wise": 1,
                "column_wise": 4,
                "row_wise": WORLD,
                "table_row_wise": LOCAL,
                "data_parallel": WORLD,
            }[sharding]
            assert len(theirs) == expected_shards
            for ours, (_, tr) in zip(_ours(table, sharding, optimizer, theirs), theirs, strict=True):
                err = abs(ours - tr) / tr
                assert err <= 0.05, f"{table.name} {sharding} {optimizer} {device}: ours {ours}, torchrec {tr}"


def _plan_units(table: Table, sharding: str, tp: Topology) -> tuple[Inventory, dict[str, int]]:
    """`table`'s units in a plan of that sharding type (shard i on device i, as TorchRec's shard i)."""
    inv = Inventory(name="one", tables=(table,))
    w = table.embedding_dim // 4
    layouts: dict[str, tuple[Any, ...]] = {
        "table_wise": ({table.name: 0}, {}, {}, ()),
        "column_wise": (
            {},
            {table.name: tuple(ColumnShard(start=i * w, end=(i + 1) * w, device=i) for i in range(4))},
            {},
            (),
        ),
        "row_wise": ({}, {}, {table.name: row_shards_for(table.num_embeddings, list(range(WORLD)))}, ()),
        "table_row_wise": ({}, {}, {table.name: row_shards_for(table.num_embeddings, list(range(LOCAL)))}, ()),
        "data_parallel": ({}, {}, {}, (table.name,)),
    }
    placement, columns, rows, replicated = layouts[sharding]
    return expand(inv, placement, columns, rows, replicated, tp)


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_plan_units_match_torchrec_within_5_percent(optimizer: str) -> None:
    """What the placement check will call: `device_memory` over a plan's units (dreamshard.placement.expand.expand: row
    shards carry their share of the lookups, replicas one per device) against TorchRec's shards."""
    tp = topo(optimizer)
    for table in TABLES:
        for sharding in SHARDING_TYPES:
            theirs = _torchrec_shards(table, sharding, optimizer)
            units, placed = _plan_units(table, sharding, tp)
            ours = device_memory(units, placed, tp)
            for d, (_, tr) in enumerate(theirs):
                err = abs(ours[d].total - tr) / tr
                assert err <= 0.05, f"{table.name} {sharding} {optimizer} device {d}: ours {ours[d]}, torchrec {tr}"


def test_torchrec_estimator_ignores_the_fused_optimizer_param() -> None:
    """TorchRec 1.9.2 sizes optimizer state from the parameters' `_optimizer_classes` (set by
    `_apply_optimizer_in_backward`) only: a sharder's `fused_params={"optimizer": EXACT_ROWWISE_ADAGRAD}` adds
    nothing to its estimate, which then is our sgd figure; the state is counted once the class is set."""
    pytest.importorskip("torchrec")
    pytest.importorskip("fbgemm_gpu")
    from fbgemm_gpu.split_embedding_configs import EmbOptimType

    table = TABLES[0]
    fused = _torchrec_shards(table, "table_wise", None, fused_params={"optimizer": EmbOptimType.EXACT_ROWWISE_ADAGRAD})
    assert [m for _, m in fused] == _ours(table, "table_wise", "sgd", fused)
    applied = _torchrec_shards(table, "table_wise", "rowwise_adagrad")
    assert [m for _, m in applied] == _ours(table, "table_wise", "rowwise_adagrad", applied)


# ------------------------------------------------------------------------------------------------------- reports


def _report_plan(tp: Topology) -> tuple[Inventory, Any]:
    """A plan with a whole table, two column shards and a row-sharded table, its memory figures the old weights."""
    from dreamshard.values import Plan

    inv = Inventory(name="inv", tables=TABLES)
    columns = {"wide": (ColumnShard(start=0, end=128, device=1), ColumnShard(start=128, end=256, device=2))}
    rows = {"half": row_shards_for(1001, list(range(WORLD)))}
    units, placed = expand(inv, {"shared": 0}, columns, rows, (), tp)
    weights = [0.0] * WORLD
    for name, d in placed.items():
        weights[d] += units.by_name()[name].size_gb
    plan = Plan(
        inventory_name=inv.name,
        inventory_fingerprint=inv.fingerprint(),
        topology=tp,
        sharder="test",
        placement={"shared": 0},
        column_shards=columns,
        row_shards=rows,
        memory_per_device_gb=tuple(weights),
    )
    return inv, plan


def test_device_report_breaks_memory_down_recomputed_from_the_inventory() -> None:
    from dreamshard.evaluation.render import device_rows, device_table, device_table_markdown, plan_memory

    plain_inv, plain = _report_plan(topo("sgd", "weights"))
    for row, stated in zip(device_rows(plain, plain_inv), plain.memory_per_device_gb, strict=True):
        assert row["memory_gb"] == round(stated, 4) == row["weights_gb"]  # defaults: the plan's own figure
        assert row["optimizer_gb"] == row["io_gb"] == 0.0
    assert "weights_gb" not in device_rows(plain)[0]  # without the inventory: no breakdown, as before
    inv, plan = _report_plan(topo("adam"))
    memory = plan_memory(plan, inv)
    rows = device_rows(plan, inv)
    for row, m in zip(rows, memory, strict=True):
        assert row["memory_gb"] == round(m.total_gb, 4) and row["optimizer_gb"] == round(m.optimizer / 2**30, 4)
        assert m.optimizer == 2 * m.weights and m.io > 0
    assert rows[0]["memory_gb"] > plan.memory_per_device_gb[0]  # recomputed, never the plan's stated figure
    md = device_table_markdown(plan, inv)
    assert "| memory GB | mem % | weights GB | optimizer GB | io GB |" in md
    assert "as TorchRec counts it" in md and "optimizer adam" in md
    assert [c.header for c in device_table(plan, inv).columns][:7] == [
        "dev",
        "tables",
        "memory GB",
        "mem %",
        "weights GB",
        "optimizer GB",
        "io GB",
    ]


def test_stats_report_breaks_memory_down_per_device() -> None:
    from dreamshard.explain.report import plan_stats, planning_cost_for, stats_markdown

    inv, plan = _report_plan(topo("rowwise_adagrad"))
    units, placed = expand(inv, plan.placement, plan.column_shards, plan.row_shards, (), plan.topology)
    memory = device_memory(units, placed, plan.topology)
    stats = plan_stats(inv, plan, planning_cost_for(None, plan.topology))
    for d, m in zip(stats.devices, memory, strict=True):
        assert (d.weights_gb, d.optimizer_gb, d.io_gb) == pytest.approx(
            (m.weights / 2**30, m.optimizer / 2**30, m.io / 2**30)
        )
        assert d.memory_gb == pytest.approx(m.total_gb) and d.optimizer_gb > 0 and d.io_gb > 0
    assert "| memory GB | weights GB | optimizer GB | io GB |" in stats_markdown(stats)
