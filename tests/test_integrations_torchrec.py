"""Plans <-> TorchRec: the plan file, ShardingPlan export (every sharding type), import, and their errors.

Real torchrec on the meta device (no process group): the ShardingPlans are compared with what TorchRec's own
generators build, shard by shard. tests/test_torchrec_dmp.py runs them in DistributedModelParallel.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
import torch.nn as nn

from dreamshard.cli.app import main
from dreamshard.documents import load_plan
from dreamshard.errors import ConfigError, DreamshardError, PlanError
from dreamshard.integrations import MissingDependencyError
from dreamshard.integrations.torchrec import (
    build_ebc,
    document_from_sharding_plan,
    load_sharding_plan,
    plan_from_torchrec,
    sharding_plan,
    table_configs,
    torchrec_table_name,
)
from dreamshard.integrations.torchrec_file import (
    read_torchrec_plan,
    save_torchrec_plan,
    torchrec_document,
)
from dreamshard.sharders import get_sharder, make_plan
from dreamshard.values import GB, ColumnShard, Inventory, Table, Topology
from dreamshard.values.units import row_shards_for

INV = Inventory(
    name="small",
    tables=(
        Table(name="user.id", num_embeddings=300, embedding_dim=16, pooling_factor=1.0),
        Table(name="item", num_embeddings=500, embedding_dim=32, pooling_factor=3.0),
        Table(name="ctx", num_embeddings=40, embedding_dim=8, pooling_factor=0.5, dtype="fp16"),
        Table(name="keys", num_embeddings=70, embedding_dim=24, pooling_factor=2.0),
    ),
)
TOPO = Topology(num_devices=3, memory_per_device_gb=1.0)
CS = ColumnShard


def _split_plan() -> object:
    """item: 32 columns as 8 | 24 on ranks 2, 0 (unequal); keys: 24 columns as 12 | 12 both on rank 1."""
    return make_plan(
        INV,
        TOPO,
        {"user.id": 0, "ctx": 2},
        "hand",
        column_shards={
            "item": (CS(start=0, end=8, device=2), CS(start=8, end=32, device=0)),
            "keys": (CS(start=0, end=12, device=1), CS(start=12, end=24, device=1)),
        },
    )


def _shards(ps: object) -> list[tuple[list[int], list[int], str]]:
    return [(list(s.shard_offsets), list(s.shard_sizes), str(s.placement)) for s in ps.sharding_spec.shards]  # type: ignore[attr-defined]


def test_make_plan_with_column_shards_counts_each_shard_where_it_lives() -> None:
    plan = _split_plan()
    assert plan.placement == {"user.id": 0, "ctx": 2} and list(plan.column_shards) == ["item", "keys"]
    assert plan.memory_per_device_gb == pytest.approx(
        ((300 * 16 * 4 + 500 * 24 * 4) / GB, 70 * 24 * 4 / GB, (40 * 8 * 2 + 500 * 8 * 4) / GB)
    )
    with pytest.raises(PlanError, match="plan places table 'nope', which is not in inventory 'small'"):
        make_plan(
            INV,
            TOPO,
            plan.placement,
            "x",
            column_shards={**plan.column_shards, "nope": (CS(start=0, end=4, device=0),)},
        )
    with pytest.raises(PlanError, match="table 'ctx' is both placed whole and split"):
        make_plan(
            INV, TOPO, plan.placement, "x", column_shards={**plan.column_shards, "ctx": (CS(start=0, end=8, device=0),)}
        )
    with pytest.raises(PlanError, match="table 'keys' has no device"):
        make_plan(INV, TOPO, plan.placement, "x", column_shards={"item": plan.column_shards["item"]})


def test_table_names_for_torchrec() -> None:
    assert torchrec_table_name("user.id") == "user_id"
    assert torchrec_table_name("keys") == "keys_table"  # an nn.ModuleDict method name
    assert torchrec_table_name("b-c_1") == "b-c_1"
    assert [c.name for c in table_configs(INV)] == ["user_id", "item", "ctx", "keys_table"]
    assert [c.feature_names for c in table_configs(INV)][0] == ["user_id"]
    clash = Inventory(
        name="c",
        tables=(
            Table(name="a.b", num_embeddings=1, embedding_dim=4, pooling_factor=1.0),
            Table(name="a_b", num_embeddings=1, embedding_dim=4, pooling_factor=1.0),
        ),
    )
    with pytest.raises(PlanError, match="tables 'a.b' and 'a_b' both map to TorchRec table 'a_b'"):
        table_configs(clash)


def test_document_holds_plan_shapes_and_kernel() -> None:
    plan = _split_plan()
    doc = torchrec_document(plan, INV, "dense")
    assert doc.world_size == 3 and doc.device_type == "cpu" and doc.inventory_fingerprint == INV.fingerprint()
    assert doc.tables["user.id"].model_dump(exclude_none=True) == {
        "sharding_type": "table_wise",
        "compute_kernel": "dense",
        "ranks": (0,),
        "num_embeddings": 300,
        "embedding_dim": 16,
    }
    assert doc.tables["item"].column_ranges == ((0, 8), (8, 32)) and doc.tables["item"].ranks == (2, 0)
    assert doc.units() == {"user.id": 0, "ctx": 2, "item@0:8": 2, "item@8:32": 0, "keys@0:12": 1, "keys@12:24": 1}
    # the file's table map is Plan.to_torchrec() plus shapes
    fused = torchrec_document(plan, INV)
    assert {
        t: {
            k: v
            for k, v in s.model_dump(mode="json", exclude_none=True).items()
            if k not in ("num_embeddings", "embedding_dim")
        }
        for t, s in fused.tables.items()
    } == plan.to_torchrec()
    with pytest.raises(ConfigError, match="'fused_uvm' needs device type cuda"):
        torchrec_document(plan, INV, "fused_uvm")  # type: ignore[arg-type]


def test_export_equals_torchrecs_own_generators() -> None:
    """Whole tables and equal column shards go through table_wise / column_wise; unequal shards come out as the
    same ShardMetadata structure with our widths and ranks."""
    from torchrec.distributed.sharding_plan import column_wise, construct_module_sharding_plan, table_wise

    plan = _split_plan()
    ebc = build_ebc(INV)
    ours = sharding_plan(plan, ebc).plan[""]
    theirs = construct_module_sharding_plan(
        ebc,
        per_param_sharding={
            "user_id": table_wise(rank=0, compute_kernel="fused"),
            "item": column_wise(ranks=[2, 0], compute_kernel="fused"),  # equal halves: not our plan
            "ctx": table_wise(rank=2, compute_kernel="fused"),
            "keys_table": column_wise(ranks=[1, 1], compute_kernel="fused"),
        },
        local_size=3,
        world_size=3,
        device_type="cpu",
    )
    for name in ("user_id", "ctx", "keys_table"):
        assert ours[name] == theirs[name], name
    item = ours["item"]
    assert (item.sharding_type, item.compute_kernel, item.ranks) == ("column_wise", "fused", [2, 0])
    assert _shards(item) == [([0, 0], [500, 8], "rank:2/cpu"), ([0, 8], [500, 24], "rank:0/cpu")]
    assert _shards(ours["keys_table"]) == [([0, 0], [70, 12], "rank:1/cpu"), ([0, 12], [70, 12], "rank:1/cpu")]


def test_column_shards_round_trip_through_file_and_sharding_plan(tmp_path: Path) -> None:
    plan = _split_plan()
    path = save_torchrec_plan(torchrec_document(plan, INV), tmp_path / "tr.json")
    assert "null" not in path.read_text()
    sp = load_sharding_plan(path, build_ebc(INV), world_size=3)
    back = plan_from_torchrec(sp, INV, TOPO)
    assert back.placement == plan.placement and back.column_shards == plan.column_shards
    assert back.memory_per_device_gb == pytest.approx(plan.memory_per_device_gb)
    from_file = plan_from_torchrec(path, INV, TOPO)
    assert (from_file.placement, from_file.column_shards, from_file.sharder) == (
        plan.placement,
        plan.column_shards,
        "hand",
    )
    assert read_torchrec_plan(path) == torchrec_document(plan, INV)


def test_bare_table_map_from_plans_show(tmp_path: Path) -> None:
    plan = _split_plan()
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(plan.to_torchrec()))
    with pytest.raises(PlanError, match="bare table map without a world size"):
        load_sharding_plan(bare, build_ebc(INV))
    sp = load_sharding_plan(bare, build_ebc(INV), world_size=3)
    assert plan_from_torchrec(sp, INV, TOPO).column_shards == plan.column_shards


def test_module_forms_nested_and_config_list() -> None:
    plan = get_sharder("size_greedy").shard(INV, TOPO)

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.sparse = build_ebc(INV)
            self.dense = nn.Linear(4, 1)

    nested = sharding_plan(plan, Model())
    assert list(nested.plan) == ["sparse"]
    assert {t: ps.ranks for t, ps in nested.plan["sparse"].items()} == {
        torchrec_table_name(t): [d] for t, d in plan.placement.items()
    }
    listed = sharding_plan(plan, table_configs(INV))
    assert listed.plan[""] == nested.plan["sparse"]
    with pytest.raises(PlanError, match="holds no embedding module"):
        sharding_plan(plan, nn.Linear(2, 2))


def test_names_mapping_for_a_users_module() -> None:
    from torchrec.modules.embedding_configs import DataType, EmbeddingBagConfig
    from torchrec.modules.embedding_modules import EmbeddingBagCollection

    plan = get_sharder("dim_greedy").shard(INV, TOPO)
    names = {t.name: f"emb_{i}" for i, t in enumerate(INV.tables)}

    def users_ebc(fp16: bool = True) -> EmbeddingBagCollection:
        return EmbeddingBagCollection(
            tables=[
                EmbeddingBagConfig(
                    name=names[t.name],
                    num_embeddings=t.num_embeddings,
                    embedding_dim=t.embedding_dim,
                    feature_names=[f"f{i}"],
                    data_type=DataType.FP16 if fp16 and t.dtype == "fp16" else DataType.FP32,
                )
                for i, t in enumerate(INV.tables)
            ],
            device=torch.device("meta"),
        )

    ebc = users_ebc()
    # an in-memory Plan carries its inventory's schema fingerprint (names mapped, hand-written single features
    # ignored): a module whose fp16 table is fp32 is another schema
    with pytest.raises(PlanError, match="made for other tables than the module's"):
        sharding_plan(plan, users_ebc(fp16=False), names=names)
    sp = sharding_plan(plan, ebc, names=names)
    assert sp.plan[""]["emb_1"].ranks == [plan.placement["item"]]
    assert plan_from_torchrec(sp, INV, TOPO, names=names).placement == plan.placement


def test_import_of_torchrecs_planner_result() -> None:
    """What TorchRec's EmbeddingShardingPlanner returns (its own names, table-wise and column-wise) imports as a
    Plan with the same ranks and column ranges."""
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner import EmbeddingShardingPlanner, ParameterConstraints
    from torchrec.distributed.planner import Topology as TRTopology
    from torchrec.distributed.planner.storage_reservations import FixedPercentageStorageReservation

    ebc = build_ebc(INV)
    constraints = {
        "item": ParameterConstraints(sharding_types=["column_wise"], min_partition=8),
        **{n: ParameterConstraints(sharding_types=["table_wise"]) for n in ("user_id", "ctx", "keys_table")},
    }
    planner = EmbeddingShardingPlanner(
        topology=TRTopology(world_size=3, compute_device="cpu"),
        constraints=constraints,
        storage_reservation=FixedPercentageStorageReservation(0.0),
    )
    sp = planner.plan(ebc, [EmbeddingBagCollectionSharder()])
    plan = plan_from_torchrec(sp, INV, TOPO)
    item = sp.plan[""]["item"]
    assert [(s.start, s.end, s.device) for s in plan.column_shards["item"]] == [
        (int(m.shard_offsets[1]), int(m.shard_offsets[1] + m.shard_sizes[1]), m.placement.rank())
        for m in item.sharding_spec.shards
    ]
    assert len(plan.column_shards["item"]) == 4  # 32 columns in blocks of min_partition=8
    assert plan.placement == {
        "user.id": sp.plan[""]["user_id"].ranks[0],
        "ctx": sp.plan[""]["ctx"].ranks[0],
        "keys": sp.plan[""]["keys_table"].ranks[0],
    }
    assert plan.sharder == "torchrec"


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d.update(world_size=2), "is on rank 2, but world_size is 2"),
        (
            lambda d: d["tables"]["item"].update(column_ranges=[[0, 6], [6, 32]]),
            "is 6 columns wide; shards must be multiples of 4",
        ),
        (lambda d: d["tables"]["item"].update(column_ranges=[[0, 8], [12, 32]]), "gap or overlap at column 8"),
        (lambda d: d["tables"]["item"].update(ranks=[2]), "one [start, end] column range per rank"),
        (lambda d: d["tables"]["ctx"].update(ranks=[0, 1]), "exactly one rank"),
        (lambda d: d["tables"]["ctx"].update(compute_kernel="quant"), "compute_kernel"),
        (lambda d: d["tables"]["item"].update(embedding_dim=64), "column ranges end at 32, the table has 64 columns"),
    ],
)
def test_bad_files_are_one_line_errors(tmp_path: Path, edit: object, message: str) -> None:
    data = json.loads(torchrec_document(_split_plan(), INV).model_dump_json())
    edit(data)  # type: ignore[operator]
    path = tmp_path / "tr.json"
    path.write_text(json.dumps(data))
    with pytest.raises(PlanError) as ei:
        load_sharding_plan(path, build_ebc(INV))
    assert message in str(ei.value) and "\n" not in str(ei.value) and str(path) in str(ei.value)


def test_plan_and_module_must_match() -> None:
    plan = _split_plan()
    with pytest.raises(PlanError, match="made for 3 ranks, not 2; re-plan with --devices 2"):
        sharding_plan(torchrec_document(plan, INV), build_ebc(INV), world_size=2)
    fewer = Inventory(name="s", tables=INV.tables[:3])
    with pytest.raises(PlanError, match="the plan shards table 'keys', which the module does not have"):
        sharding_plan(plan, build_ebc(fewer))
    more = Inventory(
        name="m", tables=(*INV.tables, Table(name="extra", num_embeddings=5, embedding_dim=4, pooling_factor=1.0))
    )
    with pytest.raises(PlanError, match="table 'extra' of the module has no entry in the plan"):
        sharding_plan(plan, build_ebc(more))
    resized = Inventory(name="r", tables=(INV.tables[0].model_copy(update={"num_embeddings": 301}), *INV.tables[1:]))
    with pytest.raises(PlanError, match="table 'user.id' is 300x16 in the plan but 301x16 in the module"):
        sharding_plan(torchrec_document(plan, INV), build_ebc(resized))
    with pytest.raises(PlanError, match="fingerprints differ"):
        plan_from_torchrec(torchrec_document(plan, INV), resized, TOPO)
    with pytest.raises(PlanError, match="made for 3 ranks, not 4"):
        plan_from_torchrec(torchrec_document(plan, INV), INV, TOPO.model_copy(update={"num_devices": 4}))
    tight = TOPO.model_copy(update={"memory_per_device_gb": 1e-6})
    with pytest.raises(PlanError, match="over its"):
        plan_from_torchrec(torchrec_document(plan, INV), INV, tight)


def _row_plan() -> object:
    """4 ranks as 2 hosts x 2: user.id row_wise (4 blocks of 75), item table_row_wise on host 1, ctx replicated."""
    topo = Topology(num_devices=4, memory_per_device_gb=1.0, devices_per_host=2)
    return make_plan(
        INV,
        topo,
        {"keys": 0},
        "hand",
        data_parallel=["ctx"],
        row_shards={"user.id": row_shards_for(300, [0, 1, 2, 3]), "item": row_shards_for(500, [2, 3])},
    )


def test_row_wise_table_row_wise_and_data_parallel_export_as_torchrecs_own_generators(tmp_path: Path) -> None:
    from torchrec.distributed.sharding_plan import (
        construct_module_sharding_plan,
        data_parallel,
        row_wise,
        table_row_wise,
        table_wise,
    )

    plan = _row_plan()
    doc = read_torchrec_plan(save_torchrec_plan(torchrec_document(plan, INV), tmp_path / "tr.json"))
    assert doc.local_world_size == 2 and doc.tables["item"].sharding_type == "table_row_wise"
    assert doc.tables["ctx"].model_dump(exclude_none=True) == {
        "sharding_type": "data_parallel",
        "compute_kernel": "dense",
        "ranks": (0, 1, 2, 3),
        "num_embeddings": 40,
        "embedding_dim": 8,
    }
    ebc = build_ebc(INV)
    ours = load_sharding_plan(tmp_path / "tr.json", ebc).plan[""]
    theirs = construct_module_sharding_plan(
        ebc,
        {
            "user_id": row_wise(compute_kernel="fused"),
            "item": table_row_wise(host_index=1),
            "ctx": data_parallel(),
            "keys_table": table_wise(rank=0, compute_kernel="fused"),
        },
        local_size=2,
        world_size=4,
        device_type="cpu",
    )
    for name in ("user_id", "item", "ctx", "keys_table"):
        assert ours[name].sharding_type == theirs[name].sharding_type
        assert list(ours[name].ranks) == list(theirs[name].ranks)
        if ours[name].sharding_spec is not None:
            assert _shards(ours[name]) == _shards(theirs[name])
    assert ours["ctx"].compute_kernel == "dense" and ours["item"].compute_kernel == "fused"
    # and back: TorchRec's plan read as a file, then as the same dreamshard plan
    from torchrec.distributed.types import ShardingPlan

    again = plan_from_torchrec(ShardingPlan({"": ours}), INV, plan.topology)
    assert (again.placement, again.row_shards, again.data_parallel) == (
        plan.placement,
        plan.row_shards,
        plan.data_parallel,
    )
    assert again.sharding_types() == plan.sharding_types()


def test_row_layouts_dreamshard_cannot_hold_are_one_line_errors_naming_the_table(tmp_path: Path) -> None:
    from torchrec.distributed.sharding_plan import construct_module_sharding_plan, row_wise, table_wise
    from torchrec.distributed.types import ShardingPlan

    tiny = Inventory(
        name="tiny",
        tables=(
            Table(name="few", num_embeddings=5, embedding_dim=8, pooling_factor=1.0),
            Table(name="other", num_embeddings=50, embedding_dim=8, pooling_factor=1.0),
        ),
    )
    ebc = build_ebc(tiny)
    sp = ShardingPlan(
        {
            "": construct_module_sharding_plan(
                ebc, {"few": row_wise(), "other": table_wise(rank=0)}, local_size=4, world_size=4, device_type="cpu"
            )
        }
    )
    with pytest.raises(
        PlanError, match="table 'few' is row_wise in the TorchRec plan with an empty row block on rank 3"
    ):
        document_from_sharding_plan(sp, 4)
    topo4 = Topology(num_devices=4, memory_per_device_gb=1.0, devices_per_host=2)
    sp = ShardingPlan({"": sharding_plan(torchrec_document(_row_plan(), INV), build_ebc(INV)).plan[""]})
    sp.plan[""]["user_id"].sharding_type = "grid_shard"  # type: ignore[index]  # a type dreamshard cannot hold
    with pytest.raises(PlanError, match="table 'user.id' is grid_shard in the TorchRec plan; dreamshard plans express"):
        plan_from_torchrec(sp, INV, topo4)
    doc = torchrec_document(_row_plan(), INV)
    uneven = doc.tables["user.id"].model_copy(update={"row_ranges": ((0, 100), (100, 150), (150, 225), (225, 300))})
    bad = doc.model_dump(mode="json", exclude_none=True)
    bad["tables"]["user.id"] = uneven.model_dump(mode="json", exclude_none=True)
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(PlanError, match=r"row shards of table 'user.id' are \[\(0, 100\).*as TorchRec cuts them\)$"):
        read_torchrec_plan(tmp_path / "bad.json")
    with pytest.raises(PlanError, match="table 'item' is table_row_wise over hosts of 2 ranks, but local_size is 4"):
        sharding_plan(doc, build_ebc(INV), local_size=4)
    with pytest.raises(PlanError, match="table 'item' is 500x32 in the plan but 400x32 in the module"):
        sharding_plan(doc, build_ebc(INV, rows={"item": 400}))
    with pytest.raises(PlanError, match="table 'item' is table_row_wise over hosts of 2 ranks, but the topology has 4"):
        plan_from_torchrec(doc, INV, topo4.model_copy(update={"devices_per_host": None}))


def test_missing_torchrec_is_one_line_and_the_file_side_still_works(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "torchrec.distributed.sharding_plan", None)  # import now fails
    plan = _split_plan()
    path = save_torchrec_plan(torchrec_document(plan, INV), tmp_path / "tr.json")  # no torchrec needed
    assert plan_from_torchrec(path, INV, TOPO).column_shards == plan.column_shards
    with pytest.raises(MissingDependencyError, match="pip install torchrec") as ei:
        load_sharding_plan(path, [])
    assert isinstance(ei.value, DreamshardError) and "\n" not in str(ei.value)


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as e:
        main(argv)
    out, err = capsys.readouterr()
    return int(e.value.code or 0), out, err


def test_cli_torchrec_out_loads_into_a_sharding_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dreamshard.documents import save_inventory

    inv_path = save_inventory(INV, tmp_path / "inv.yaml")
    code, _, err = _cli(
        [
            "plan",
            "-i",
            str(inv_path),
            "-d",
            "3",
            "-m",
            "1",
            "-s",
            "size_greedy",
            "-o",
            str(tmp_path / "plan.json"),
            "--torchrec-out",
            str(tmp_path / "tr.json"),
            "--torchrec-kernel",
            "dense",
        ],
        capsys,
    )
    assert code == 0, err
    plan = load_plan(tmp_path / "plan.json")
    sp = load_sharding_plan(tmp_path / "tr.json", build_ebc(INV))
    assert {t: (ps.ranks, ps.compute_kernel) for t, ps in sp.plan[""].items()} == {
        torchrec_table_name(t): ([d], "dense") for t, d in plan.placement.items()
    }

    code, out, err = _cli(
        [
            "plan",
            "-i",
            str(inv_path),
            "-d",
            "3",
            "-m",
            "1",
            "-s",
            "size_greedy",
            "-o",
            str(tmp_path / "p2.json"),
            "--torchrec-out",
            str(tmp_path / "tr2.json"),
            "--torchrec-kernel",
            "fast",
        ],
        capsys,
    )
    assert code == 2 and err.count("\n") == 1 and "unknown TorchRec compute kernel 'fast'" in err
    assert not (tmp_path / "p2.json").exists() and not (tmp_path / "tr2.json").exists()
    args = ["plan", "-i", str(inv_path), "-d", "3", "-m", "1", "-s", "size_greedy", "-o", str(tmp_path / "p3.json")]
    code, out, err = _cli([*args, "--torchrec-kernel", "dense"], capsys)  # a kernel for a file not asked for
    assert code == 2 and "--torchrec-kernel dense needs --torchrec-out" in err and not (tmp_path / "p3.json").exists()


def test_cli_torchrec_export_and_import(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dreamshard.documents import save_inventory, save_plan

    plan = _split_plan()
    inv_path, plan_path = save_inventory(INV, tmp_path / "inv.yaml"), save_plan(plan, tmp_path / "plan.json")
    tr = tmp_path / "tr.json"
    code, out, err = _cli(["torchrec", "export", str(plan_path), "-i", str(inv_path), "-o", str(tr)], capsys)
    assert code == 0, err
    assert "4 tables (2 column-wise) on 3 ranks" in out and read_torchrec_plan(tr) == torchrec_document(plan, INV)
    back = tmp_path / "back.json"
    code, _, err = _cli(["torchrec", "import", str(tr), "-i", str(inv_path), "-m", "1", "-o", str(back)], capsys)
    assert code == 0, err
    again = load_plan(back)
    assert (again.placement, again.column_shards, again.sharder, again.topology) == (
        plan.placement,
        plan.column_shards,
        "hand",
        plan.topology,
    )

    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(plan.to_torchrec()))
    code, _, err = _cli(
        ["torchrec", "import", str(bare), "-i", str(inv_path), "-m", "1", "-o", str(tmp_path / "b.json")], capsys
    )
    assert code == 2 and "without a world size" in err and err.count("\n") == 1 and not (tmp_path / "b.json").exists()
    code, _, err = _cli(
        ["torchrec", "import", str(bare), "-i", str(inv_path), "-m", "1", "-d", "3", "-o", str(tmp_path / "b.json")],
        capsys,
    )
    assert code == 0 and load_plan(tmp_path / "b.json").column_shards == plan.column_shards
    code, _, err = _cli(
        ["torchrec", "import", str(tr), "-i", str(inv_path), "-m", "0.000001", "-o", str(tmp_path / "c.json")], capsys
    )
    assert code == 2 and "PlanError" in err and "over its" in err and not (tmp_path / "c.json").exists()


@pytest.mark.parametrize("which", ["plan", "inventory"])
def test_cli_torchrec_export_and_import_never_overwrite_an_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], which: str
) -> None:
    from dreamshard.documents import save_inventory, save_plan

    plan = _split_plan()
    inv_path, plan_path = save_inventory(INV, tmp_path / "inv.yaml"), save_plan(plan, tmp_path / "plan.json")
    before = {p: p.read_bytes() for p in (inv_path, plan_path)}
    target = plan_path if which == "plan" else inv_path
    code, _, err = _cli(["torchrec", "export", str(plan_path), "-i", str(inv_path), "-o", str(target)], capsys)
    assert code == 2 and "same file" in err and err.count("\n") == 1
    tr = tmp_path / "tr.json"
    assert _cli(["torchrec", "export", str(plan_path), "-i", str(inv_path), "-o", str(tr)], capsys)[0] == 0
    before[tr] = tr.read_bytes()
    for target in (tr, inv_path):
        code, _, err = _cli(["torchrec", "import", str(tr), "-i", str(inv_path), "-m", "1", "-o", str(target)], capsys)
        assert code == 2 and "same file" in err and err.count("\n") == 1
    assert {p: p.read_bytes() for p in before} == before
