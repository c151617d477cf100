"""The `torchrec` baseline asks TorchRec's planner about sequence tables as an EmbeddingCollection (its
EmbeddingCollectionSharder) and about pooled ones as an EmbeddingBagCollection, and its plan maps back onto every
table of a model holding both kinds (real torchrec, meta tensors, no GPU). Where its plan breaks a constraint
TorchRec cannot be asked (a device pin), `plan --sharder torchrec` refuses it in one line and `compare` reports its
row as breaking the constraint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dreamshard.cli.app import main
from dreamshard.documents import load_inventory, save_inventory
from dreamshard.errors import BrokenConstraintError
from dreamshard.evaluation import load_comparison
from dreamshard.integrations.torchrec import sharding_plan
from dreamshard.integrations.torchrec_build import build_model
from dreamshard.sharders import get_sharder
from dreamshard.values import Inventory, Plan, Table, TableConstraints, Topology

pytest.importorskip("torchrec")


def _mixed(history_rows: int) -> Inventory:
    """Three pooled tables and two sequence tables of different dims (two EmbeddingCollections), one of them
    (`history`, dim 4: no column split) `history_rows` long."""
    bags = [
        Table(name=f"bag{i}", num_embeddings=1_000 * (i + 1), embedding_dim=16, pooling_factor=2.0) for i in range(3)
    ]
    seqs = [
        Table(name="history", num_embeddings=history_rows, embedding_dim=4, pooling_factor=5.0, pooled=False),
        Table(name="query", num_embeddings=3_000, embedding_dim=16, pooling_factor=3.0, pooled=False),
    ]
    return Inventory(name="mixed", tables=(*bags, *seqs))


def _maps_back(plan: Plan, inv: Inventory) -> dict[str, set[str]]:
    """{module path: its tables} of TorchRec's ShardingPlan for `build_model(inv)` (an EBC, one EC per dim) from
    `plan`, with both of TorchRec's sharders: each table where its kind puts it, each sharding type one its
    module's sharder offers."""
    # optional dependency: torchrec
    from torchrec.distributed.embedding import EmbeddingCollectionSharder
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder

    sharders = [EmbeddingBagCollectionSharder(), EmbeddingCollectionSharder()]
    sp = sharding_plan(plan, build_model(inv), inventory=inv, sharders=sharders)  # type: ignore[arg-type]
    return {path: set(module_plan) for path, module_plan in sp.plan.items()}  # type: ignore[arg-type]


def test_a_sequence_table_larger_than_a_cpu_device_is_row_sharded_by_the_ec_sharder() -> None:
    """On CPU TorchRec's EmbeddingBagCollectionSharder offers no row_wise, its EmbeddingCollectionSharder does: a
    0.75 GB dim-4 sequence table on 4 x 0.5 GB (no column split, fits no device) is planned only when TorchRec is
    asked about it as an EmbeddingCollection."""
    inv = _mixed(50_000_000)
    topo = Topology(num_devices=4, memory_per_device_gb=0.5)
    plan = get_sharder("torchrec").shard(inv, topo)
    assert plan.sharding_type("history") == "row_wise" and len(plan.row_shards["history"]) == 4
    assert set(plan.table_names) == set(inv.table_names)
    assert _maps_back(plan, inv) == {"ebc": {"bag0", "bag1", "bag2"}, "ec_4": {"history"}, "ec_16": {"query"}}


def test_a_mixed_inventory_on_two_cuda_hosts_maps_back_onto_both_module_kinds() -> None:
    """On 2 hosts x 2 cuda devices TorchRec may cut a pooled table larger than a device table_row_wise, a sequence
    table it must not (its EmbeddingCollectionSharder has no table_row_wise): every table is planned, by the
    sharder of its kind, and the plan loads onto the model with both sharders."""
    inv = _mixed(50_000_000)
    huge_bag = Table(name="huge_bag", num_embeddings=50_000_000, embedding_dim=4, pooling_factor=1.0)
    inv = inv.model_copy(update={"tables": (*inv.tables, huge_bag)})
    topo = Topology(num_devices=4, memory_per_device_gb=0.5, device_type="cuda", devices_per_host=2)
    plan = get_sharder("torchrec").shard(inv, topo)
    assert set(plan.table_names) == set(inv.table_names)
    assert plan.sharding_type("huge_bag") in ("row_wise", "table_row_wise")
    assert plan.sharding_type("history") == "row_wise"
    modules = _maps_back(plan, inv)
    assert modules["ec_4"] == {"history"} and modules["ec_16"] == {"query"}
    assert modules["ebc"] == {t.name for t in inv.tables if t.pooled}


# ------------------------------------------------------------- a constraint TorchRec cannot be asked (a device pin)


def _pinned(tmp_path: Path) -> Path:
    """An inventory whose hot table is pinned to device 3: TorchRec's planner, which cannot be asked a pin, puts it
    on device 0."""
    hot = Table(
        name="hot",
        num_embeddings=50_000,
        embedding_dim=64,
        pooling_factor=40.0,
        constraints=TableConstraints(devices=(3,)),
    )
    rest = [
        Table(name=f"t{i}", num_embeddings=20_000 * (i + 1), embedding_dim=16, pooling_factor=2.0) for i in range(7)
    ]
    return save_inventory(Inventory(name="pinned", tables=(hot, *rest)), tmp_path / "inv.yaml")


def _run(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as e:
        main(argv)
    return int(e.value.code or 0)


def test_plan_with_the_torchrec_sharder_refuses_a_plan_breaking_a_pin_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inv = _pinned(tmp_path)
    with pytest.raises(BrokenConstraintError) as err:
        get_sharder("torchrec").shard(load_inventory(inv), Topology(num_devices=4, memory_per_device_gb=1.0))
    assert (err.value.table, err.value.constraint) == ("hot", "devices [3]: the plan puts it on device 0")
    argv = ["plan", "-i", str(inv), "-d", "4", "-m", "1", "-s", "torchrec", "-o", str(tmp_path / "p.json")]
    assert _run(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "table 'hot' breaks its constraint devices [3]" in lines[0], lines
    assert "cannot express devices" in lines[0] and not (tmp_path / "p.json").exists()


def test_compare_measures_torchrec_with_the_pin_dropped_in_a_row_that_says_it_breaks_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """compare plans with every sharder: TorchRec's planner, asked what it can express (the pin dropped), is measured
    as it is in a row that names the constraint its plan breaks (JSON, summary, markdown, the CLI's table), never
    a contender or a baseline; the others are measured and honour the pin; the comparison is not refused."""
    inv = _pinned(tmp_path)
    out, md, summary = tmp_path / "c.json", tmp_path / "c.md", tmp_path / "s.json"
    argv = ["compare", "-i", str(inv), "-d", "4", "-m", "1", "--sharders", "torchrec,size_greedy,round_robin"]
    argv += ["--backend", "simulator", "--rounds", "2", "--out", str(out), "--markdown-out", str(md)]
    assert _run([*argv, "--summary-out", str(summary)]) == 0
    printed = capsys.readouterr().out
    cmp = load_comparison(out)
    why = "table 'hot' devices [3]: the plan puts it on device 0"
    assert cmp.breaks_constraints == {"torchrec": why} and "torchrec" not in cmp.infeasible
    assert {r.sharder for r in cmp.results} == {"size_greedy", "round_robin"} and "torchrec" not in cmp.baselines()
    assert all(r.plan.placement["hot"] == 3 for r in cmp.results)
    [tr] = cmp.broken_results
    assert tr.sharder == "torchrec" and tr.plan.placement["hot"] == 0 and len(tr.samples_ms) == cmp.rounds == 2
    best = min(r.overall_ms for r in cmp.results)
    assert tr.overall_ms > 0 and tr.ratio_to_best == pytest.approx(tr.overall_ms / best)
    assert f"| torchrec (breaks: {why}) | {tr.overall_ms:.3f} |" in md.read_text()
    data = json.loads(summary.read_text())
    assert data["breaks_constraints"] == {"torchrec": why} and data["broken_measured"]["torchrec"]["overall_ms"] > 0
    assert "torchrec (breaks:" in printed and "table 'hot'" in printed and f"{tr.overall_ms:.3f}" in printed


def test_compare_prints_why_a_sharder_cannot_place_the_inventory_in_the_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A sharder that cannot place the inventory gets a row of its own with its reason (the CLI's table and the
    markdown), not only the JSON: here TorchRec's planner, whose estimate adds io buffers to a 1.2 GB table."""
    big = Table(name="big", num_embeddings=5_000_000, embedding_dim=64, pooling_factor=2.0)
    small = [Table(name=f"s{i}", num_embeddings=1000, embedding_dim=16, pooling_factor=1.0) for i in range(2)]
    inv = save_inventory(Inventory(name="tight", tables=(big, *small)), tmp_path / "inv.yaml")
    md = tmp_path / "c.md"
    argv = ["compare", "-i", str(inv), "-d", "2", "-m", "1", "--sharders", "size_greedy,torchrec"]
    assert _run([*argv, "--backend", "simulator", "--rounds", "1", "--markdown-out", str(md)]) == 0
    printed = capsys.readouterr().out  # the table wraps the reason inside its row
    assert "torchrec (cannot place: torchrec planner" in printed and "1.194 GB" in printed
    assert "| torchrec (cannot place: torchrec planner found no plan: it needs 1.194 GB" in md.read_text()
