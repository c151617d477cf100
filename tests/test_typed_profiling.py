"""The cost model learns every sharding type from measurements: profile kinds that row-shard or replicate, records
of units, training and checks on them (docs/architecture/data-model.md, "Sharding types" and "Learning")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dreamshard.config.learning import CostTrainConfig
from dreamshard.documents import load_measurements
from dreamshard.errors import PlanError, TrainingDataError
from dreamshard.learning.cost_eval import evaluate_cost_net
from dreamshard.learning.cost_samples import to_samples as _to_samples
from dreamshard.learning.features import tables_features
from dreamshard.learning.planning_cost import PlanningCost
from dreamshard.learning.records import check_training_records
from dreamshard.learning.train_cost import train_cost_model
from dreamshard.placement.expand import replica_table, row_shard_table, unit_table, with_units
from dreamshard.placement.validate import check_placement
from dreamshard.profiling import make_oracle, profile_inventory
from dreamshard.profiling.corpus import CorpusEntry, device_key, entry_problem
from dreamshard.profiling.runner import TYPE_KINDS, kind_placement, plan_items
from dreamshard.profiling.settings import ProfileConfig
from dreamshard.sharders import get_sharder
from dreamshard.values import Inventory, Measurement, Table, Topology, parse_unit
from dreamshard.values.units import row_blocks

TOPO = Topology(num_devices=3, memory_per_device_gb=1.0, batch_size=256)


def _inventory(n: int = 8) -> Inventory:
    return Inventory(
        name="pool",
        tables=tuple(
            Table(name=f"t{i}", num_embeddings=1_000 * (i + 1), embedding_dim=(16, 32, 64)[i % 3], pooling_factor=1 + i)
            for i in range(n)
        ),
    )


def _kinds_of(placement: dict[str, int]) -> set[str]:
    return {parse_unit(u).kind for u in placement}


@pytest.mark.parametrize("kind", TYPE_KINDS)
def test_typed_kinds_place_one_table_as_its_type_and_the_rest_whole(kind: str) -> None:
    inv = _inventory()
    p = kind_placement(kind, inv, TOPO, seed=3)
    assert p is not None
    typed = {u: d for u, d in p.items() if parse_unit(u).kind != "table"}
    (table,) = {parse_unit(u).table for u in typed}
    assert {u for u in p if parse_unit(u).kind == "table"} == set(inv.table_names) - {table}
    t = inv.by_name()[table]
    if kind == "row_wise":  # TorchRec's row blocks, block i on device i; one of the 3 largest tables
        assert sorted((parse_unit(u).start, parse_unit(u).end, d) for u, d in typed.items()) == [
            (a, b, i) for i, (a, b) in enumerate(row_blocks(t.num_embeddings, 3))
        ]
        assert table in {"t5", "t6", "t7"} or t.size_bytes >= sorted(x.size_bytes for x in inv.tables)[-3]
    else:  # a replica on every device; one of the smallest third
        assert sorted(typed.values()) == [0, 1, 2] and _kinds_of(typed) == {"replica"}
        assert t.size_bytes <= sorted(x.size_bytes for x in inv.tables)[inv.num_tables // 3 - 1]
    check_placement(with_units(inv, p), p, TOPO)
    assert kind_placement(kind, inv, TOPO, seed=3) == p  # seeded: the same task, the same placement
    assert kind_placement(kind, inv, TOPO.model_copy(update={"num_devices": 1}), seed=3) is None


def test_a_typed_kind_that_does_not_fit_is_skipped() -> None:
    inv = Inventory(
        name="big",
        tables=tuple(
            Table(name=f"b{i}", num_embeddings=2_000_000, embedding_dim=64, pooling_factor=1.0) for i in range(3)
        ),
    )  # 0.48 GB each
    tight = Topology(num_devices=3, memory_per_device_gb=0.7, batch_size=256)
    assert kind_placement("data_parallel", inv, tight, seed=0) is None  # a replica on every device: no room
    assert kind_placement("row_wise", inv, tight, seed=0) is not None  # a third of one table per device fits


def test_profile_measures_units_and_records_keep_the_inventory(tmp_path: Path) -> None:
    inv = _inventory()
    out = tmp_path / "m.jsonl"
    s = profile_inventory(inv, TOPO, 1, out, make_oracle("simulator"), progress=False, kinds=TYPE_KINDS)
    recs = load_measurements(out)
    assert s.placements == 3 and len(recs) == 11
    typed = [r for r in recs if _kinds_of(r.placement) != {"table"}]
    assert len(typed) == 2 and {frozenset(_kinds_of(r.placement)) for r in typed} == {
        frozenset({"table", "row"}),
        frozenset({"table", "replica"}),
    }
    for r in typed:
        assert r.inventory_fingerprint == inv.fingerprint() and r.inventory_name == "pool"
    rows = next(r for r in typed if "row" in _kinds_of(r.placement))
    # every device holds a row block: each reduce-scatters its partial sums (a comm cost on every device)
    assert all(d.fwd_comm > 0 for d in rows.costs.per_device)
    assert check_training_records(recs, inv) == recs


def test_the_oracle_times_a_replica_at_its_share_of_the_batch() -> None:
    inv = _inventory(4)
    oracle = make_oracle("simulator")
    alone = {"t0@dp0": 0, "t0@dp1": 1, "t0@dp2": 2, "t1": 0, "t2": 1, "t3": 2}
    m = oracle.measure(inv, alone, TOPO)
    share = oracle.measure(
        inv.subset(["t0"]), {"t0": 0}, TOPO.model_copy(update={"batch_size": 256 // 3}), kind="single"
    )
    whole = oracle.measure(inv.subset(["t1"]), {"t1": 0}, TOPO, kind="single")
    d0 = m.costs.per_device[0]
    expect = share.costs.per_device[0].fwd_compute + whole.costs.per_device[0].fwd_compute
    assert d0.fwd_compute == pytest.approx(expect, rel=1e-6)
    assert d0.fwd_comm > 0 and d0.bwd_comm > d0.fwd_comm  # the replica's gradient is all-reduced backward


def test_training_features_units_as_planning_does(tmp_path: Path) -> None:
    inv = _inventory()
    out = tmp_path / "m.jsonl"
    profile_inventory(inv, TOPO, 1, out, make_oracle("simulator"), progress=False, kinds=TYPE_KINDS)
    recs = load_measurements(out)
    feats, samples, tables = _to_samples(inv, recs)
    names = [t.name for t in tables]
    assert names[:8] == list(inv.table_names) and len(names) == len(set(names))
    by = {t.name: t for t in tables}
    for r, s in zip(recs, samples, strict=True):
        for name, row in zip(r.placement, s.feat_idx, strict=True):
            ref = parse_unit(name)
            want = {"table": inv.by_name().get(name), "row": None, "replica": None}[ref.kind]
            if ref.kind == "row":
                want = row_shard_table(inv.by_name()[ref.table], ref.start, ref.end)
            elif ref.kind == "replica":
                want = replica_table(inv.by_name()[ref.table], ref.device)
            assert by[name] == want
            batch = 256 / 3 if ref.kind == "replica" else 256.0
            assert feats[row].numpy() == pytest.approx(tables_features([want], batch)[0])
    ens, metrics = train_cost_model(inv, recs, CostTrainConfig(steps=20, ensemble_size=2), progress=False)
    assert metrics.n_train + metrics.n_test == len(recs)
    ev = evaluate_cost_net(ens, inv, recs)  # held-out metrics index the units too (their pooling regimes)
    assert ev["mape_device_total"] is not None and ev["regimes"]
    for r in recs[-2:]:  # what was learned prices the same units as planning sees them
        units = with_units(inv, r.placement)
        costs = PlanningCost(ens, TOPO).predict(list(units.tables), r.placement)
        assert len(costs.per_device) == 3 and costs.overall_ms > 0


def _unit_record(tmp_path: Path) -> tuple[Inventory, list[dict[str, object]]]:
    inv = _inventory()
    out = tmp_path / "m.jsonl"
    profile_inventory(inv, TOPO, 0, out, make_oracle("simulator"), progress=False, kinds=("row_wise",))
    return inv, [json.loads(x) for x in out.read_text().splitlines()]


@pytest.mark.parametrize(
    "bad, needle",
    [
        ("nope@r0:10", "table 'nope@r0:10', which is not in inventory 'pool'"),
        ("t1@r0:999999", "'t1@r0:999999' is not a unit of table 't1' (2000 rows)"),
        ("t1@0:3", "column shard 't1@0:3' is 3 columns wide"),
        ("t0@r0:500", "places table 't0' whole and as unit 't0@r0:500'"),
        ("t1@dp2", "placement['t1@dp2'] = device 0; a replica sits on the device its name says (2)"),
    ],
)
def test_a_record_of_impossible_units_is_refused_naming_the_unit(tmp_path: Path, bad: str, needle: str) -> None:
    inv, raw = _unit_record(tmp_path)
    rec = raw[-1]
    if "@dp" in bad:  # a replica of a table not placed whole
        del rec["placement"][bad.split("@")[0]]  # type: ignore[attr-defined]
    rec["placement"][bad] = 0  # type: ignore[index]
    m = Measurement.model_validate(rec)
    with pytest.raises(TrainingDataError, match="record 1 .*placement") as e:
        check_training_records([m], inv)
    assert needle in str(e.value) and len(str(e.value).splitlines()) == 1


def test_unit_table_refuses_what_is_not_a_unit() -> None:
    tables = _inventory().by_name()
    assert unit_table(tables, "t2@r0:1000").num_embeddings == 1000
    assert unit_table(tables, "t2@0:16").embedding_dim == 16
    for bad in ("zz", "zz@dp0", "t2@r10:99999", "t2@0:128"):
        with pytest.raises(PlanError):
            unit_table(tables, bad)


def test_a_worker_timing_of_units_joins_the_corpus_and_a_forged_one_does_not() -> None:
    inv = _inventory()
    info = make_oracle("simulator").backend_info(256)
    units = [unit_table(inv.by_name(), "t5@r0:2000"), inv.by_name()["t1"]]
    key = device_key(info, 0, units, "hw")
    e = CorpusEntry(
        key=key,
        hardware="hw",
        backend=info.name,
        batch_size=256,
        tables=("t5@r0:2000", "t1"),
        fwd_ms=(1.0,),
        bwd_ms=(2.0,),
        info=info,
        seed=0,
    )
    assert entry_problem(e, inv.by_name()) is None
    forged = e.model_copy(update={"tables": ("t5@r0:2001", "t1")})
    assert "its key is not the key of its tables" in str(entry_problem(forged, inv.by_name()))  # other rows
    stranger = e.model_copy(update={"tables": ("zz@r0:10", "t1")})
    assert "not in the batch's inventory" in str(entry_problem(stranger, inv.by_name()))


def test_the_unrestricted_torchrec_kind_is_measured_as_it_plans() -> None:
    """A sharder whose plan replicates or splits tables used to be refused as a profile kind (PlanError from
    place()); its plan is measured as its units."""
    hot = [Table(name=f"hot{i}", num_embeddings=100, embedding_dim=16, pooling_factor=40.0) for i in range(6)]
    inv = Inventory(
        name="needy",
        tables=tuple(
            hot + [Table(name=f"w{i}", num_embeddings=50_000, embedding_dim=64, pooling_factor=2.0) for i in range(6)]
        ),
    )
    topo = Topology(num_devices=4, memory_per_device_gb=1.0, batch_size=512)
    p = kind_placement("torchrec", inv, topo, seed=0)
    assert p is not None
    plan = get_sharder("torchrec").shard(inv, topo)
    want_kinds = (
        {"table"} | ({"replica"} if plan.data_parallel else set()) | ({"column"} if plan.column_shards else set())
    )
    assert _kinds_of(p) == want_kinds
    check_placement(with_units(inv, p), p, topo)


def test_the_pipeline_profiles_the_typed_kinds_by_default() -> None:
    assert set(TYPE_KINDS) <= set(ProfileConfig().kinds)
    with pytest.raises(ValueError, match="row_wise, data_parallel or a sharder name"):
        ProfileConfig(kinds=("rowwise",))
    items = plan_items(_inventory(), TOPO, 1, "simulator", kinds=ProfileConfig().kinds)
    assert sum(1 for it in items if _kinds_of(it.placement) != {"table"}) == 2


def test_profile_cli_takes_the_kinds_and_refuses_an_unknown_one(tmp_path: Path) -> None:
    from dreamshard.cli.app import invoke
    from dreamshard.documents import save_inventory

    inv = save_inventory(_inventory(), tmp_path / "inv.yaml")
    base = ["profile", "-i", str(inv), "-d", "3", "-m", "1", "-k", "1", "--backend", "simulator", "--no-progress"]
    assert invoke([*base, "--kinds", "row_wise,data_parallel", "-o", str(tmp_path / "a.jsonl")])[0] == 0
    recs = load_measurements(tmp_path / "a.jsonl")
    assert [sorted(_kinds_of(r.placement)) for r in recs if r.kind == "placement"] == [
        ["table"],
        ["row", "table"],
        ["replica", "table"],
    ]
    assert invoke([*base, "--kinds", "", "-o", str(tmp_path / "b.jsonl")])[0] == 0  # none: random placements only
    assert sum(r.kind == "placement" for r in load_measurements(tmp_path / "b.jsonl")) == 1
    code, _, err = invoke([*base, "--kinds", "row_wise,bogus", "-o", str(tmp_path / "c.jsonl")])
    assert code == 2 and "unknown placement kind 'bogus'" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "c.jsonl").exists()
