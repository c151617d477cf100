"""The data-model contract (docs/architecture/data-model.md, "Data model"): round-trips, strictness, fingerprints,
plans."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from dreamshard.documents import load_inventory, load_plan, save_inventory, save_plan
from dreamshard.errors import InputFileError, InventoryError, PlanError
from dreamshard.values import NUM_REUSE_BINS, Costs, DeviceCost, Inventory, Plan, Table, Topology

HIST = tuple([0.5, 0.25, 0.125, 0.125] + [0.0] * (NUM_REUSE_BINS - 4))


def _inv() -> Inventory:
    return Inventory(
        name="tiny",
        tables=(
            Table(name="a", num_embeddings=1000, embedding_dim=16, pooling_factor=2.0, access_histogram=HIST),
            Table(name="b", num_embeddings=50, embedding_dim=8, pooling_factor=0.0, dtype="fp16"),
            Table(name="c", num_embeddings=7, embedding_dim=4, pooling_factor=1.25),
        ),
    )


def _plan(**kw) -> Plan:
    inv = _inv()
    args = dict(
        inventory_name=inv.name,
        inventory_fingerprint=inv.fingerprint(),
        topology=Topology(num_devices=2, memory_per_device_gb=1.0),
        sharder="round_robin",
        placement={"a": 0, "b": 1, "c": 0},
        memory_per_device_gb=(0.1, 0.2),
        predicted=Costs.from_devices([DeviceCost.from_list([1, 2, 3, 4]), DeviceCost.zero()]),
    )
    args.update(kw)
    return Plan(**args)


@pytest.mark.parametrize("suffix", [".json", ".yaml", ".yml"])
def test_inventory_round_trip(tmp_path: Path, suffix: str) -> None:
    inv = _inv()
    p = save_inventory(inv, tmp_path / f"inv{suffix}")
    back = load_inventory(p)
    assert back == inv and back.fingerprint() == inv.fingerprint()
    text = p.read_text()
    data = json.loads(text) if suffix == ".json" else yaml.safe_load(text)
    assert data["name"] == "tiny" and [t["name"] for t in data["tables"]] == ["a", "b", "c"]


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_plan_round_trip(tmp_path: Path, suffix: str) -> None:
    plan = _plan(model_version="cost@v1")
    back = load_plan(save_plan(plan, tmp_path / f"plan{suffix}"))
    assert back == plan
    assert back.predicted is not None and back.predicted.overall_ms == 10.0


def test_unknown_table_field_named(tmp_path: Path) -> None:
    data = _inv().model_dump(mode="json")
    data["tables"][1]["colour"] = "red"
    p = tmp_path / "inv.json"
    p.write_text(json.dumps(data))
    with pytest.raises(InventoryError) as e:
        load_inventory(p)
    msg = str(e.value)
    assert "colour" in msg and "table 'b'" in msg and "\n" not in msg


def test_unknown_top_level_field_named(tmp_path: Path) -> None:
    p = tmp_path / "inv.yaml"
    p.write_text(yaml.safe_dump({**_inv().model_dump(mode="json"), "owner": "me"}))
    with pytest.raises(InventoryError, match="owner"):
        load_inventory(p)


def test_negative_dim_named(tmp_path: Path) -> None:
    p = tmp_path / "inv.yaml"
    p.write_text("name: n\ntables:\n  - {name: x, num_embeddings: 10, embedding_dim: -4, pooling_factor: 1}\n")
    with pytest.raises(InventoryError, match=r"table 'x'.*embedding_dim"):
        load_inventory(p)


def test_missing_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(InputFileError, match="not found"):
        load_inventory(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InputFileError, match="not valid JSON/YAML"):
        load_inventory(bad)
    lst = tmp_path / "list.yaml"
    lst.write_text("- a\n- b\n")
    with pytest.raises(InventoryError, match="mapping"):
        load_inventory(lst)


def test_fingerprint_independent_of_key_and_table_order(tmp_path: Path) -> None:
    inv = _inv()
    data = inv.model_dump(mode="json")
    shuffled = {
        "tables": [dict(reversed(list(t.items()))) for t in reversed(data["tables"])],
        "name": "other-name",
    }
    p = tmp_path / "shuffled.json"
    p.write_text(json.dumps(shuffled))
    other = load_inventory(p)
    assert other.table_names == ["c", "b", "a"]
    assert other.fingerprint() == inv.fingerprint()
    assert len(inv.fingerprint()) == 64 and int(inv.fingerprint(), 16) >= 0


@pytest.mark.parametrize(
    "change",
    [
        {"num_embeddings": 1001},
        {"embedding_dim": 32},
        {"pooling_factor": 2.5},
        {"dtype": "fp16"},
        {"access_histogram": None},
        {"name": "a2"},
    ],
)
def test_fingerprint_changes_with_a_table(change: dict) -> None:
    inv = _inv()
    changed = Inventory(name=inv.name, tables=(inv.tables[0].model_copy(update=change), *inv.tables[1:]))
    assert changed.fingerprint() != inv.fingerprint()


@pytest.mark.parametrize(
    "hist,match",
    [
        ((1.0,) * 16, "17 bins"),
        ((0.5,) + (0.0,) * 16, "sum to 1"),
        ((1.5, -0.5) + (0.0,) * 15, ">= 0"),
        ((float("nan"),) + (0.0,) * 16, "finite"),
    ],
)
def test_histogram_validation(hist: tuple, match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        Table(name="h", num_embeddings=10, embedding_dim=4, pooling_factor=1.0, access_histogram=hist)


def test_table_field_limits() -> None:
    for bad in ({"num_embeddings": 0}, {"embedding_dim": 0}, {"pooling_factor": -1.0}, {"dtype": "int8"}, {"name": ""}):
        args = dict(name="t", num_embeddings=10, embedding_dim=4, pooling_factor=1.0) | bad
        with pytest.raises(ValidationError, match=next(iter(bad))):
            Table(**args)


def test_duplicate_names_rejected() -> None:
    t = Table(name="dup", num_embeddings=10, embedding_dim=4, pooling_factor=1.0)
    with pytest.raises(ValidationError, match="duplicate table name 'dup'"):
        Inventory(name="d", tables=(t, t))
    with pytest.raises(ValidationError):
        Inventory(name="empty", tables=())


def test_inventory_helpers() -> None:
    inv = _inv()
    assert inv.num_tables == 3 and inv.by_name()["b"].dtype == "fp16"
    assert inv.tables[0].size_bytes == 1000 * 16 * 4 and inv.tables[1].size_bytes == 50 * 8 * 2
    sub = inv.subset(["c", "a"], name="sub")
    assert sub.name == "sub" and sub.table_names == ["c", "a"]


def test_plan_to_torchrec() -> None:
    assert _plan().to_torchrec() == {
        "a": {"sharding_type": "table_wise", "compute_kernel": "fused", "ranks": [0]},
        "b": {"sharding_type": "table_wise", "compute_kernel": "fused", "ranks": [1]},
        "c": {"sharding_type": "table_wise", "compute_kernel": "fused", "ranks": [0]},
    }
    assert _plan().device_tables() == [["a", "c"], ["b"]]


def test_plan_validation() -> None:
    with pytest.raises(ValidationError, match="table 'b' placed on device 2 but topology has 2 devices"):
        _plan(placement={"a": 0, "b": 2, "c": 0})
    with pytest.raises(ValidationError, match="memory_per_device_gb has 3 entries, expected 2"):
        _plan(memory_per_device_gb=(0.1, 0.2, 0.3))
    with pytest.raises(ValidationError, match="predicted has 1 devices, expected 2"):
        _plan(predicted=Costs.from_devices([DeviceCost.zero()]))
    with pytest.raises(ValidationError):
        _plan(placement={"a": -1})


def test_plan_file_errors_are_plan_errors(tmp_path: Path) -> None:
    data = json.loads(_plan().model_dump_json())
    data["placement"]["a"] = 5
    p = tmp_path / "plan.json"
    p.write_text(json.dumps(data))
    with pytest.raises(PlanError, match="device 5"):
        load_plan(p)


def test_measurement_file_errors(tmp_path) -> None:
    """A complete but invalid line is an error naming the line; only an unterminated last line is a partial write."""
    from dreamshard.documents import load_measurements
    from dreamshard.errors import InputFileError

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"not": "a measurement"}\n')
    with pytest.raises(InputFileError, match=r"bad.jsonl:1: "):
        load_measurements(bad)
    partial = tmp_path / "partial.jsonl"
    partial.write_text('{"measurement_id": "m-1", "ki')
    assert load_measurements(partial) == []


def test_one_embedding_dim_rule_for_tables_synth_presets_and_column_shards() -> None:
    from dreamshard.errors import ConfigError
    from dreamshard.inventory.presets import preset_inventory
    from dreamshard.inventory.synth import check_dims
    from dreamshard.placement.expand import split_counts
    from dreamshard.values import dim_problem

    assert dim_problem(8) is None and dim_problem(4) is None
    assert all("positive multiple of 4" in (dim_problem(d) or "") for d in (6, 0, 2, -4))
    with pytest.raises(ValidationError, match="6 is not a positive multiple of 4 .*pad it to 8"):
        Table(name="t", num_embeddings=10, embedding_dim=6, pooling_factor=1.0)
    with pytest.raises(ConfigError, match="dims: 6 is not a positive multiple of 4"):
        check_dims([6])
    with pytest.raises(ConfigError, match="dim 6 is not a positive multiple of 4 .*try --dim 8"):
        preset_inventory("criteo-kaggle", dim=6)
    assert split_counts(24) == [2, 3, 6]  # shard widths 12, 8, 4: every width obeys the same rule


def test_load_yaml_reads_what_safe_load_reads_with_libyaml_when_built_with_it(tmp_path: Path) -> None:
    """Inventories and params are read with libyaml's safe loader (7x faster): the same documents as PyYAML's,
    and the same one-line error for a broken file."""
    from dreamshard.documents import read_structured
    from dreamshard.inventory.synth import synth_inventory
    from dreamshard.parsing import _SAFE_LOADER, load_yaml

    assert _SAFE_LOADER is (yaml.CSafeLoader if yaml.__with_libyaml__ else yaml.SafeLoader)
    root = Path(__file__).resolve().parents[1]
    save_inventory(synth_inventory(30, 3, name="p"), tmp_path / "inv.yaml")
    for f in (root / "params.yaml", root / "dvc.yaml", tmp_path / "inv.yaml"):
        assert load_yaml(f.read_text()) == yaml.safe_load(f.read_text())
    bad = tmp_path / "bad.yaml"
    bad.write_text("tables: [a, b\nname: x\n")
    with pytest.raises(InputFileError, match="not valid JSON/YAML"):
        read_structured(bad)
    with pytest.raises(yaml.YAMLError):
        load_yaml("!!python/object:os.system ls")  # a safe loader: no Python objects
