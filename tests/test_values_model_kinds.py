"""The value types a real model needs: sequence tables, per-table constraints, the job's topology and per-table
kernels. Old files load unchanged and keep their fingerprints; new fields are strict."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from dreamshard.values import Inventory, JobTopology, Plan, Table, TableConstraints, Topology


def _table(**kw: object) -> Table:
    return Table.model_validate({"name": "t", "num_embeddings": 100, "embedding_dim": 8, "pooling_factor": 3, **kw})


def test_a_pooled_table_dumps_and_hashes_as_before() -> None:
    t = _table()
    assert set(t.model_dump()) == {
        "name",
        "num_embeddings",
        "embedding_dim",
        "pooling_factor",
        "access_histogram",
        "dtype",
    }
    assert t.canonical_json() == (
        '{"access_histogram":null,"dtype":"fp32","embedding_dim":8,"name":"t","num_embeddings":100,'
        '"pooling_factor":3.0}'
    )
    assert t.schema_fields() == {"name": "t", "num_embeddings": 100, "embedding_dim": 8, "dtype": "fp32"}


def test_a_sequence_table_is_another_schema_and_its_output_follows_lookups() -> None:
    pooled, seq = _table(), _table(pooled=False)
    assert seq.schema_fields()["pooled"] is False and pooled.schema_fields() != seq.schema_fields()
    assert pooled.output_elements_per_sample == 8.0
    assert seq.output_elements_per_sample == 24.0  # 3 ids per sample, one row of 8 each
    assert Table.model_validate_json(seq.model_dump_json()) == seq


def test_constraints_load_in_both_vocabularies_and_change_the_version_not_the_schema() -> None:
    c = {
        "devices": [3],
        "sharding_types": ["table_wise", "row_wise"],
        "compute_kernels": ["fused_uvm_caching"],
        "cache_params": {"load_factor": 0.1, "algorithm": "LRU"},
        "output_dtype": "FP16",
        "min_partition": 4,
    }
    t = _table(constraints=c)
    assert t.constraints is not None and t.constraints.allows_device(3) and not t.constraints.allows_device(0)
    assert t.constraints.cache_load_factor == 0.1 and t.constraints.output_dtype == "fp16"
    assert t.model_dump()["constraints"]["devices"] == (3,)  # written as given: no empty keys
    assert "stochastic_rounding" not in t.model_dump()["constraints"]
    inv = Inventory(name="i", tables=(_table(),))
    constrained = Inventory(name="i", tables=(t,))
    assert inv.schema_fingerprint() == constrained.schema_fingerprint()
    assert inv.fingerprint() != constrained.fingerprint()


@pytest.mark.parametrize(
    "bad, needle",
    [
        ({"devices": []}, "devices is empty"),
        ({"devices": [1, 1]}, "twice"),
        ({"devices": [True]}, "must be a number"),
        ({"devices": [-1]}, "greater than or equal"),
        ({"min_shards": 4, "max_shards": 2}, "min_shards 4 is above max_shards 2"),
        ({"sharding_types": ["diagonal"]}, "unknown 'diagonal'"),
        ({"compute_kernels": []}, "compute_kernels is empty"),
        ({"cache_params": {"load_factor": 1.5}}, "less than or equal"),
        ({"min_partition": "4"}, "must be a number"),
        ({"pin": 3}, "Extra inputs are not permitted"),
    ],
)
def test_bad_constraints_are_refused(bad: dict[str, object], needle: str) -> None:
    with pytest.raises(ValidationError, match=needle):
        TableConstraints.model_validate(bad)


def test_the_job_topology_is_a_version_and_fills_a_template() -> None:
    inv = Inventory(name="i", tables=(_table(),))
    job = JobTopology(world_size=8, devices_per_host=4, memory_per_device_gb=16, optimizer="adam")
    with_job = Inventory.model_validate({**inv.model_dump(), "job": job.given()})
    assert with_job.schema_fingerprint() == inv.schema_fingerprint() and with_job.fingerprint() != inv.fingerprint()
    assert "job" not in inv.model_dump()
    topo = job.topology(Topology(num_devices=4, memory_per_device_gb=4, batch_size=512))
    assert (topo.num_devices, topo.hosts, topo.memory_per_device_gb, topo.optimizer, topo.batch_size) == (
        8,
        2,
        16,
        "adam",
        512,
    )
    with pytest.raises(ValidationError, match="whole hosts"):
        JobTopology(world_size=6, devices_per_host=4)


def _plan(**kw: object) -> Plan:
    return Plan.model_validate(
        {
            "inventory_name": "i",
            "inventory_fingerprint": "f" * 64,
            "sharder": "x",
            "topology": {"num_devices": 2, "memory_per_device_gb": 1.0},
            "placement": {"a": 0, "b": 1},
            "data_parallel": ["c"],
            "memory_per_device_gb": [0.1, 0.1],
            **kw,
        }
    )


def test_plan_kernels_default_and_export() -> None:
    p = _plan(kernels={"a": "fused_uvm_caching"}, cache_load_factors={"a": 0.3})
    assert (p.kernel("a"), p.kernel("b"), p.kernel("c")) == ("fused_uvm_caching", "fused", "dense")
    exported = p.to_torchrec()
    assert exported["a"]["compute_kernel"] == "fused_uvm_caching" and exported["a"]["cache_load_factor"] == 0.3
    assert exported["c"]["compute_kernel"] == "dense"
    # TorchRec runs dense table-, column- and row-wise too: a sharded table may carry it
    assert _plan(kernels={"a": "dense"}).to_torchrec()["a"]["compute_kernel"] == "dense"


@pytest.mark.parametrize(
    "bad, needle",
    [
        ({"kernels": {"z": "fused"}}, "does not place"),
        ({"kernels": {"c": "fused"}}, "data-parallel tables run the dense kernel"),
        ({"kernels": {"a": "warp"}}, "Input should be"),
        ({"cache_load_factors": {"a": 0.2}}, "not the fused_uvm_caching kernel"),
    ],
)
def test_plan_kernels_are_checked(bad: dict[str, object], needle: str) -> None:
    with pytest.raises(ValidationError, match=needle):
        _plan(**bad)
