"""A TorchRec model and its KJT batches -> an inventory (shared tables as features); the training job's lookup of
the current plan by its model; shared tables in comm and in measuring; schema vs statistics fingerprints."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn

from dreamshard.cli.app import main
from dreamshard.errors import DreamshardError, InputFileError, InventoryError, PlanError
from dreamshard.evaluation.bounds import lower_bound
from dreamshard.integrations.torchrec import sharding_plan
from dreamshard.integrations.torchrec_current import load_current_sharding_plan
from dreamshard.integrations.torchrec_model import (
    inventory_from_module,
    load_batches,
    module_inventory,
    rescaled_histogram,
)
from dreamshard.learning.features import FEATURE_NAMES, table_features
from dreamshard.profiling.comm import device_comm_bytes
from dreamshard.profiling.embedding_bag_backend import EmbeddingBagBackend
from dreamshard.profiling.fbgemm_backend import FbgemmBackend
from dreamshard.profiling.oracle import make_oracle
from dreamshard.profiling.scaling import CPU_RULE
from dreamshard.sharders import make_plan
from dreamshard.store import LocalPlanStore, push_inventory
from dreamshard.values import CommModel, Costs, DeviceCost, Feature, Inventory, Table, Topology

ROOT = Path(__file__).resolve().parents[1]
B = 128


def _ebc(weighted: bool = False, dims: tuple[int, int] = (16, 8)) -> nn.Module:
    from torchrec.modules.embedding_configs import DataType, EmbeddingBagConfig
    from torchrec.modules.embedding_modules import EmbeddingBagCollection

    return EmbeddingBagCollection(
        tables=[
            EmbeddingBagConfig(
                name="item_id", num_embeddings=1000, embedding_dim=dims[0], feature_names=["clicked", "viewed"]
            ),
            EmbeddingBagConfig(
                name="user", num_embeddings=500, embedding_dim=dims[1], feature_names=["user"], data_type=DataType.FP16
            ),
            EmbeddingBagConfig(name="t_geo", num_embeddings=50, embedding_dim=4, feature_names=["geo"]),
        ],
        is_weighted=weighted,
        device=torch.device("meta"),
    )


class Tower(nn.Module):
    def __init__(self, weighted: bool = False, dims: tuple[int, int] = (16, 8)) -> None:
        super().__init__()
        self.sparse = _ebc(weighted, dims)
        self.dense = nn.Linear(4, 4)


POOL = {"clicked": 2.0, "viewed": 6.0, "user": 1.0, "geo": 0.5}
ROWS = {"clicked": 1000, "viewed": 1000, "user": 500, "geo": 50}


def _batches(n: int = 6, weighted: bool = False, seed: int = 0, kjt: bool = True) -> list[object]:
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    g = torch.Generator().manual_seed(seed)
    out: list[object] = []
    for _ in range(n):
        lengths = [torch.poisson(torch.full((B,), POOL[k]), generator=g).long() for k in POOL]
        values = [torch.randint(0, ROWS[k], (int(ln.sum()),), generator=g) for k, ln in zip(POOL, lengths, strict=True)]
        d = {"keys": list(POOL), "values": torch.cat(values), "lengths": torch.cat(lengths)}
        if weighted:
            d["weights"] = torch.rand(d["values"].numel(), generator=g)
        out.append(KeyedJaggedTensor.from_lengths_sync(**d) if kjt else d)
    return out


def _observed(batches: list[object], key: str) -> float:
    return sum(
        int(b["lengths"][list(POOL).index(key) * B : (list(POOL).index(key) + 1) * B].sum()) for b in batches
    ) / (len(batches) * B)  # type: ignore[index]


@pytest.mark.parametrize("weighted", [False, True])
def test_inventory_from_an_ebc_with_a_shared_table(weighted: bool) -> None:
    data = _batches(weighted=weighted, kjt=False)
    inv = inventory_from_module(Tower(weighted), data, B, planned_batch_size=4 * B, name="tower")
    by = inv.by_name()
    assert inv.name == "tower" and inv.table_names == ["item_id", "user", "t_geo"]
    assert [(t.num_embeddings, t.embedding_dim, t.dtype) for t in inv.tables] == [
        (1000, 16, "fp32"),
        (500, 8, "fp16"),
        (50, 4, "fp32"),
    ]
    item = by["item_id"]
    assert item.feature_names == ("clicked", "viewed") and item.num_outputs == 2 and item.output_dim == 32
    assert by["user"].features == () and by["user"].num_outputs == 1  # one feature named like the table
    assert by["t_geo"].feature_names == ("geo",) and by["t_geo"].features == (
        Feature(name="geo", pooling_factor=by["t_geo"].pooling_factor),
    )
    for f in item.features:
        assert f.pooling_factor == pytest.approx(_observed(data, f.name), rel=0.05)
        assert f.pooling_factor == pytest.approx(POOL[f.name], rel=0.1)
    assert item.pooling_factor == pytest.approx(sum(f.pooling_factor for f in item.features))
    assert by["user"].pooling_factor == pytest.approx(_observed(data, "user"), rel=0.05)
    assert all(t.access_histogram is not None and abs(sum(t.access_histogram) - 1) < 1e-6 for t in inv.tables)
    # KJTs in memory measure the same
    same = inventory_from_module(
        Tower(weighted), _batches(weighted=weighted), B, planned_batch_size=4 * B, name="tower"
    )
    assert same.fingerprint() == inv.fingerprint()
    assert module_inventory(Tower(weighted)).schema_fingerprint() == inv.schema_fingerprint()
    # a weighted EBC's tables say so (and only then: an unweighted table's file and fingerprint are as before)
    assert all(t.weighted == weighted for t in inv.tables)
    assert ("weighted" in item.model_dump()) == weighted


def test_a_weighted_table_tells_torchrec_and_keeps_its_schema() -> None:
    from dreamshard.sharders.torchrec_parameters import parameter_constraints

    plain = Table(name="t", num_embeddings=100, embedding_dim=8, pooling_factor=2.0)
    weighted = plain.model_copy(update={"weighted": True})
    assert parameter_constraints(weighted, ["table_wise"]).is_weighted is True
    assert not parameter_constraints(plain, ["table_wise"]).is_weighted
    assert weighted.schema_fields() == plain.schema_fields() and weighted.canonical() != plain.canonical()
    with pytest.raises(ValueError, match="table 't' is weighted but not pooled"):
        Table(name="t", num_embeddings=100, embedding_dim=8, pooling_factor=2.0, pooled=False, weighted=True)


def test_histogram_rescaling() -> None:
    counts = np.array([1, 1, 2, 4])
    assert rescaled_histogram(counts, 1.0)[:3].tolist() == pytest.approx([0.5, 0.25, 0.25])
    up = rescaled_histogram(counts, 4.0)  # counts 4, 4, 8, 16
    assert up[2] == pytest.approx(0.5) and up[3] == pytest.approx(0.25) and up[4] == pytest.approx(0.25)
    down = rescaled_histogram(counts, 0.5)  # kept w.p. 1 - 0.5^c: .5, .5, .75, .9375; counts 1, 1, 4/3, 32/15
    assert down[:3].tolist() == pytest.approx([1 / 2.6875, 0.75 / 2.6875, 0.9375 / 2.6875])
    # merged batches when the planned batch is a multiple: histograms at 2x differ from those at 1x
    one = inventory_from_module(Tower(), _batches(kjt=False), B, planned_batch_size=B).by_name()["item_id"]
    two = inventory_from_module(Tower(), _batches(kjt=False), B, planned_batch_size=2 * B).by_name()["item_id"]
    assert one.access_histogram != two.access_histogram and one.pooling_factor == two.pooling_factor


def test_batch_errors_are_one_line_and_typed(tmp_path: Path) -> None:
    data = _batches(2, kjt=False)
    bad_key = [dict(data[0], keys=["clicked", "viewed", "user", "nope"])]
    with pytest.raises(InventoryError, match="batch 0 has key 'nope', which no table of the model serves"):
        inventory_from_module(Tower(), bad_key, B)
    no_geo = [
        {
            "keys": ["clicked", "viewed", "user"],
            "values": torch.tensor([1, 2, 3]),
            "lengths": torch.tensor([1] * 3 + [0] * (3 * B - 3)),
        }
    ]
    with pytest.raises(InventoryError, match=r"table 't_geo' has no batch data: none of its features \(geo\)"):
        inventory_from_module(Tower(), no_geo, B)
    big = [dict(data[0], values=data[0]["values"].clone())]  # type: ignore[union-attr]
    big[0]["values"][-1] = 50  # the last value is a geo lookup: row 50 of a 50-row table
    with pytest.raises(
        InventoryError, match="batch 0: feature 'geo' looks up row 50 of table 't_geo', which has 50 rows"
    ):
        inventory_from_module(Tower(), big, B)
    with pytest.raises(InputFileError, match="batch 0 has 512 lengths for 4 keys, not 64 per key"):
        inventory_from_module(Tower(), data, 64)
    empty = [
        dict(
            data[0],
            values=data[0]["values"][: -int(data[0]["lengths"][3 * B :].sum())],  # type: ignore[index]
            lengths=torch.cat([data[0]["lengths"][: 3 * B], torch.zeros(B, dtype=torch.long)]),
        )
    ]  # type: ignore[index]
    with pytest.warns(UserWarning, match="feature 'geo' of table 't_geo' has no lookups in the batches: pooling 0"):
        assert inventory_from_module(Tower(), empty, B).by_name()["t_geo"].pooling_factor == 0
    path = tmp_path / "kjt.pt"
    torch.save(_batches(1), path)
    with pytest.raises(InputFileError, match=r"pickled KeyedJaggedTensor.*weights_only=False \(--allow-pickle"):
        load_batches(path, B)
    assert len(load_batches(path, B, allow_pickle=True)) == 1
    for err in (InputFileError, InventoryError):
        assert issubclass(err, DreamshardError)


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = 0
    try:
        main(list(args))
    except SystemExit as e:
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_from_torchrec(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dreamshard.documents import load_inventory

    model = tmp_path / "model.py"
    model.write_text(
        "from test_torchrec_model import Tower\n\ndef build():\n    return Tower()\n\ndef bad():\n    return 3\n"
    )
    torch.save(_batches(4, kjt=False), tmp_path / "b.pt")
    torch.save(_batches(1), tmp_path / "kjt.pt")
    out = tmp_path / "inv.yaml"
    code, stdout, err = _cli(
        capsys,
        "inventory",
        "from-torchrec",
        "--model",
        f"{model}:build",
        "--batches",
        str(tmp_path / "b.pt"),
        "--batch-size",
        str(B),
        "--planned-batch-size",
        "512",
        "--name",
        "tower",
        "-o",
        str(out),
    )
    assert code == 0, err
    inv = load_inventory(out)
    assert inv.name == "tower" and inv.by_name()["item_id"].feature_names == ("clicked", "viewed")
    assert f"schema {inv.schema_fingerprint()[:12]}" in stdout
    code, _, err = _cli(
        capsys,
        "inventory",
        "from-torchrec",
        "--model",
        "test_torchrec_model:Tower",
        "--batches",
        str(tmp_path / "b.pt"),
        "--batch-size",
        str(B),
        "-o",
        str(tmp_path / "mod.yaml"),
    )
    assert code == 0, err  # the pkg.mod:callable form
    cases = [
        ([f"{model}:bad", "b.pt", str(B)], "bad() returned int, not a torch module"),
        ([f"{model}:nope", "b.pt", str(B)], "has no callable 'nope'"),
        (["no_such_module_xyz:build", "b.pt", str(B)], "cannot import no_such_module_xyz"),
        (["justtext", "b.pt", str(B)], "expected MODULE:CALLABLE"),
        ([f"{model}:build", "kjt.pt", str(B)], "weights_only=False (--allow-pickle"),
        ([f"{model}:build", "missing.pt", str(B)], "batches file not found"),
        ([f"{model}:build", "b.pt", "64"], "not 64 per key"),
    ]
    for (spec, batches, bs), message in cases:
        dest = tmp_path / "x.yaml"
        code, _, err = _cli(
            capsys,
            "inventory",
            "from-torchrec",
            "--model",
            spec,
            "--batches",
            str(tmp_path / batches),
            "--batch-size",
            bs,
            "-o",
            str(dest),
        )
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert code == 2 and len(lines) == 1 and message in lines[0], (spec, err)
        assert not dest.exists()


def test_schema_and_statistics_fingerprints() -> None:
    base = Table(
        name="item_id",
        num_embeddings=1000,
        embedding_dim=16,
        features=(Feature(name="clicked", pooling_factor=2.0), Feature(name="viewed", pooling_factor=6.0)),
    )
    assert base.pooling_factor == 8.0  # filled in from the features
    inv = Inventory(name="a", tables=(base, Table(name="u", num_embeddings=10, embedding_dim=4, pooling_factor=1.0)))
    pooled = Inventory(
        name="a",
        tables=(
            base.model_copy(
                update={
                    "features": (
                        Feature(name="clicked", pooling_factor=3.0),
                        Feature(name="viewed", pooling_factor=6.0),
                    ),
                    "pooling_factor": 9.0,
                }
            ),
            inv.tables[1],
        ),
    )
    assert pooled.schema_fingerprint() == inv.schema_fingerprint() and pooled.fingerprint() != inv.fingerprint()
    wider = Inventory(name="a", tables=(base.model_copy(update={"embedding_dim": 32}), inv.tables[1]))
    assert wider.schema_fingerprint() != inv.schema_fingerprint() and wider.fingerprint() != inv.fingerprint()
    renamed = Inventory(
        name="a",
        tables=(
            base.model_copy(
                update={
                    "features": (Feature(name="clicked", pooling_factor=2.0), Feature(name="seen", pooling_factor=6.0))
                }
            ),
            inv.tables[1],
        ),
    )
    assert renamed.schema_fingerprint() != inv.schema_fingerprint()
    with pytest.raises(ValueError, match="table 'item_id': pooling_factor 5 is not the sum of its features' pooling"):
        Table(name="item_id", num_embeddings=1000, embedding_dim=16, pooling_factor=5.0, features=base.features)
    with pytest.raises(ValueError, match="feature 'u' is served by both table 'u' and table 'x'"):
        Inventory(
            name="a",
            tables=(
                inv.tables[1],
                Table(name="x", num_embeddings=1, embedding_dim=4, features=(Feature(name="u", pooling_factor=1.0),)),
            ),
        )


def test_a_shared_table_costs_k_outputs_in_comm() -> None:
    one = Table(
        name="item_id", num_embeddings=1000, embedding_dim=16, features=(Feature(name="a", pooling_factor=2.0),)
    )
    two = Table(
        name="item_id",
        num_embeddings=1000,
        embedding_dim=16,
        features=(Feature(name="a", pooling_factor=1.0), Feature(name="b", pooling_factor=1.0)),
    )
    assert (one.output_dim, two.output_dim) == (16, 32)
    assert (
        device_comm_bytes(1000, [two.output_dim], 4)
        == 2 * device_comm_bytes(1000, [one.output_dim], 4)
        == 2 * 1000 * 16 * 4 * 3 / 4
    )
    oracle = make_oracle("simulator")
    topo = Topology(num_devices=2, memory_per_device_gb=1.0, batch_size=1000)
    comm = CommModel(alpha_ms=0.0, beta_ms_per_mb=1.0, backend="simulated", world_size=2)
    oracle.set_comm_model(2, comm)
    c1, c2 = (
        oracle.measure(Inventory(name="x", tables=(t,)), {"item_id": 0}, topo, kind="single").costs.per_device[0]
        for t in (one, two)
    )
    assert c2.fwd_comm == pytest.approx(2 * c1.fwd_comm) and c1.fwd_comm == pytest.approx(1000 * 16 * 4 / 2 / 1e6)
    w = FEATURE_NAMES.index("dim_linear")  # the output width feature
    assert table_features(two)[w] == pytest.approx(2 * table_features(one)[w])
    singles = {
        t.name: oracle.measure(Inventory(name="x", tables=(t,)), {t.name: 0}, topo, kind="single") for t in (two,)
    }
    assert lower_bound(Inventory(name="x", tables=(two,)), singles, topo).comm_ms == pytest.approx(
        2 * comm.cost_ms(1000 * 32 * 4 / 2 / 2)
    )


def test_measuring_a_shared_table_on_the_cpu_backends() -> None:
    shared = Table(
        name="item_id",
        num_embeddings=2000,
        embedding_dim=16,
        features=(Feature(name="clicked", pooling_factor=2.0), Feature(name="viewed", pooling_factor=5.0)),
    )
    other = Table(name="user", num_embeddings=300, embedding_dim=8, pooling_factor=1.0)
    for backend in (FbgemmBackend("cpu", "cpu", CPU_RULE), EmbeddingBagBackend("cpu", "cpu", CPU_RULE)):
        per_table = backend.bank.batches(shared, 2000, 64)
        idx, off = per_table[0]
        assert off.size == 2 * 64 + 1  # one bag per feature and sample
        assert abs(int(off[64]) - 2 * 64) <= 1 and abs(int(off[-1] - off[64]) - 5 * 64) <= 1
        timing = backend.time_device([shared, other], 64, 0, 1)
        assert len(timing.fwd_ms) == 1 and timing.fwd_ms[0] > 0
    oracle = make_oracle("cpu", warmup=0, repeats=1)
    oracle.set_comm_model(2, CommModel(alpha_ms=0.0, beta_ms_per_mb=1.0, backend="gloo", world_size=2))
    m = oracle.measure(
        Inventory(name="x", tables=(shared, other)),
        {"item_id": 0, "user": 1},
        Topology(num_devices=2, memory_per_device_gb=1.0, batch_size=64),
    )
    assert m.costs.per_device[0].fwd_comm == pytest.approx(64 * 32 * 4 / 2 / 1e6)


# ---------------------------------------------------------------------------------------------- the training job


def _publish(store: LocalPlanStore, inv: Inventory, placement: dict[str, int], devices: int = 2) -> str:
    from store_helpers import approve

    from dreamshard.store import publish

    plan = make_plan(inv, Topology(num_devices=devices, memory_per_device_gb=1.0), placement, "hand")
    costs = Costs.from_devices([DeviceCost.from_list([1.0, 0.1, 0.1, 1.0])] * devices)
    plan = plan.model_copy(update={"measured": costs})
    publish(store, plan, approve(plan))
    return plan.plan_id


def test_load_current_sharding_plan_finds_the_plan_by_the_model(tmp_path: Path) -> None:
    store = LocalPlanStore(tmp_path / "store")
    inv = inventory_from_module(Tower(), _batches(kjt=False), B, name="tower")
    assert (
        make_plan(
            inv, Topology(num_devices=2, memory_per_device_gb=1.0), {"item_id": 0, "user": 1, "t_geo": 1}, "x"
        ).schema_fingerprint
        == inv.schema_fingerprint()
    )
    none = load_current_sharding_plan(store, Tower(), world_size=2)
    assert none.sharding_plan is None and none.plan_id is None
    assert "no current plan in" in none.reason and "TorchRec's own planner" in none.reason
    with pytest.raises(PlanError, match="no current plan"):
        none.require()
    other = Inventory(name="other", tables=(Table(name="z", num_embeddings=10, embedding_dim=4, pooling_factor=1.0),))
    _publish(store, other, {"z": 0})
    push_inventory(store, inv)
    plan_id = _publish(store, inv, {"item_id": 0, "user": 1, "t_geo": 1})
    found = load_current_sharding_plan(store, Tower(), world_size=2)
    assert found.plan_id == plan_id and found.inventory == "tower" and found.sharding_plan is not None
    assert f"loaded plan {plan_id} of inventory 'tower'" in found.reason
    ranks = {t: ps.ranks for t, ps in found.require().plan["sparse"].items()}  # type: ignore[union-attr]
    assert ranks == {"item_id": [0], "user": [1], "t_geo": [1]}
    wrong_ws = load_current_sharding_plan(store, Tower(), world_size=4)
    assert wrong_ws.sharding_plan is None and "is for 2 ranks, this job has 4" in wrong_ws.reason
    # the model changed (item dim 16 -> 32): no plan has its schema; named explicitly, the shapes are refused
    wider = Tower(dims=(32, 8))
    assert load_current_sharding_plan(store, wider, world_size=2).sharding_plan is None
    with pytest.raises(PlanError, match=r"table 'item_id' is 1000x16 in the plan but 1000x32 in module 'sparse'"):
        load_current_sharding_plan(store, wider, world_size=2, inventory="tower")


def test_sharding_plan_of_an_in_memory_plan_checks_shapes() -> None:
    from torchrec.modules.embedding_configs import EmbeddingBagConfig
    from torchrec.modules.embedding_modules import EmbeddingBagCollection

    def ebc(dim: int) -> nn.Module:
        return EmbeddingBagCollection(
            tables=[
                EmbeddingBagConfig(name="big", num_embeddings=10000, embedding_dim=dim, feature_names=["big"]),
                EmbeddingBagConfig(name="small", num_embeddings=10, embedding_dim=4, feature_names=["small"]),
            ],
            device=torch.device("meta"),
        )

    inv = Inventory(
        name="m",
        tables=(
            Table(name="big", num_embeddings=10000, embedding_dim=32, pooling_factor=1.0),
            Table(name="small", num_embeddings=10, embedding_dim=4, pooling_factor=1.0),
        ),
    )
    plan = make_plan(inv, Topology(num_devices=2, memory_per_device_gb=1.0), {"big": 0, "small": 1}, "x")
    assert sharding_plan(plan, ebc(32)).plan[""]["big"].ranks == [0]  # type: ignore[index,union-attr]
    with pytest.raises(PlanError, match=r"table 'big' is 10000x32 in the plan but 10000x24 in the module"):
        sharding_plan(plan, ebc(24), inventory=inv)
    with pytest.raises(PlanError, match=r"made for other tables than the module's \(schema fingerprints differ"):
        sharding_plan(plan, ebc(24))


@pytest.mark.slow
def test_readme_example_runs(tmp_path: Path) -> None:
    """docs/examples/torchrec_to_dmp.py: from-torchrec (bags and sequences, constraints, the job), plan, plans
    publish --measure, then DMP on 2 CPU ranks with load_current_sharding_plan (simulator measuring keeps it short;
    the learned sharder's plan passes the gate where a heuristic's may lose to the TorchRec baseline)."""
    r = subprocess.run(
        [
            sys.executable,
            str(ROOT / "docs/examples/torchrec_to_dmp.py"),
            str(tmp_path),
            "--sharder",
            "dreamshard",
            "--backend",
            "simulator",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert r.stdout.count("loaded plan") == 2 and r.stdout.count(", loss ") == 2


def test_inventories_without_features_keep_their_fingerprints() -> None:
    """Both fingerprints of a featureless inventory are what they were before features existed (values computed
    with the previous dreamshard.values.tables)."""
    inv = Inventory.model_validate(
        {
            "name": "old",
            "tables": [
                {"name": "a", "num_embeddings": 100, "embedding_dim": 8, "pooling_factor": 2.5},
                {"name": "b", "num_embeddings": 7, "embedding_dim": 4, "pooling_factor": 1.0, "dtype": "fp16"},
            ],
        }
    )
    assert inv.fingerprint() == "6299726d8e699b0b5a9b6de9f3eb06902d03c4c181c1bf0a72ea4ec6656bcfbd"
    assert inv.schema_fingerprint() == "547b8c90eaab568daf8b0dccdaf0a0588ed9ba4b601a5dabd953cc651ad2d7de"
    assert all(t.num_outputs == 1 and t.output_dim == t.embedding_dim for t in inv.tables)
    assert "features" not in inv.model_dump()["tables"][0]  # files without features are written as before
