"""Sharding types as plan units: row-wise, table-row-wise and data-parallel tables validate,
expand into units, fold back, carry their memory, and round-trip through JSON, the store and the gate's checks;
plans written before them load unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from store_helpers import approve, gate_measured

from dreamshard.errors import PlanError
from dreamshard.gate import PublishConfig
from dreamshard.placement.expand import expand_plan, fold_units
from dreamshard.placement.validate import check_plan
from dreamshard.profiling import make_oracle
from dreamshard.sharders import get_sharder
from dreamshard.sharders.base import make_plan
from dreamshard.store import LocalPlanStore, get_current, publish
from dreamshard.values import Feature, Inventory, Plan, RowShard, Table, Topology
from dreamshard.values.units import parse_unit, row_blocks, row_shards_for

INV = Inventory(
    name="inv",
    tables=(
        Table(name="huge", num_embeddings=100_000, embedding_dim=64, pooling_factor=8.0),
        Table(
            name="shared",
            num_embeddings=10_000,
            embedding_dim=32,
            pooling_factor=6.0,
            features=(Feature(name="clicked", pooling_factor=2.0), Feature(name="viewed", pooling_factor=4.0)),
        ),
        Table(name="hot", num_embeddings=100, embedding_dim=16, pooling_factor=20.0),
        Table(name="plain", num_embeddings=5_000, embedding_dim=32, pooling_factor=3.0),
    ),
)
FLAT = Topology(num_devices=4, memory_per_device_gb=1.0, batch_size=256)
HOSTS = FLAT.model_copy(update={"devices_per_host": 2})


def mixed(topology: Topology = HOSTS) -> Plan:
    return make_plan(
        INV,
        topology,
        {"plain": 1},
        "hand",
        row_shards={"huge": row_shards_for(100_000, [0, 1, 2, 3]), "shared": row_shards_for(10_000, [2, 3])},
        data_parallel=("hot",),
    )


def test_each_type_validates_and_says_which_it_is() -> None:
    plan = mixed()
    assert [plan.sharding_type(t) for t in ("huge", "shared", "hot", "plain")] == [
        "row_wise",
        "table_row_wise",
        "data_parallel",
        "table_wise",
    ]
    assert plan.sharding_types() == {"row_wise": 1, "table_row_wise": 1, "data_parallel": 1, "table_wise": 1}
    assert check_plan(INV, plan) == pytest.approx(list(plan.memory_per_device_gb))
    tr = plan.to_torchrec()
    assert tr["shared"]["sharding_type"] == "table_row_wise" and tr["shared"]["ranks"] == [2, 3]
    assert tr["hot"] == {"sharding_type": "data_parallel", "compute_kernel": "dense", "ranks": [0, 1, 2, 3]}
    # on one flat host, row shards over two of four devices are no layout TorchRec runs
    with pytest.raises(PlanError, match="row shards of table 'shared' are on devices \\[2, 3\\]"):
        mixed(FLAT)


def test_units_carry_their_share_of_rows_and_lookups_and_fold_back() -> None:
    plan = mixed()
    units, placed = expand_plan(INV, plan)
    by = units.by_name()
    a, b = row_blocks(10_000, 2)[0]
    first = by[f"shared@r{a}:{b}"]
    assert first.num_embeddings == 5_000 and first.pooling_factor == pytest.approx(3.0)
    assert [f.pooling_factor for f in first.features] == pytest.approx([1.0, 2.0])  # each feature's share too
    assert {placed[f"hot@dp{d}"] for d in range(4)} == {0, 1, 2, 3} and by["hot@dp2"].num_embeddings == 100
    assert parse_unit("huge@r25000:50000").kind == "row" and parse_unit("hot@dp3").device == 3
    folded = fold_units(INV, placed)
    assert folded.row_shards == plan.row_shards and folded.data_parallel == ("hot",)
    assert folded.placement == {"plain": 1}
    # memory: row shards hold their rows, a replica the whole table on every device
    per_device = [sum(u.size_bytes for u in units.tables if placed[u.name] == d) / 2**30 for d in range(4)]
    assert list(plan.memory_per_device_gb) == pytest.approx(per_device)


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda p: {
                "row_shards": {
                    **p.row_shards,
                    "huge": (RowShard(start=0, end=50_000, device=1), RowShard(start=50_000, end=100_000, device=2)),
                }
            },
            "row shards of table 'huge' are on devices \\[1, 2\\]; row-wise sharding needs devices 0..3 in order, or "
            "the 2 devices of one host in order",
        ),
        (
            lambda p: {
                "row_shards": {
                    **p.row_shards,
                    "huge": tuple(
                        RowShard(start=a, end=b, device=3 - i) for i, (a, b) in enumerate(row_blocks(100_000, 4))
                    ),
                }
            },
            "row shards of table 'huge' are on devices \\[3, 2, 1, 0\\]",
        ),
        (
            lambda p: {
                "row_shards": {
                    **p.row_shards,
                    "huge": (
                        RowShard(start=0, end=30_000, device=0),
                        RowShard(start=30_000, end=60_000, device=1),
                        RowShard(start=60_000, end=90_000, device=2),
                        RowShard(start=90_000, end=100_000, device=3),
                    ),
                }
            },
            "as TorchRec cuts them",
        ),
        (lambda p: {"data_parallel": ("hot", "plain")}, "table 'plain' is both placed whole and data-parallel"),
        (lambda p: {"data_parallel": ("ghost",)}, "'ghost', which is not in inventory"),
    ],
)
def test_an_edited_layout_is_refused_in_one_line_naming_the_table(edit, message) -> None:
    plan = mixed()
    data = {**plan.model_dump(), **edit(plan)}
    with pytest.raises((PlanError, ValueError), match=message):
        check_plan(INV, Plan.model_validate(data))


def test_a_table_too_small_for_its_row_shards_is_refused() -> None:
    tiny = Inventory(name="t", tables=(Table(name="few", num_embeddings=5, embedding_dim=8, pooling_factor=1.0),))
    topo = Topology(num_devices=4, memory_per_device_gb=1.0)
    with pytest.raises(PlanError, match="row shards of table 'few' are on devices \\[0, 1, 2\\]"):
        make_plan(tiny, topo, {}, "hand", row_shards={"few": row_shards_for(5, [0, 1, 2, 3])})


def test_round_trips_through_json_the_store_and_the_gates_checks(tmp_path: Path) -> None:
    plan = mixed()
    again = Plan.model_validate_json(plan.model_dump_json())
    assert again == plan and again.units() == plan.units()
    store = LocalPlanStore(tmp_path / "store")
    oracle = make_oracle("simulator", warmup=0, repeats=1)
    judged, decision, cmp = gate_measured(
        plan,
        INV,
        oracle,
        PublishConfig(baselines=("round_robin", "torchrec"), min_rounds=2, allow_simulated=True),
        rounds=2,
    )
    assert cmp.result("hand").plan.row_shards == plan.row_shards  # measured as itself, units and all
    assert decision.outcome in ("approved", "rejected", "inconclusive")
    publish(store, judged, approve(judged))
    current = get_current(store, "inv")
    assert current.row_shards == plan.row_shards and current.data_parallel == ("hot",)


def test_plans_written_before_the_new_types_load_unchanged() -> None:
    old = get_sharder("round_robin").shard(INV, FLAT)
    data = json.loads(old.model_dump_json())
    for key in ("row_shards", "data_parallel"):
        data.pop(key)
    for key in ("devices_per_host", "inter_host_gbps", "optimizer", "memory_model", "memory_reserve"):
        data["topology"].pop(key)
    loaded = Plan.model_validate(data)
    assert loaded == old and not loaded.row_shards and loaded.sharding_types() == {"table_wise": 4}
    check_plan(INV, loaded)


def test_the_oracle_times_replicas_at_the_local_batch_and_costs_each_collective() -> None:
    """Row shards: reduce-scatter out, all-gather back; replicas: a second fused operator at batch / devices and
    an all-reduce of their gradient; whole tables: the all-to-all, as before."""
    oracle = make_oracle("simulator", warmup=0, repeats=1)
    batches: list[int] = []
    inner = oracle.backend.time_device

    def spy(tables, batch_size, warmup, repeats):  # type: ignore[no-untyped-def]
        batches.append(batch_size)
        return inner(tables, batch_size, warmup, repeats)

    oracle.backend.time_device = spy  # type: ignore[method-assign]
    plan = make_plan(
        INV,
        FLAT,
        {"plain": 1, "shared": 2},
        "hand",
        row_shards={"huge": row_shards_for(100_000, [0, 1, 2, 3])},
        data_parallel=("hot",),
    )
    units, placed = expand_plan(INV, plan)
    m = oracle.measure(units, placed, FLAT)
    assert sorted(batches) == [64] * 4 + [256] * 4  # replicas at 256 / 4 on every device, the rest at 256
    dev0 = m.costs.per_device[0]  # a row shard and a replica: reduce-scatter out, + all-reduce back
    assert dev0.fwd_comm > 0 and dev0.bwd_comm > dev0.fwd_comm
    flat = oracle.measure(INV, {"huge": 0, "shared": 1, "hot": 2, "plain": 3}, FLAT)
    assert flat.costs.per_device[0].bwd_comm == pytest.approx(flat.costs.per_device[0].fwd_comm)  # all-to-all only


#: histograms declared "no reuse" (bin 0): the tables the type choice is tested on stay as costly as they were
#: written for (without one, the planner now assumes Zipf-like reuse, which makes them cheap)
_FLAT = (1.0,) + (0.0,) * 16
HOT = Inventory(
    name="hot",
    tables=(
        Table(name="hot", num_embeddings=64, embedding_dim=64, pooling_factor=400.0, access_histogram=_FLAT),
        Table(name="huge", num_embeddings=2_000_000, embedding_dim=64, pooling_factor=120.0, access_histogram=_FLAT),
        *(
            Table(name=f"t{i}", num_embeddings=20_000, embedding_dim=32, pooling_factor=5.0, access_histogram=_FLAT)
            for i in range(6)
        ),
    ),
)
ALL_TYPES = ("row_wise", "table_row_wise", "data_parallel")


def test_the_search_chooses_types_where_the_learned_cost_says_they_pay() -> None:
    """The packaged model: on a fast interconnect a hot tiny table and a huge hot table are worth replicating or
    row-sharding; on this machine's measured gloo (a reduce-scatter costs milliseconds) nothing is converted."""
    from dreamshard.config.learning import SearchConfig

    fast = Topology(num_devices=4, memory_per_device_gb=4.0, interconnect="fast")
    typed = get_sharder("dreamshard", search=SearchConfig(types=ALL_TYPES)).shard_with_report(HOT, fast)
    plain = get_sharder("dreamshard").shard(HOT, fast)
    kinds = typed.plan.sharding_types()
    assert {"row_wise", "data_parallel"} & set(kinds) and "+types (" in typed.search.best.source
    assert typed.plan.predicted.overall_ms <= 0.98 * plain.predicted.overall_ms  # MIN_GAIN per conversion
    assert plain.sharding_types().keys() <= {"table_wise", "column_wise"}
    check_plan(HOT, typed.plan)
    hosts = fast.model_copy(update={"devices_per_host": 2})
    on_hosts = get_sharder("dreamshard", search=SearchConfig(types=("table_row_wise",))).shard(HOT, hosts)
    assert set(on_hosts.sharding_types()) <= {"table_wise", "column_wise", "table_row_wise"}
    assert "table_row_wise" in on_hosts.sharding_types()
    check_plan(HOT, on_hosts)


def test_types_are_validated_and_refinement_keeps_fixed_units_in_place() -> None:
    import torch

    from dreamshard.config.learning import SearchConfig
    from dreamshard.placement.validate import footprint
    from dreamshard.search.local import refine_placement
    from dreamshard.search.sharding_types import choose_types

    with pytest.raises(ValueError, match="unknown sharding type 'grid'"):
        SearchConfig(types=("grid",))
    sharder = get_sharder("dreamshard")
    topo = Topology(num_devices=4, memory_per_device_gb=4.0, interconnect="fast")
    cost = sharder.planning_cost(topo)
    placement = {t.name: i % 4 for i, t in enumerate(HOT.tables)}
    assert choose_types(HOT, HOT, placement, topo, cost, ()) is None
    tables = list(HOT.tables)
    crowded = [0] * len(tables)  # everything on device 0; only the t* tables may move
    movable = [t.name.startswith("t") for t in tables]
    with torch.no_grad():
        states = cost.encode(tables)
    moved = refine_placement(
        cost, states, [footprint(t, topo) for t in tables], crowded, topo, min_gain=0.0, movable=movable
    )
    assert [d for d, m in zip(moved, movable, strict=True) if not m] == [0, 0] and any(moved)
