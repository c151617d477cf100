"""One rule for `cache_params` in every path. They are a cache's settings, and only
`fused_uvm_caching` has a cache: a table giving them is planned with that kernel (its `compute_kernels` say so) and
its cache params are carried into TorchRec's ParameterSharding and listed; anywhere else they are refused in one
line naming the table (never kept by one path and dropped by another, as `replan` kept and `plan` + `publish`
dropped them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dreamshard.cli.app import invoke
from dreamshard.documents import save_plan
from dreamshard.errors import PlanError
from dreamshard.integrations.torchrec_file import document_from_data
from dreamshard.sharders import get_sharder
from dreamshard.values import Inventory, Table, Topology

NEEDLE = "cache_params applies only to compute kernel fused_uvm_caching"
#: Table 'a' asks for a cache but lets the planners run it with `fused` (no cache).
INVENTORY = """name: cinv
tables:
  - {name: a, num_embeddings: 4000, embedding_dim: 16, pooling_factor: 2.0,
     constraints: {cache_params: {load_factor: 0.3, algorithm: lfu}}}
  - {name: b, num_embeddings: 4000, embedding_dim: 16, pooling_factor: 2.0}
"""


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    """Inv.yaml (table 'a' with cache_params, no caching kernel) and plan.json, a plan of the same tables."""
    (tmp_path / "inv.yaml").write_text(INVENTORY)
    tables = tuple(Table(name=n, num_embeddings=4000, embedding_dim=16, pooling_factor=2.0) for n in "ab")
    plain = Inventory(name="cinv", tables=tables)
    plan = get_sharder("size_greedy").shard(plain, Topology(num_devices=2, memory_per_device_gb=1.0))
    return {"inv": tmp_path / "inv.yaml", "plan": save_plan(plan, tmp_path / "plan.json"), "dir": tmp_path}


def refused(argv: list[str]) -> str:
    code, out, err = invoke(argv)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in out + err, (code, err[-500:])
    assert NEEDLE in lines[0] and "table 'a'" in lines[0], lines[0]
    return lines[0]


def test_plan_refuses_cache_params_on_a_table_it_would_run_without_a_cache(files: dict[str, Path]) -> None:
    out = files["dir"] / "p.json"
    refused(["plan", "-i", str(files["inv"]), "-d", "2", "-m", "1", "-s", "size_greedy", "-o", str(out)])
    assert not out.exists()


def test_publish_refuses_them(files: dict[str, Path]) -> None:
    store = files["dir"] / "store"
    argv = ["plans", "publish", str(files["plan"]), "-i", str(files["inv"]), "--store", str(store)]
    refused([*argv, "--measure", "--backend", "simulator", "--allow-simulated"])
    assert not store.exists()


def test_replan_refuses_them(files: dict[str, Path]) -> None:
    argv = ["replan", "-i", str(files["inv"]), "--store", str(files["dir"] / "store"), "-d", "2", "-m", "1"]
    refused([*argv, "--backend", "simulator"])


def test_export_refuses_them(files: dict[str, Path]) -> None:
    out = files["dir"] / "tr.json"
    refused(["torchrec", "export", str(files["plan"]), "-i", str(files["inv"]), "-o", str(out)])
    assert not out.exists()


def test_a_plan_file_with_cache_params_on_a_kernel_without_a_cache_is_refused() -> None:
    """What the export wrote before (cache_params on a `fused` table, handed to ParameterSharding): refused when
    read (`load_sharding_plan`, `torchrec import`); on the caching kernel they are carried."""
    entry = {"sharding_type": "table_wise", "ranks": [0], "cache_params": {"algorithm": "lfu"}}
    with pytest.raises(PlanError, match="cache_params need compute kernel fused_uvm_caching, not 'fused'"):
        document_from_data({"world_size": 1, "tables": {"a": entry}})
    cached = {**entry, "compute_kernel": "fused_uvm_caching"}
    doc = document_from_data({"world_size": 1, "device_type": "cuda", "tables": {"a": cached}})
    assert doc.tables["a"].cache_params is not None and doc.tables["a"].cache_params.algorithm == "lfu"


def test_on_a_caching_table_they_are_carried_and_listed(files: dict[str, Path]) -> None:
    """The other side of the rule: `compute_kernels: [fused_uvm_caching]` plans the table cached, the export
    carries the cache params with the plan's load factor, the report lists the fields not planned on."""
    from dreamshard.documents import load_inventory
    from dreamshard.integrations.torchrec_carried import not_planned_on
    from dreamshard.integrations.torchrec_file import torchrec_document

    cached = INVENTORY.replace("constraints: {", "constraints: {compute_kernels: [fused_uvm_caching], ")
    files["inv"].write_text(cached)
    inv = load_inventory(files["inv"])
    topology = Topology(num_devices=2, memory_per_device_gb=1.0, device_type="cuda")
    plan = get_sharder("size_greedy").shard(inv, topology)
    doc = torchrec_document(plan, inv)
    entry = json.loads(doc.model_dump_json(exclude_none=True))["tables"]["a"]
    assert entry["compute_kernel"] == "fused_uvm_caching" and entry["cache_load_factor"] == 0.3
    assert entry["cache_params"] == {"algorithm": "lfu", "load_factor": 0.3}
    assert not_planned_on(inv.by_name()["a"]) == ["cache_params.algorithm"]
