"""TorchRec's EmbeddingShardingPlanner as dreamshard sharders: ``torchrec`` (unrestricted) and ``torchrec_tw_cw``
(real torchrec, meta tensors, no GPU)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from dreamshard.errors import ConfigError, InfeasiblePlacementError, PlanError
from dreamshard.integrations.torchrec_file import (
    plan_from_document,
    read_torchrec_plan,
    save_torchrec_plan,
    torchrec_document,
)
from dreamshard.placement.validate import check_placement, check_plan
from dreamshard.sharders import accepted_options, contender_names, get_sharder, sharder_family, torchrec_sharder
from dreamshard.sharders.torchrec_sharder import TorchRecSharder, TorchRecTwCwSharder
from dreamshard.values import GB, Inventory, Plan, Table, Topology
from dreamshard.values.units import row_blocks

MB = 1024**2


def _inventory(n: int, seed: int = 0, prefix: str = "emb.") -> Inventory:
    rng = np.random.default_rng(seed)
    tables = tuple(
        Table(
            name=f"{prefix}{i}",  # dots: torchrec's module dict would reject them without our renaming
            num_embeddings=int(rng.integers(1_000, 200_000)),
            embedding_dim=int(rng.choice([8, 16, 32, 64, 128])),
            pooling_factor=float(np.round(rng.uniform(0.5, 40.0), 2)),
            dtype="fp16" if i % 5 == 0 else "fp32",
        )
        for i in range(n)
    )
    return Inventory(name=f"tr{n}", tables=tables)


def _topology(inv: Inventory, devices: int, slack: float, device_type: str = "cpu") -> Topology:
    total = sum(t.size_bytes for t in inv.tables)
    cap_gb = total / devices * slack / GB
    return Topology(num_devices=devices, device_type=device_type, memory_per_device_gb=cap_gb)  # type: ignore[arg-type]


@pytest.mark.parametrize("device_type", ["cpu", "cuda"])
def test_valid_plan_with_all_tables(device_type: str) -> None:
    inv = _inventory(20)
    topo = _topology(inv, 4, slack=1.5, device_type=device_type)
    plan = get_sharder("torchrec_tw_cw").shard(inv, topo)
    assert isinstance(plan, Plan)
    assert plan.sharder == "torchrec_tw_cw"
    assert sorted(plan.placement) == sorted(inv.table_names)
    check_placement(inv, plan.placement, topo)
    assert plan.fits_memory()
    assert len(set(plan.placement.values())) == 4  # it spreads 20 tables over all devices
    assert plan.to_torchrec()[inv.table_names[0]]["ranks"] == [plan.placement[inv.table_names[0]]]


def test_deterministic_and_rejects_foreign_options() -> None:
    inv = _inventory(12, seed=1)
    topo = _topology(inv, 3, slack=2.0)
    a = get_sharder("torchrec_tw_cw").place(inv, topo)
    b = TorchRecTwCwSharder().place(inv, topo)
    assert a == b
    with pytest.raises(ConfigError, match="sharder 'torchrec_tw_cw' has no option 'model_dir'"):
        get_sharder("torchrec_tw_cw", seed=1, model_dir="x")
    assert TorchRecTwCwSharder.family == "torchrec" and "column_wise" in TorchRecTwCwSharder.options


@pytest.mark.parametrize("memory_model", ["dreamshard", "torchrec"])
def test_tight_memory_plans_fit_our_model_or_fail_typed(memory_model: str) -> None:
    """With little slack memory binds: every plan TorchRec returns fits our memory model, and every refusal
    is our typed one-line error. Under our (weights-only) model it places all of these."""
    inv = _inventory(20, seed=2)
    sharder = get_sharder("torchrec_tw_cw", memory_model=memory_model)
    outcomes = []
    for slack in (1.05, 1.1, 1.25, 1.5):
        topo = _topology(inv, 4, slack=slack)
        try:
            plan = sharder.shard(inv, topo)
        except (InfeasiblePlacementError, PlanError) as e:
            assert "\n" not in str(e)
            outcomes.append(False)
        else:
            check_placement(inv, plan.placement, topo)
            outcomes.append(True)
    assert outcomes[-1]  # 50% slack suffices for both
    if memory_model == "dreamshard":
        assert all(outcomes)


def test_infeasible_memory_is_typed_one_line() -> None:
    inv = _inventory(20, seed=3)
    topo = _topology(inv, 4, slack=0.8)  # less memory in total than the tables need
    with pytest.raises((InfeasiblePlacementError, PlanError)) as ei:
        get_sharder("torchrec_tw_cw").shard(inv, topo)
    msg = str(ei.value)
    assert "\n" not in msg
    assert "torchrec planner" in msg
    if isinstance(ei.value, InfeasiblePlacementError):
        assert ei.value.table in inv.table_names  # our name, not torchrec's internal t<i>
        assert f"'{ei.value.table}'" in msg


def test_table_larger_than_device_named_before_torchrec() -> None:
    tables = (
        Table(name="ok", num_embeddings=100, embedding_dim=8, pooling_factor=1.0),
        Table(name="huge", num_embeddings=4 * MB // 32, embedding_dim=8, pooling_factor=1.0),
    )
    inv = Inventory(name="big", tables=tables)
    with pytest.raises(InfeasiblePlacementError) as ei:
        get_sharder("torchrec_tw_cw").shard(inv, Topology(num_devices=4, memory_per_device_gb=1 * MB / GB))
    assert ei.value.table == "huge"


def test_packing_failure_names_table() -> None:
    rows = int(0.6 * GB) // (64 * 4)
    inv = Inventory(
        name="pack",
        tables=tuple(Table(name=f"b{i}", num_embeddings=rows, embedding_dim=64, pooling_factor=1.0) for i in range(3)),
    )
    topo = Topology(num_devices=2, memory_per_device_gb=1.0)
    with pytest.raises(InfeasiblePlacementError) as ei:
        get_sharder("torchrec_tw_cw", column_wise="never").shard(inv, topo)
    assert ei.value.table in inv.table_names
    with pytest.raises(InfeasiblePlacementError, match="it counts this table as 0.60"):
        get_sharder("torchrec_tw_cw", memory_model="torchrec", column_wise="never").shard(inv, topo)
    # 0.6 GB tables take more than half a device: by default TorchRec may split them, and then they fit
    plan = get_sharder("torchrec_tw_cw").shard(inv, topo)
    assert plan.column_shards and plan.fits_memory()
    with pytest.raises(PlanError, match="column-wise, which a table-wise placement cannot hold"):
        get_sharder("torchrec_tw_cw").place(inv, topo)


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
def test_memory_models_exact_fit(dtype: str) -> None:
    """Four 0.25 GB tables on two 0.5 GB devices: exact fit under our weights-only model (fp16 counted at
    2 bytes); TorchRec's own estimator adds I/O buffers to every table and refuses."""
    rows = int(0.25 * GB) // (64 * (4 if dtype == "fp32" else 2))
    tables = tuple(
        Table(name=f"e{i}", num_embeddings=rows, embedding_dim=64, pooling_factor=2.0, dtype=dtype)  # type: ignore[arg-type]
        for i in range(4)
    )
    inv = Inventory(name="exact", tables=tables)
    topo = Topology(num_devices=2, memory_per_device_gb=0.5)
    plan = get_sharder("torchrec_tw_cw").shard(inv, topo)
    assert sorted(plan.placement.values()) == [0, 0, 1, 1]
    assert plan.memory_per_device_gb == pytest.approx((0.5, 0.5))
    with pytest.raises(InfeasiblePlacementError, match="input/output buffers"):
        get_sharder("torchrec_tw_cw", memory_model="torchrec").shard(inv, topo)
    with pytest.raises(PlanError, match="memory_model"):
        TorchRecTwCwSharder(memory_model="bogus")  # type: ignore[arg-type]


def test_reserve_fraction_shrinks_usable_memory() -> None:
    inv = _inventory(10, seed=4)
    topo = _topology(inv, 2, slack=1.3)
    TorchRecTwCwSharder().place(inv, topo)  # fits with no reservation
    with pytest.raises((InfeasiblePlacementError, PlanError), match="50% reserved"):
        TorchRecTwCwSharder(reserve_fraction=0.5).place(inv, topo)
    with pytest.raises(PlanError, match="reserve_fraction"):
        TorchRecTwCwSharder(reserve_fraction=1.5)


def test_translate_without_table_falls_back_to_global_limit() -> None:
    from torchrec.distributed.planner.types import PlannerError

    inv = _inventory(3)
    topo = _topology(inv, 2, slack=1.0)
    text = (
        "Unable to find a plan for this model because of insufficient storage. \n"
        "\t  Global storage available for model parallel: Storage(hbm = 0.0 GB, ddr = 0.5 GB), \n"
        "\t  Global storage requirement for model parallel: Storage(hbm = 0.0 GB, ddr = 0.75 GB))\n"
    )
    err = TorchRecTwCwSharder()._translate(PlannerError(text), inv, topo)
    assert isinstance(err, InfeasiblePlacementError)  # the gate accepts an absent baseline only for this
    assert "needs 0.750 GB, 0.500 GB available over 2 devices" in str(err)
    odd = TorchRecTwCwSharder()._translate(PlannerError("\nsomething else\nmore"), inv, topo)
    assert isinstance(odd, PlanError) and "something else" in str(odd) and "\n" not in str(odd)


def test_wall_time_50_tables_4_devices(capsys: pytest.CaptureFixture[str]) -> None:
    """Reported, not asserted (shared CPUs): planning latency of TorchRec's planner through our wrapper."""
    inv = _inventory(50, seed=5)
    topo = _topology(inv, 4, slack=1.5)
    sharder = get_sharder("torchrec_tw_cw")
    sharder.place(_inventory(50, seed=6), topo)  # warm: the first call pays torchrec's import (another inventory:
    # the same one would be answered from the planner's kept answers, test_planner_answers_are_kept_per_version)
    start = time.perf_counter()
    plan = sharder.shard(inv, topo)
    elapsed = time.perf_counter() - start
    assert len(plan.placement) == 50
    with capsys.disabled():
        print(f"\n[torchrec sharder] 50 tables / 4 devices: {elapsed:.3f} s per plan (after import)")


@pytest.mark.parametrize("devices", [1, 3])
def test_edge_tables_and_single_device(devices: int) -> None:
    inv = Inventory(
        name="edge",
        tables=(
            Table(name="one-row", num_embeddings=1, embedding_dim=4, pooling_factor=0.0),
            Table(name="b/c d", num_embeddings=5000, embedding_dim=8, pooling_factor=0.5, dtype="fp16"),
        ),
    )
    topo = Topology(num_devices=devices, device_type="cuda", memory_per_device_gb=0.01)
    plan = get_sharder("torchrec_tw_cw").shard(inv, topo)
    assert sorted(plan.placement) == ["b/c d", "one-row"]
    assert all(0 <= d < devices for d in plan.placement.values())


def test_missing_torchrec_is_one_line_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from dreamshard.errors import UnknownSharderError

    monkeypatch.setitem(sys.modules, "torchrec.distributed.embeddingbag", None)  # import now fails
    monkeypatch.setattr(torchrec_sharder, "_ANSWERS", type(torchrec_sharder._ANSWERS)())  # nothing planned before
    with pytest.raises(UnknownSharderError, match="pip install torchrec") as ei:
        get_sharder("torchrec_tw_cw").place(_inventory(2), Topology(num_devices=2, memory_per_device_gb=1.0))
    assert "\n" not in str(ei.value)


def test_split_width_rule() -> None:
    """Widest multiple-of-4 divisor of the dim whose shard takes at most half a device, else a whole device."""
    from dreamshard.sharders.torchrec_sharder import split_width

    table = Table(name="t", num_embeddings=1000, embedding_dim=128, pooling_factor=1.0)  # 4000 bytes per column
    assert split_width(table, 4000 * 128) == 64  # 64 columns are exactly half a device
    assert split_width(table, 4000 * 127) == 32
    assert split_width(table, 4000 * 400) == 64  # never the whole dim
    assert split_width(table, 4000 * 12) == 4  # no shard fits in half a device; a 4-column one fits in a whole one
    assert split_width(table, 4000 * 3) is None
    assert split_width(Table(name="u", num_embeddings=1000, embedding_dim=12, pooling_factor=1.0), 4000 * 10) == 4


def test_small_tables_get_the_table_wise_plan_in_auto_mode() -> None:
    inv = _inventory(12, seed=6)
    topo = _topology(inv, 3, slack=2.0)
    assert max(t.size_bytes for t in inv.tables) * 2 <= topo.memory_per_device_bytes
    auto = get_sharder("torchrec_tw_cw").shard(inv, topo)
    assert not auto.column_shards
    assert auto.placement == get_sharder("torchrec_tw_cw", column_wise="never").place(inv, topo)


def test_torchrec_splits_criteo_terabyte_on_8_devices_of_16_gb() -> None:
    """84.9 GB, three tables of 19-23 GB: TorchRec's planner places it with column shards that fit every device;
    table-wise only, the first table larger than a device is named."""
    from dreamshard.inventory.presets import preset_inventory
    from dreamshard.placement.expand import expand_plan

    inv = preset_inventory("criteo-terabyte")
    topo = Topology(num_devices=8, memory_per_device_gb=16.0)
    plan = get_sharder("torchrec_tw_cw").shard(inv, topo)
    assert {"t_cat_0", "t_cat_19", "t_cat_21"} <= set(plan.column_shards)
    assert plan.fits_memory() and max(plan.memory_per_device_gb) <= 16.0
    units, placement = expand_plan(inv, plan)  # shards tile their tables
    check_placement(units, placement, topo)
    assert sum(t.size_bytes for t in units.tables) == sum(t.size_bytes for t in inv.tables)
    with pytest.raises(InfeasiblePlacementError, match="'t_cat_0'"):
        get_sharder("torchrec_tw_cw", column_wise="never").shard(inv, topo)
    with pytest.raises(PlanError, match="column_wise must be 'auto' or 'never'"):
        TorchRecTwCwSharder(column_wise="always")  # type: ignore[arg-type]


def _needy(dim: int) -> Inventory:
    """One table bigger than a 1 GB device (1.43 GB) and six tiny hot tables, beside four middling ones."""
    return Inventory(
        name="needy",
        tables=(
            Table(name="huge", num_embeddings=6_000_000 * 64 // dim, embedding_dim=dim, pooling_factor=2.0),
            *(Table(name=f"hot{i}", num_embeddings=200, embedding_dim=16, pooling_factor=50.0) for i in range(6)),
            *(Table(name=f"mid{i}", num_embeddings=100_000, embedding_dim=32, pooling_factor=5.0) for i in range(4)),
        ),
    )


def _round_trips(plan: Plan, inv: Inventory, tmp_path: Path) -> None:
    check_plan(inv, plan)
    path = save_torchrec_plan(torchrec_document(plan, inv), tmp_path / f"{plan.plan_id}.json")
    again = plan_from_document(read_torchrec_plan(path), inv, plan.topology)
    assert (again.placement, again.column_shards, again.row_shards, again.data_parallel) == (
        plan.placement,
        plan.column_shards,
        plan.row_shards,
        plan.data_parallel,
    )


def test_unrestricted_planner_on_cpu_replicates_hot_tables_and_splits_the_huge_one(tmp_path: Path) -> None:
    """On CPU TorchRec 1.9.2's sharder offers data_parallel, table_wise, column_wise (and table_column_wise,
    which dreamshard cannot hold): the hot tiny tables become data-parallel, the 1.43 GB table column shards."""
    inv = _needy(256)
    topo = Topology(num_devices=4, memory_per_device_gb=1.0, batch_size=512)
    plan = get_sharder("torchrec").shard(inv, topo)
    assert plan.sharder == "torchrec" and set(plan.data_parallel) >= {f"hot{i}" for i in range(6)}
    assert plan.sharding_type("huge") == "column_wise"
    _round_trips(plan, inv, tmp_path)
    with pytest.raises(InfeasiblePlacementError, match="table 'huge'"):  # dim 64: under min_partition, no split
        get_sharder("torchrec").shard(_needy(64), topo)
    assert not get_sharder("torchrec_tw_cw").shard(inv, topo).data_parallel  # the restricted one never replicates


@pytest.mark.parametrize("per_host", [None, 2])
def test_unrestricted_planner_on_cuda_row_shards_as_torchrec_cuts_them(per_host: int | None, tmp_path: Path) -> None:
    """On CUDA TorchRec also offers row_wise and table_row_wise (its planner runs on the CPU on meta tensors):
    the huge table becomes row blocks over every device (flat) or over one host's devices (2 hosts x 2)."""
    inv = _needy(64)
    topo = Topology(
        num_devices=4, memory_per_device_gb=1.0, batch_size=512, device_type="cuda", devices_per_host=per_host
    )
    plan = get_sharder("torchrec").shard(inv, topo)
    kind = "row_wise" if per_host is None else "table_row_wise"
    assert plan.sharding_type("huge") == kind
    assert [(rs.start, rs.end) for rs in plan.row_shards["huge"]] == row_blocks(6_000_000, 4 if per_host is None else 2)
    _round_trips(plan, inv, tmp_path)


def test_torchrec_tw_cw_is_registered_with_the_old_options_and_is_no_contender() -> None:
    assert sharder_family("torchrec_tw_cw") == "torchrec"
    assert accepted_options("torchrec_tw_cw") == accepted_options("torchrec") == TorchRecTwCwSharder.options
    assert isinstance(get_sharder("torchrec_tw_cw", column_wise="never"), TorchRecTwCwSharder)
    assert "torchrec" in contender_names() and "torchrec_tw_cw" not in contender_names()
    assert TorchRecSharder().memory_model == "torchrec" and TorchRecTwCwSharder().memory_model == "dreamshard"


def test_planner_answers_are_kept_per_version(monkeypatch: pytest.MonkeyPatch) -> None:
    """One process asks TorchRec's planner for the same plan several times (the plan stage's candidates, the gate's
    baselines): it plans once per (sharder options, inventory version, table order, topology), and every plan is
    built afresh from the kept answer (a caller's edit never reaches the next one)."""
    monkeypatch.setattr(torchrec_sharder, "_ANSWERS", type(torchrec_sharder._ANSWERS)())
    calls: list[str] = []
    real = TorchRecSharder._plan

    def counted(self: TorchRecSharder, inventory: Inventory, topology: Topology) -> object:
        calls.append(inventory.name)
        return real(self, inventory, topology)

    monkeypatch.setattr(TorchRecSharder, "_plan", counted)
    inv = _inventory(12, seed=3)
    topo = _topology(inv, 3, slack=1.5)
    first = get_sharder("torchrec").shard(inv, topo)
    again = get_sharder("torchrec").shard(inv, topo)
    assert calls == ["tr12"] and again.placement == first.placement
    first.placement.clear()  # the caller's copy only
    assert get_sharder("torchrec").shard(inv, topo).placement == again.placement
    assert len(calls) == 1
    # a statistics change, another topology, other options or another table order: planned afresh
    hotter = inv.model_copy(
        update={"tables": (inv.tables[0].model_copy(update={"pooling_factor": 99.0}), *inv.tables[1:])}
    )
    get_sharder("torchrec").shard(hotter, topo)
    get_sharder("torchrec").shard(inv, topo.model_copy(update={"num_devices": 4}))
    get_sharder("torchrec", column_wise="never").shard(inv, topo)
    get_sharder("torchrec").shard(inv.model_copy(update={"tables": tuple(reversed(inv.tables))}), topo)
    assert len(calls) == 5


def test_its_data_parallel_tables_log_nothing_but_a_root_warning_of_our_own_still_shows(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """TorchRec's planner logs "Sharding spec not found" on the root logger for every data-parallel table it picks
    (every `compare` and `replan` printed a column of them); planning is quiet now, and only about TorchRec."""
    import logging

    inv = Inventory(
        name="dp",
        tables=(
            *(
                Table(name=f"small{i}", num_embeddings=500 + 100 * i, embedding_dim=16, pooling_factor=5.0 + 10 * i)
                for i in range(4)
            ),
            *_inventory(12).tables,
        ),
    )
    with caplog.at_level(logging.WARNING):
        plan = get_sharder("torchrec").shard(inv, Topology(num_devices=4, memory_per_device_gb=4.0, batch_size=2048))
        logging.warning("ours")
    assert plan.data_parallel, "this inventory no longer gets a data-parallel table from TorchRec: pick another"
    assert [r.getMessage() for r in caplog.records] == ["ours"]
