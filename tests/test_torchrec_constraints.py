"""A team's TorchRec constraints and the training job, through `from-torchrec` and back into the export:
ParameterConstraints objects convert as they are, files in Python, YAML and JSON load, bad keys and values are one
line each, the job's flags are recorded, and the constraints TorchRec's ParameterSharding holds come back in the
exported plan.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn as nn
import yaml

from dreamshard.cli.app import main
from dreamshard.errors import InventoryError, PlanError
from dreamshard.integrations.torchrec import sharding_plan
from dreamshard.integrations.torchrec_build import build_model
from dreamshard.integrations.torchrec_constraints import load_constraints, table_constraints
from dreamshard.integrations.torchrec_file import torchrec_document
from dreamshard.integrations.torchrec_model import inventory_from_module
from dreamshard.sharders import make_plan
from dreamshard.values import Inventory, JobTopology, Table, TableConstraints, Topology

pytest.importorskip("torchrec")

B = 16


class Model(nn.Module):
    """One EBC: `user` and a shared table `item` (features item, last_item)."""

    def __init__(self) -> None:
        from torchrec.modules.embedding_configs import EmbeddingBagConfig
        from torchrec.modules.embedding_modules import EmbeddingBagCollection

        super().__init__()
        self.ebc = EmbeddingBagCollection(
            tables=[
                EmbeddingBagConfig(name="user", num_embeddings=300, embedding_dim=8, feature_names=["user"]),
                EmbeddingBagConfig(
                    name="item", num_embeddings=500, embedding_dim=16, feature_names=["item", "last_item"]
                ),
            ],
            device=torch.device("meta"),
        )


def _batches() -> list[dict[str, Any]]:
    g = torch.Generator().manual_seed(0)
    keys = ["user", "item", "last_item"]
    lengths = torch.randint(0, 4, (len(keys) * B,), generator=g)
    return [{"keys": keys, "values": torch.randint(0, 300, (int(lengths.sum()),), generator=g), "lengths": lengths}]


def test_parameter_constraints_objects_convert_as_they_are() -> None:
    from torchrec.distributed.planner.types import ParameterConstraints
    from torchrec.distributed.types import BoundsCheckMode, CacheAlgorithm, CacheParams, ShardingType
    from torchrec.types import DataType

    c = table_constraints(
        "item",
        ParameterConstraints(
            sharding_types=[ShardingType.TABLE_WISE.value, ShardingType.COLUMN_WISE.value],
            compute_kernels=["fused_uvm_caching"],
            min_partition=8,
            cache_params=CacheParams(algorithm=CacheAlgorithm.LFU, load_factor=0.25),
            enforce_hbm=True,
            bounds_check_mode=BoundsCheckMode.WARNING,
            output_dtype=DataType.FP16,
            pooling_factors=[2.0, 3.0],
        ),
    )
    assert c.sharding_types == ("table_wise", "column_wise") and c.compute_kernels == ("fused_uvm_caching",)
    assert c.cache_params is not None and (c.cache_params.algorithm, c.cache_load_factor) == ("lfu", 0.25)
    assert (c.enforce_hbm, c.bounds_check_mode, c.output_dtype, c.min_partition) == (True, "warning", "fp16", 8)
    assert c.pooling_factors == (2.0, 3.0)
    # TorchRec's defaults (pooling_factors [1.0], is_weighted False, ...) are its planner's guesses, not constraints
    assert table_constraints("user", ParameterConstraints()).given() == {}
    assert table_constraints("user", {"devices": [1], "max_shards": 2}) == TableConstraints(devices=(1,), max_shards=2)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"colour": "red"}, "table 'item': unknown constraint key 'colour' (neither dreamshard's nor TorchRec's"),
        (
            {"sharding_types": ["diagonal"]},
            "table 'item': constraints: sharding_types: unknown 'diagonal'",
        ),
        ({"min_shards": 3, "max_shards": 2}, "table 'item': constraints: min_shards 3 is above max_shards 2"),
        ({"devices": "3"}, "table 'item': constraint 'devices'"),
        ({"cache_params": {"load_factor": 2}}, "table 'item': constraint 'cache_params.load_factor'"),
        (42, "table 'item': constraints must be a ParameterConstraints or a mapping of its fields, got int"),
    ],
)
def test_bad_constraints_are_one_line(value: object, message: str) -> None:
    with pytest.raises(InventoryError) as e:
        table_constraints("item", value)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_constraints_files_python_yaml_json(tmp_path: Path) -> None:
    py = tmp_path / "c.py"
    py.write_text(
        "from torchrec.distributed.planner.types import ParameterConstraints\n"
        "constraints = {'item': ParameterConstraints(sharding_types=['column_wise'], min_partition=8)}\n"
    )
    fields = {"item": {"sharding_types": ["column_wise"], "min_partition": 8}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(fields))
    (tmp_path / "c.json").write_text(json.dumps(fields))
    loaded = [load_constraints(tmp_path / name) for name in ("c.py", "c.yaml", "c.json")]
    assert (
        loaded[0]
        == loaded[1]
        == loaded[2]
        == {"item": TableConstraints(sharding_types=("column_wise",), min_partition=8)}
    )
    (tmp_path / "none.py").write_text("x = 1\n")
    with pytest.raises(InventoryError, match=r"defines no 'constraints'"):
        load_constraints(tmp_path / "none.py")
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(InventoryError, match=r"expected a mapping \{table: constraints\}, got list"):
        load_constraints(tmp_path / "list.json")


def test_constraints_ride_on_the_model_s_tables() -> None:
    inv = inventory_from_module(
        Model(), _batches(), B, constraints={"item": {"devices": [1], "pooling_factors": [2.0, 5.0]}}
    )
    item = inv.by_name()["item"]
    assert item.constraints == TableConstraints(devices=(1,), pooling_factors=(2.0, 5.0))
    assert item.pooling_factor != 7.0  # measured where the batches carry the features
    # without batches the statistics constraints give the pooling; a table without them is an error
    both = {"user": {"pooling_factors": [1.0]}, "item": {"pooling_factors": [2.0, 5.0]}}
    alone = inventory_from_module(Model(), constraints=both)
    assert [t.pooling_factor for t in alone.tables] == [1.0, 7.0]
    assert alone.by_name()["item"].features[1].pooling_factor == 5.0
    cases = [
        ({"item": {"pooling_factors": [2.0, 5.0]}}, "table 'user' has no batches and no 'pooling_factors' constraint"),
        ({"ghost": {"devices": [0]}}, "constraints name table 'ghost', which the model does not have"),
        ({"item": {"feature_names": ["item"]}}, "constraint 'feature_names' ['item'] is not the table's features"),
        ({"item": {"pooling_factors": [1.0]}}, "constraint 'pooling_factors' gives 1 values for its 2 features"),
    ]
    for given, message in cases:
        with pytest.raises(InventoryError) as e:
            inventory_from_module(Model(), constraints=given)
        assert message in str(e.value), given


def test_the_job_is_recorded() -> None:
    both = {"user": {"pooling_factors": [1.0]}, "item": {"pooling_factors": [2.0, 5.0]}}
    inv = inventory_from_module(
        Model(), constraints=both, world_size=4, devices_per_host=2, memory_gb=8, optimizer="rowwise_adagrad"
    )
    assert inv.job == JobTopology(
        world_size=4, devices_per_host=2, memory_per_device_gb=8.0, optimizer="rowwise_adagrad", batch_size=2048
    )
    plain = inventory_from_module(Model(), constraints=both)
    assert plain.job is None and plain.schema_fingerprint() == inv.schema_fingerprint()
    for options, message in [
        ({"devices_per_host": 2}, "the job's devices_per_host needs its world size"),
        ({"world_size": 3, "devices_per_host": 2}, "world_size 3 does not make whole hosts of 2 devices"),
        ({"world_size": 2, "optimizer": "lion"}, "the job: optimizer"),
    ]:
        with pytest.raises(InventoryError) as e:
            inventory_from_module(Model(), constraints=both, **options)
        assert message in str(e.value) and "\n" not in str(e.value), options


def test_cli_from_torchrec_with_constraints_and_the_job(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dreamshard.documents import load_inventory

    (tmp_path / "c.yaml").write_text(
        yaml.safe_dump({"user": {"pooling_factors": [1.0]}, "item": {"pooling_factors": [2.0, 5.0], "devices": [1]}})
    )
    out = tmp_path / "inv.yaml"
    args = ["inventory", "from-torchrec", "--model", "test_torchrec_constraints:Model", "-o", str(out)]
    try:
        main([*args, "--constraints", str(tmp_path / "c.yaml"), "--world-size", "2", "--memory-gb", "4"])
    except SystemExit as e:
        assert not e.code, capsys.readouterr().err
    assert "job 2 ranks" in capsys.readouterr().out
    inv = load_inventory(out)
    assert inv.job is not None and (inv.job.world_size, inv.job.memory_per_device_gb) == (2, 4.0)
    assert inv.by_name()["item"].constraints == TableConstraints(devices=(1,), pooling_factors=(2.0, 5.0))
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump({"item": {"colour": "red"}}))
    with pytest.raises(SystemExit) as e:
        main([*args, "--constraints", str(tmp_path / "bad.yaml")])
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert e.value.code == 2 and len(lines) == 1 and "unknown constraint key 'colour'" in lines[0]


def test_carried_constraints_go_back_into_the_export() -> None:
    caching = TableConstraints.model_validate(
        {"compute_kernels": ["fused_uvm_caching"], "cache_params": {"load_factor": 0.3, "algorithm": "lfu"}}
    )
    carried = TableConstraints.model_validate(
        {"enforce_hbm": True, "stochastic_rounding": False, "bounds_check_mode": "warning", "output_dtype": "fp16"}
    )
    inv = Inventory(
        name="x",
        tables=(
            Table(name="a", num_embeddings=100, embedding_dim=8, pooling_factor=1.0, constraints=caching),
            Table(name="b", num_embeddings=100, embedding_dim=8, pooling_factor=1.0, constraints=carried),
        ),
    )
    plan = make_plan(inv, Topology(num_devices=2, memory_per_device_gb=1.0, device_type="cuda"), {"a": 0, "b": 1}, "x")
    assert plan.kernels == {"a": "fused_uvm_caching"} and plan.cache_load_factors == {"a": 0.3}
    shardings = sharding_plan(torchrec_document(plan, inv), build_model(inv), 2).plan["ebc"]
    a, b = shardings["a"], shardings["b"]  # type: ignore[index]
    assert a.compute_kernel == "fused_uvm_caching" and a.cache_params.load_factor == 0.3
    assert a.cache_params.algorithm.name == "LFU"
    assert (b.compute_kernel, b.enforce_hbm, b.stochastic_rounding) == ("fused", True, False)
    assert (b.bounds_check_mode.name, b.output_dtype.name) == ("WARNING", "FP16")
    # a kernel asked for the file that a table's compute_kernels forbids is refused, naming the table
    pinned = inv.model_copy(
        update={"tables": (inv.tables[1], inv.tables[0].model_copy(update={"name": "c", "constraints": None}))}
    )
    fused_only = pinned.model_copy(
        update={
            "tables": (
                pinned.tables[0].model_copy(update={"constraints": TableConstraints(compute_kernels=("fused",))}),
                pinned.tables[1],
            )
        }
    )
    plan = make_plan(fused_only, Topology(num_devices=2, memory_per_device_gb=1.0), {"b": 0, "c": 1}, "x")
    with pytest.raises(PlanError, match=r"^table 'b': compute kernel 'dense' breaks its constraint compute_kernels"):
        torchrec_document(plan, fused_only, "dense")


def test_a_py_file_mixes_parameter_constraints_and_mappings_with_our_keys(tmp_path: Path) -> None:
    """The mix docs/torchrec.md shows (one table a ParameterConstraints, one a mapping that adds a
    device pin to TorchRec's fields) loads as written."""
    from dreamshard.integrations.torchrec_constraints import load_constraints

    f = tmp_path / "cons.py"
    f.write_text(
        "from torchrec.distributed.planner.types import ParameterConstraints\n"
        "constraints = {\n"
        '    "t0": ParameterConstraints(sharding_types=["table_wise", "row_wise"], min_partition=16),\n'
        '    "t1": {"sharding_types": ["table_wise"], "compute_kernels": ["fused"], "devices": [0, 1]},\n'
        "}\n"
    )
    got = load_constraints(f)
    assert got["t0"].sharding_types == ("table_wise", "row_wise") and got["t0"].min_partition == 16
    assert got["t1"].devices == (0, 1) and got["t1"].compute_kernels == ("fused",)
