"""Every plan explained: the stats report's per-unit shares add up to the device totals,
and what-if of a move, an added or a removed table equals re-planning the changed plan's prediction."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dreamshard.cli.app import invoke
from dreamshard.documents import load_inventory, load_plan, save_inventory, save_plan
from dreamshard.errors import PlanError
from dreamshard.evaluation import evaluate_plan
from dreamshard.evaluation.compare import check_plan_for
from dreamshard.explain.report import plan_stats, planning_cost_for
from dreamshard.explain.whatif import parse_added, parse_changes, what_if
from dreamshard.inventory.synth import synth_inventory
from dreamshard.learning.model_store import load_model
from dreamshard.learning.planning_cost import predict_plan
from dreamshard.profiling import make_oracle
from dreamshard.sharders import get_sharder
from dreamshard.values import Inventory, Table, TableConstraints, Topology

TOPO = Topology(num_devices=3, memory_per_device_gb=2.0)


@pytest.fixture(scope="module")
def world() -> tuple[Inventory, object]:
    inv = synth_inventory(12, 0, name="inv")
    return inv, get_sharder("dim_greedy").shard(inv, TOPO)


def test_stats_shares_add_up_to_the_device_totals_predicted_and_measured(world: tuple[Inventory, object]) -> None:
    inv, plan = world
    measured = evaluate_plan(inv, plan, make_oracle("simulator"))  # type: ignore[arg-type]
    stats = plan_stats(inv, measured, planning_cost_for(None, TOPO))
    assert stats.basis == "measured" and sorted(t.rank for t in stats.tables) == list(range(1, 13))
    for d in stats.devices:
        mine = [t for t in stats.tables if t.device == d.device]
        assert sum(t.predicted_ms for t in mine) == pytest.approx(d.predicted_ms)
        assert sum(t.measured_ms or 0.0 for t in mine) == pytest.approx(d.measured_ms)
        assert d.units == len(mine)
    b = next(d for d in stats.devices if d.bottleneck)
    assert b.measured_ms == max(d.measured_ms or 0 for d in stats.devices)
    assert set(stats.critical) == {t.unit for t in stats.tables if t.device == b.device}
    assert stats.imbalance >= 1.0


def test_what_if_of_a_move_equals_the_moved_plans_prediction(world: tuple[Inventory, object]) -> None:
    inv, plan = world
    unit, dev = next(iter(plan.placement.items()))  # type: ignore[attr-defined]
    to = (dev + 1) % TOPO.num_devices
    moves, swaps = parse_changes([f"{unit}:{to}"], [])
    result = what_if(inv, plan, planning_cost_for(None, TOPO), moves, swaps)  # type: ignore[arg-type]
    assert result.plan.placement[unit] == to
    again = predict_plan(load_model(None, require_policy=False), inv, result.plan)
    assert [d.total for d in result.after.per_device] == pytest.approx([d.total for d in again.per_device])
    before = predict_plan(load_model(None, require_policy=False), inv, plan)
    assert result.before.overall_ms == pytest.approx(before.overall_ms)


def test_what_if_refuses_bad_changes_in_one_line(world: tuple[Inventory, object]) -> None:
    inv, plan = world
    cost = planning_cost_for(None, TOPO)
    for moves, swaps, match in (
        (["nope:1"], [], "not a unit"),
        ([f"{inv.tables[0].name}:9"], [], "out of range"),
        (["t0000"], [], "UNIT:DEVICE"),
        ([], ["a"], "A,B"),
    ):
        with pytest.raises(PlanError, match=match):
            what_if(inv, plan, cost, *parse_changes(moves, swaps))  # type: ignore[arg-type]


def test_whatif_and_stats_commands(tmp_path: Path, world: tuple[Inventory, object]) -> None:
    inv, plan = world
    save_inventory(inv, tmp_path / "inv.yaml")
    save_plan(plan, tmp_path / "plan.json")  # type: ignore[arg-type]
    a, b = inv.tables[0].name, inv.tables[1].name
    code, out, err = invoke(
        [
            "whatif",
            str(tmp_path / "plan.json"),
            "-i",
            str(tmp_path / "inv.yaml"),
            "--swap",
            f"{a},{b}",
            "--measure",
            "--backend",
            "simulator",
            "-o",
            str(tmp_path / "w.json"),
        ]
    )
    assert code == 0, err
    assert "predicted" in out and "measured on simulator" in out
    changed = load_plan(tmp_path / "w.json")
    assert changed.placement[a] == plan.placement[b] and changed.measured is not None  # type: ignore[attr-defined]
    code, _, err = invoke(
        [
            "whatif",
            str(tmp_path / "plan.json"),
            "-i",
            str(tmp_path / "inv.yaml"),
            "--move",
            "zz:1",
            "-o",
            str(tmp_path / "x.json"),
        ]
    )
    assert code == 2 and len(err.strip().splitlines()) == 1 and not (tmp_path / "x.json").exists()
    code, out, err = invoke(
        [
            "plan",
            "-i",
            str(tmp_path / "inv.yaml"),
            "-d",
            "3",
            "-m",
            "2",
            "-s",
            "lookup_greedy",
            "--stats",
            "-o",
            str(tmp_path / "p.json"),
        ]
    )
    assert code == 0 and "costliest" in out and "imbalance" in out, err
    code, out, err = invoke(
        [
            "evaluate",
            "-i",
            str(tmp_path / "inv.yaml"),
            "-p",
            str(tmp_path / "plan.json"),
            "--backend",
            "simulator",
            "--stats",
        ]
    )
    assert code == 0 and "measured ms" in out, err
    assert json.loads((tmp_path / "p.json").read_text())["sharder"] == "lookup_greedy"


def test_stats_of_a_column_split_plan_names_its_shards() -> None:
    inv = Inventory(
        name="big",
        tables=(
            Table(  # narrower shards than TorchRec's 128 only when the table's min_partition allows them
                name="huge",
                num_embeddings=4_000_000,
                embedding_dim=128,
                pooling_factor=2,
                constraints=TableConstraints(min_partition=32),
            ),
            Table(name="a", num_embeddings=1000, embedding_dim=16, pooling_factor=3),
        ),
    )
    topo = Topology(num_devices=4, memory_per_device_gb=1.0)
    plan = get_sharder("dreamshard").shard(inv, topo)
    stats = plan_stats(inv, plan, planning_cost_for(None, topo))
    assert any("@" in t.unit for t in stats.tables) and stats.basis == "predicted"
    assert {t.type for t in stats.tables if t.unit.startswith("huge@")} == {"column_wise"}
    assert next(t for t in stats.tables if t.unit.split("@")[0] == "a").type == plan.sharding_type("a")


def test_each_units_reason_is_its_type_its_memory_or_the_what_if_of_moving_it() -> None:
    """`plan --explain`: a gain reason's delta is exactly what-if's predicted change for that move; row shards and
    replicas are fixed by their type; a unit no other device has room for is held by memory."""
    from dreamshard.explain.reasons import placement_reasons
    from dreamshard.sharders.base import make_plan
    from dreamshard.values import Inventory, Table, Topology
    from dreamshard.values.units import row_shards_for

    inv = Inventory(
        name="r",
        tables=(
            Table(name="big", num_embeddings=400_000, embedding_dim=64, pooling_factor=4.0),  # ~0.1 GB
            Table(name="rows", num_embeddings=40_000, embedding_dim=32, pooling_factor=8.0),
            Table(name="hot", num_embeddings=100, embedding_dim=16, pooling_factor=30.0),
            *(
                Table(name=f"t{i}", num_embeddings=5_000 * (i + 1), embedding_dim=32, pooling_factor=2.0 + i)
                for i in range(5)
            ),
        ),
    )
    topo = Topology(num_devices=2, memory_per_device_gb=0.1)
    plan = make_plan(
        inv,
        topo,
        {"big": 0, "t0": 1, "t1": 1, "t2": 0, "t3": 1, "t4": 1},
        "hand",
        row_shards={"rows": row_shards_for(40_000, [0, 1])},
        data_parallel=("hot",),
    )
    cost = planning_cost_for(None, topo)
    reasons = {r.unit: r for dev in placement_reasons(inv, plan, cost) for r in dev}
    assert reasons["rows@r0:20000"].kind == "fixed" and reasons["hot@dp1"].kind == "fixed"
    assert reasons["big"].kind == "memory"  # 0.1 GB: device 1 has no room left for it
    assert reasons["t0"].kind == "memory"  # device 0 is full to 0.1 GB: not even a small table fits there
    gain = reasons["t2"]
    assert gain.kind == "gain" and gain.alternative == 1
    moved = what_if(inv, plan, cost, {"t2": 1}, [])
    assert gain.delta_ms == pytest.approx(moved.after.overall_ms - moved.before.overall_ms, rel=1e-4, abs=1e-4)


def test_what_if_of_an_added_and_a_removed_table_equals_the_changed_plans_prediction(
    world: tuple[Inventory, object],
) -> None:
    """An added table without a device goes where the predicted maximum is lowest (every device tried by hand);
    with device= it goes there; a removed table's units are gone; the prediction is the changed plan's own."""
    inv, plan = world
    cost = planning_cost_for(None, TOPO)
    model = load_model(None, require_policy=False)
    gone = inv.tables[2].name
    added = parse_added(
        inv, ["name=fresh,rows=200000,dim=64,pooling=25", f"name=copy,like={inv.tables[0].name},device=1"]
    )
    result = what_if(inv, plan, cost, {}, [], added=added, removed=[gone])  # type: ignore[arg-type]
    assert gone not in result.inventory.table_names and gone not in result.plan.placement
    assert result.inventory.name == inv.name and result.inventory.fingerprint() == result.plan.inventory_fingerprint
    assert result.plan.placement["copy"] == 1
    copy = result.inventory.by_name()["copy"]
    assert (
        copy.pooling_factor == inv.tables[0].pooling_factor and copy.access_histogram == inv.tables[0].access_histogram
    )
    again = predict_plan(model, result.inventory, result.plan)
    assert [d.total for d in result.after.per_device] == pytest.approx([d.total for d in again.per_device])
    assert result.before.overall_ms == pytest.approx(predict_plan(model, inv, plan).overall_ms)  # type: ignore[arg-type]
    # the greedy insertion: of every device, the one with the lowest predicted maximum once "fresh" is there
    only = what_if(inv, plan, cost, {}, [], added=parse_added(inv, ["name=fresh,rows=200000,dim=64,pooling=25"]))  # type: ignore[arg-type]
    by_device = []
    for d in range(TOPO.num_devices):
        forced = what_if(
            inv,
            plan,
            cost,
            {},
            [],  # type: ignore[arg-type]
            added=parse_added(inv, [f"name=fresh,rows=200000,dim=64,pooling=25,device={d}"]),
        )
        by_device.append(forced.after.overall_ms)
    assert only.plan.placement["fresh"] == min(range(TOPO.num_devices), key=lambda d: (by_device[d], d))


def test_add_table_from_an_inventory_file_and_bad_specs_in_one_line(
    tmp_path: Path, world: tuple[Inventory, object]
) -> None:
    inv, plan = world
    extra = Inventory(
        name="extra",
        tables=(
            Table(name="n1", num_embeddings=1000, embedding_dim=16, pooling_factor=2),
            Table(name="n2", num_embeddings=5000, embedding_dim=32, pooling_factor=4),
        ),
    )
    save_inventory(extra, tmp_path / "extra.yaml")
    both = what_if(
        inv,
        plan,
        planning_cost_for(None, TOPO),
        {},
        [],  # type: ignore[arg-type]
        added=parse_added(inv, [str(tmp_path / "extra.yaml")]),
    )
    assert {"n1", "n2"} <= set(both.plan.placement) and len(both.inventory.tables) == len(inv.tables) + 2
    first = inv.tables[0].name
    for spec, match in (
        ("name=x,rows=10,dim=6,pooling=1", "dim: .*multiple of 4"),
        ("name=x,rows=1.5,dim=8,pooling=1", "rows '1.5' is not a whole number"),
        ("name=x,rows=5,dim=8,pooling=nan", "pooling 'nan' is not a number"),
        ("name=x,rows=5,dim=8,pooling=-1", "pooling: "),
        ("name=x,rows=5,dim=8,pooling=1,dtype=int3", "dtype: "),
        ("name=x,rows=5,dim=8,pooling=1,foo=2", "unknown key 'foo'"),
        ("name=x,rows=5,rows=6", "'rows' is given twice"),
        ("name=x,rows=5", "'dim', 'pooling' required"),
        ("rows=5,dim=8,pooling=1", "'name' is required"),
        ("name=x,like=nope", "like='nope' is not a table"),
        ("name=x,like=t0001,device=-1", "not a device number"),
        ("no-such-file.yaml", "neither a KEY=VALUE spec"),
    ):
        with pytest.raises(PlanError, match=match):
            parse_added(inv, [spec])
    cost = planning_cost_for(None, TOPO)
    for kw, match in (
        ({"added": parse_added(inv, [f"name={first},rows=5,dim=8,pooling=1"])}, "already in inventory"),
        ({"added": parse_added(inv, ["name=x,rows=5,dim=8,pooling=1,device=7"])}, "out of range"),
        ({"added": parse_added(inv, ["name=x,rows=900000000,dim=512,pooling=1"])}, "no device has room"),
        ({"removed": ["nope"]}, "'nope' is not a table"),
        ({"removed": inv.table_names}, "without tables"),
    ):
        with pytest.raises(PlanError, match=match):
            what_if(inv, plan, cost, {}, [], **kw)  # type: ignore[arg-type]
    with pytest.raises(PlanError, match="not a unit"):
        what_if(inv, plan, cost, {first: 1}, [], removed=[first])  # type: ignore[arg-type]


def test_whatif_add_table_command_writes_the_changed_inventory_with_the_plan(
    tmp_path: Path, world: tuple[Inventory, object]
) -> None:
    inv, plan = world
    save_inventory(inv, tmp_path / "inv.yaml")
    save_plan(plan, tmp_path / "plan.json")  # type: ignore[arg-type]
    base = [
        "whatif",
        str(tmp_path / "plan.json"),
        "-i",
        str(tmp_path / "inv.yaml"),
        "--add-table",
        f"name=new,like={inv.tables[1].name}",
        "--remove-table",
        inv.tables[0].name,
    ]
    code, _, err = invoke([*base, "-o", str(tmp_path / "w.json")])
    assert code == 2 and "--inventory-out" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "w.json").exists()
    code, out, err = invoke(
        [
            *base,
            "--measure",
            "--backend",
            "simulator",
            "--explain",
            "-o",
            str(tmp_path / "w.json"),
            "--inventory-out",
            str(tmp_path / "inv2.yaml"),
        ]
    )
    assert code == 0, err
    assert "add new" in out and f"remove {inv.tables[0].name}" in out and "measured on simulator" in out
    assert "why each unit is on its device" in out
    changed, inv2 = load_plan(tmp_path / "w.json"), load_inventory(tmp_path / "inv2.yaml")
    check_plan_for(inv2, changed)
    assert changed.measured is not None and "new" in changed.placement and inv.tables[0].name not in changed.placement
    code, out, err = invoke([*base, "--measure", "--backend", "simulator", "--explain", "--json"])
    assert code == 0, err
    shown = json.loads(out)
    assert (
        shown["inventory_fingerprint"] == inv2.fingerprint() and shown["placement"]["new"] == changed.placement["new"]
    )
    after = [d[1] for d in shown["predicted"]["per_device_ms"]]
    assert shown["predicted"]["overall_ms"][1] == pytest.approx(max(after))  # the prediction: the bottleneck device
    assert len(shown["measured"]["per_device_ms"]) == TOPO.num_devices and len(shown["reasons"]) == TOPO.num_devices
