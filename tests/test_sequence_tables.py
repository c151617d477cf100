"""Sequence embeddings (TorchRec's EmbeddingCollection) end to end: `from-torchrec` on a model with
both module kinds and shared tables, the oracle measuring them unpooled, the costs following lookups, the stats
report, the export under the EC's module path, `load_sharding_plan`, and a 2-rank gloo DMP step on the plan.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn as nn

from dreamshard.cli.app import main
from dreamshard.errors import InventoryError, PlanError
from dreamshard.integrations.torchrec import load_sharding_plan, sharding_plan
from dreamshard.integrations.torchrec_build import build_model
from dreamshard.integrations.torchrec_file import save_torchrec_plan, torchrec_document
from dreamshard.integrations.torchrec_model import inventory_from_module, measure_module
from dreamshard.learning.features import FEATURE_NAMES, table_features
from dreamshard.profiling.embedding_bag_backend import EmbeddingBagBackend
from dreamshard.profiling.fbgemm_backend import FbgemmBackend
from dreamshard.profiling.oracle import make_oracle
from dreamshard.profiling.scaling import CPU_RULE
from dreamshard.sharders import make_plan
from dreamshard.values import ColumnShard, CommModel, Inventory, Table, Topology
from dreamshard.values.units import row_shards_for

pytest.importorskip("torchrec")

HERE = Path(__file__).resolve().parent
B = 32
#: feature -> (rows of its table, mean ids per sample)
FEATURES = {"user": (500, 1.0), "item": (800, 1.0), "last_item": (800, 2.0), "hist": (700, 5.0), "query": (300, 2.0)}


class Both(nn.Module):
    """An EBC (one shared table: item, last_item) and an EC (one shared table: hist and item's ids as a sequence)."""

    def __init__(self, device: str = "cpu") -> None:
        from torchrec.modules.embedding_configs import EmbeddingBagConfig, EmbeddingConfig
        from torchrec.modules.embedding_modules import EmbeddingBagCollection, EmbeddingCollection

        super().__init__()
        dev = torch.device(device)
        self.ebc = EmbeddingBagCollection(
            tables=[
                EmbeddingBagConfig(name="user", num_embeddings=500, embedding_dim=16, feature_names=["user"]),
                EmbeddingBagConfig(
                    name="item_bag", num_embeddings=800, embedding_dim=16, feature_names=["item", "last_item"]
                ),
            ],
            device=dev,
        )
        self.ec = EmbeddingCollection(
            tables=[
                EmbeddingConfig(name="hist", num_embeddings=700, embedding_dim=8, feature_names=["hist", "query"]),
            ],
            device=dev,
        )

    def forward(self, bags: Any, seqs: Any) -> Any:
        pooled = self.ebc(bags).values()
        rows = torch.cat([jt.values() for jt in self.ec(seqs).values()])
        return pooled.pow(2).mean() + rows.pow(2).mean()


def _batches(n: int = 4, seed: int = 0) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    out = []
    rows = {"user": 500, "item": 800, "last_item": 800, "hist": 700, "query": 700}
    for _ in range(n):
        lengths = {f: rng.poisson(mean, B) for f, (_, mean) in FEATURES.items()}
        values = [rng.integers(0, rows[f], int(ln.sum())) for f, ln in lengths.items()]
        out.append(
            {
                "keys": list(FEATURES),
                "values": torch.from_numpy(np.concatenate(values)),
                "lengths": torch.from_numpy(np.concatenate(list(lengths.values()))),
            }
        )
    return out


def _ids_per_sample(batches: list[dict[str, Any]], feature: str) -> float:
    k = list(FEATURES).index(feature)
    return sum(int(b["lengths"][k * B : (k + 1) * B].sum()) for b in batches) / (len(batches) * B)


def test_from_torchrec_writes_both_module_kinds_with_shared_tables() -> None:
    data = _batches()
    inv = inventory_from_module(Both(), data, B, planned_batch_size=4 * B, name="both")
    by = inv.by_name()
    assert inv.table_names == ["user", "item_bag", "hist"]
    assert by["user"].pooled and by["item_bag"].pooled and not by["hist"].pooled
    hist = by["hist"]
    assert hist.feature_names == ("hist", "query") and hist.num_outputs == 2
    for f in hist.features:  # ids per sample of each sequence feature, as the batches carry them
        assert f.pooling_factor == pytest.approx(_ids_per_sample(data, f.name))
    assert hist.output_elements_per_sample == pytest.approx(8 * hist.pooling_factor)  # one row per id
    assert by["item_bag"].output_elements_per_sample == 32  # pooled: dim x features
    assert Inventory.model_validate(json.loads(json.dumps(inv.model_dump(mode="json")))) == inv
    assert "pooled" not in inv.tables[0].model_dump(mode="json") and inv.tables[2].model_dump()["pooled"] is False


def test_nothing_is_dropped_silently() -> None:
    from torchrec.modules.embedding_configs import EmbeddingBagConfig
    from torchrec.modules.embedding_modules import EmbeddingBagCollection
    from torchrec.modules.feature_processor_ import PositionWeightedModuleCollection
    from torchrec.modules.fp_embedding_modules import FeatureProcessedEmbeddingBagCollection

    model = Both()
    model.extra = nn.EmbeddingBag(40, 4)
    _, notes = measure_module(model, _batches(2), B)
    assert notes == [
        "module 'extra' is a plain EmbeddingBag (40x4): not a TorchRec module, so it stays dense (replicated) "
        "and is not in the inventory"
    ]
    model = Both()
    ebc = EmbeddingBagCollection(
        tables=[EmbeddingBagConfig(name="pos", num_embeddings=10, embedding_dim=4, feature_names=["pos"])],
        is_weighted=True,
    )
    model.fp = FeatureProcessedEmbeddingBagCollection(ebc, PositionWeightedModuleCollection({"pos": 8}))
    with pytest.raises(InventoryError, match=r"^module 'fp' is a FeatureProcessedEmbeddingBagCollection, which"):
        measure_module(model, _batches(2), B)


def test_cli_from_torchrec_counts_sequence_tables(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dreamshard.documents import load_inventory

    torch.save(_batches(), tmp_path / "b.pt")
    out = tmp_path / "inv.yaml"
    args = ["inventory", "from-torchrec", "--model", "test_sequence_tables:Both", "--batches", str(tmp_path / "b.pt")]
    try:
        main([*args, "--batch-size", str(B), "-o", str(out)])
    except SystemExit as e:
        assert not e.code, capsys.readouterr().err
    assert "3 tables" in capsys.readouterr().out.replace("\n", " ")
    inv = load_inventory(out)
    assert [t.pooled for t in inv.tables] == [True, True, False]


def _sequence(name: str = "seq", dim: int = 8, ids: float = 3.0) -> Table:
    return Table(name=name, num_embeddings=600, embedding_dim=dim, pooling_factor=ids, pooled=False)


@pytest.mark.parametrize("backend", [FbgemmBackend, EmbeddingBagBackend])
def test_the_backends_run_sequence_tables_without_pooling(backend: type) -> None:
    """A device with a pooled and two sequence tables runs a pooled operator and one unpooled per width; the
    unpooled one outputs one row per looked-up id."""
    be = backend("cpu", "cpu", CPU_RULE)
    tables = [
        Table(name="bag", num_embeddings=400, embedding_dim=16, pooling_factor=2.0),
        _sequence("s8", 8, 3.0),
        _sequence("s4", 4, 2.0),
    ]
    rows = [400, 600, 600]
    per_table = [be.bank.batches(t, r, 64, 2) for t, r in zip(tables, rows, strict=True)]
    op = be.build_device(tables, rows, per_table)
    outs = op.forward(0)
    assert len(outs) == 3  # the bag operator, then one per sequence width
    ids = [int(per_table[k][0][0].size) for k in (1, 2)]
    if backend is FbgemmBackend:  # TBE without pooling: (ids, dim); the bag operator: (batch, dims of its bags)
        assert tuple(outs[0].shape) == (64, 16)
        assert [tuple(o.shape) for o in outs[1:]] == [(ids[0], 8), (ids[1], 4)]
    else:
        assert [tuple(o.shape) for o in outs[1:]] == [(ids[0], 8), (ids[1], 4)]
    op.backward(outs)
    timing = be.time_device(tables, 64, 0, 1)
    assert len(timing.fwd_ms) == 1 and timing.fwd_ms[0] > 0 and timing.bwd_ms[0] > 0


def test_costs_follow_lookups_not_bags() -> None:
    pooled = Table(name="bag", num_embeddings=600, embedding_dim=8, pooling_factor=3.0)
    seq = _sequence("seq", 8, 3.0)
    fp, fs = table_features(pooled), table_features(seq)
    differ = [i for i in range(len(fp)) if fp[i] != fs[i]]
    assert differ == [FEATURE_NAMES.index("dim_linear")]  # the output width, alone
    assert fs[differ[0]] == pytest.approx(3 * fp[differ[0]])  # dim x 3 ids vs dim x 1 bag
    oracle = make_oracle("cpu", warmup=0, repeats=1)
    oracle.set_comm_model(2, CommModel(alpha_ms=0.0, beta_ms_per_mb=1.0, backend="gloo", world_size=2))
    topo = Topology(num_devices=2, memory_per_device_gb=1.0, batch_size=64)
    m = oracle.measure(Inventory(name="x", tables=(pooled, seq)), {"bag": 0, "seq": 1}, topo)
    assert m.costs.per_device[0].fwd_comm == pytest.approx(64 * 8 * 4 / 2 / 1e6)
    assert m.costs.per_device[1].fwd_comm == pytest.approx(64 * 8 * 3 * 4 / 2 / 1e6)


def test_stats_report_marks_sequence_tables() -> None:
    from dreamshard.explain.report import plan_stats, planning_cost_for, stats_markdown

    inv = Inventory(
        name="x", tables=(Table(name="bag", num_embeddings=600, embedding_dim=8, pooling_factor=3.0), _sequence())
    )
    topo = Topology(num_devices=1, memory_per_device_gb=1.0, batch_size=64)
    plan = make_plan(inv, topo, {"bag": 0, "seq": 0}, "hand")
    stats = plan_stats(inv, plan, planning_cost_for(None, topo))
    by = {t.unit: t for t in stats.tables}
    assert by["seq"].pooled is False and by["bag"].pooled
    assert stats.devices[0].output_mb == pytest.approx(64 * (8 + 8 * 3) * 4 / 1e6)
    assert "table_wise (sequence)" in stats_markdown(stats)


# ------------------------------------------------------------------------------------------------ the export


def _inventory() -> Inventory:
    return inventory_from_module(Both(), _batches(), B, name="both")


def test_export_puts_ec_tables_under_the_ec_module(tmp_path: Path) -> None:
    inv = _inventory()
    topo = Topology(num_devices=2, memory_per_device_gb=1.0, batch_size=64)
    plan = make_plan(inv, topo, {"user": 0, "item_bag": 1, "hist": 1}, "hand")
    save_torchrec_plan(torchrec_document(plan, inv), tmp_path / "tr.json")
    sp = load_sharding_plan(tmp_path / "tr.json", Both("meta"), world_size=2)
    assert set(sp.plan) == {"ebc", "ec"}
    assert {t: ps.ranks for t, ps in sp.plan["ec"].items()} == {"hist": [1]}  # type: ignore[union-attr]
    assert {t: ps.ranks for t, ps in sp.plan["ebc"].items()} == {"user": [0], "item_bag": [1]}  # type: ignore[union-attr]
    # an EmbeddingCollection shards no table_row_wise: the planner refuses it, and so does the export of a file
    # that asks it (here: made for the same tables with hist pooled)
    hosts = topo.model_copy(update={"devices_per_host": 1})
    with pytest.raises(PlanError, match=r"^table 'hist' is a sequence table: .* table_row_wise"):
        make_plan(inv, hosts, {"user": 0, "item_bag": 1}, "hand", row_shards={"hist": row_shards_for(700, [1])})
    bags = inv.model_copy(update={"tables": tuple(t.model_copy(update={"pooled": True}) for t in inv.tables)})
    twrw = make_plan(bags, hosts, {"user": 0, "item_bag": 1}, "hand", row_shards={"hist": row_shards_for(700, [1])})
    with pytest.raises(PlanError, match=r"^table 'hist' of module 'ec' is table_row_wise in the plan, but"):
        sharding_plan(torchrec_document(twrw, bags), Both("meta"), 2, local_size=1)


def test_build_model_holds_both_kinds() -> None:
    inv = _inventory()
    model = build_model(inv)
    assert set(model.keys()) == {"ebc", "ec_8"}
    plan = make_plan(inv, Topology(num_devices=2, memory_per_device_gb=1.0), {"user": 0, "item_bag": 1, "hist": 0}, "x")
    assert set(sharding_plan(plan, model, inventory=inv).plan) == {"ebc", "ec_8"}


# --------------------------------------------------------------------------------------- 2 gloo ranks, DMP


def _rank_main(argv: list[str]) -> None:
    """One rank (started as ``python -c``): DMP of `Both` on the plan file, one training step; reports the shards
    this rank holds per table, whether training changed them and the loss."""
    import datetime

    import torch.distributed as dist
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from torchrec.distributed.embedding import EmbeddingCollectionSharder
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.model_parallel import DistributedModelParallel
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    plan_file, port, rank, out = argv[0], int(argv[1]), int(argv[2]), Path(argv[3])
    timeout = datetime.timedelta(seconds=120)
    store = dist.TCPStore("127.0.0.1", port, 3, is_master=False, timeout=timeout)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=2, timeout=timeout)
    fused = {"optimizer": EmbOptimType.EXACT_SGD, "learning_rate": 0.1}
    sharders: list[Any] = [
        EmbeddingBagCollectionSharder(fused_params=fused),
        EmbeddingCollectionSharder(fused_params=fused),
    ]
    plan = load_sharding_plan(plan_file, Both("meta"), world_size=2, sharders=sharders)
    model = DistributedModelParallel(Both("meta"), device=torch.device("cpu"), plan=plan, sharders=sharders)

    def held() -> dict[str, list[tuple[list[int], float]]]:
        boxes: dict[str, list[tuple[list[int], float]]] = {}
        for key, value in model.state_dict().items():
            name = key.split(".")[-2]
            for sh in getattr(value, "local_shards", lambda: [])():
                boxes.setdefault(name, []).append((list(sh.metadata.shard_offsets), float(sh.tensor.abs().sum())))
        return boxes

    before = held()
    batch = _batches(1, seed=rank)[0]
    kjt = KeyedJaggedTensor.from_lengths_sync(**batch)
    feats = kjt.to_dict()
    bags = KeyedJaggedTensor.from_jt_dict({k: feats[k] for k in ("user", "item", "last_item")})
    seqs = KeyedJaggedTensor.from_jt_dict({k: feats[k] for k in ("hist", "query")})
    loss = model(bags, seqs)
    loss.backward()
    after = held()
    report = {
        "loss": float(loss),
        "shards": {t: [box for box, _ in v] for t, v in before.items()},
        "changed": {t: [a[1] != b[1] for a, b in zip(after[t], v, strict=True)] for t, v in before.items()},
    }
    out.write_text(json.dumps(report))
    dist.destroy_process_group()


def test_dmp_trains_a_model_with_both_kinds_on_two_gloo_ranks(tmp_path: Path) -> None:
    """Hist (sequence) row-wise over both ranks, user table-wise on 0, item_bag column-wise: each rank holds what
    the plan says, the loss is finite and the step changed every shard."""
    import datetime

    import torch.distributed as dist

    inv = _inventory()
    topo = Topology(num_devices=2, memory_per_device_gb=1.0, batch_size=64)
    plan = make_plan(
        inv,
        topo,
        {"user": 0},
        "hand",
        column_shards={"item_bag": (ColumnShard(start=0, end=8, device=1), ColumnShard(start=8, end=16, device=0))},
        row_shards={"hist": row_shards_for(700, [0, 1])},
    )
    save_torchrec_plan(torchrec_document(plan, inv), tmp_path / "tr.json")
    store = dist.TCPStore("127.0.0.1", 0, 3, is_master=True, wait_for_workers=False, timeout=datetime.timedelta(60))
    code = "import sys; sys.path.insert(0, sys.argv[1]); import test_sequence_tables as t; t._rank_main(sys.argv[2:])"
    reports = [tmp_path / f"r{r}.json" for r in (0, 1)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore", "GLOO_SOCKET_IFNAME": "lo"}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                code,
                str(HERE),
                str(tmp_path / "tr.json"),
                str(store.port),
                str(r),
                str(tmp_path / f"r{r}.json"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
        )
        for r in (0, 1)
    ]
    logs = [p.communicate(timeout=240)[0].decode(errors="replace") for p in procs]
    assert all(p.returncode == 0 for p in procs), logs[0][-2000:] + logs[1][-2000:]
    got = [json.loads(path.read_text()) for path in reports]
    assert all(np.isfinite(r["loss"]) for r in got)
    assert got[0]["shards"]["hist"] == [[0, 0]] and got[1]["shards"]["hist"] == [[350, 0]]
    assert got[0]["shards"]["user"] == [[0, 0]] and "user" not in got[1]["shards"]
    assert got[1]["shards"]["item_bag"] == [[0, 0]] and got[0]["shards"]["item_bag"] == [[0, 8]]
    assert all(all(v) for r in got for v in r["changed"].values())
