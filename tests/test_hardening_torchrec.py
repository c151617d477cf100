"""Issue 18 items 9 and 10: the TorchRec plan file and its readers.

18.9: `dreamshard torchrec export` checks the plan against the inventory with THE placement rule
(`memory.check_plan`, as `plans publish` and `compare --plan` do): a missing, unknown or doubly placed table, or
a device over its memory, is a one-line exit 2 and no file.
18.10: one TorchRec file, one placement: `TableSharding.column_shards` is the one reader of a file's column
shards (range i on rank i as listed, in column order), used by `torchrec import` and `load_sharding_plan` alike.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hardening_support import TORCHREC_INV

from dreamshard.cli.app import invoke
from dreamshard.documents import load_plan, save_inventory, save_plan
from dreamshard.errors import PlanError
from dreamshard.integrations.torchrec import build_ebc, load_sharding_plan, sharding_plan
from dreamshard.integrations.torchrec_file import read_torchrec_plan, torchrec_document
from dreamshard.sharders import make_plan
from dreamshard.values import ColumnShard, Inventory, Plan, Table, Topology

INV = TORCHREC_INV
TOPO = Topology(num_devices=2, memory_per_device_gb=1.0)


def _plan() -> Plan:
    return make_plan(
        INV,
        TOPO,
        {"a": 0, "c": 1},
        "hand",
        column_shards={"b": (ColumnShard(start=0, end=16, device=1), ColumnShard(start=16, end=32, device=0))},
    )


def _one_line_2(r: tuple[int, str, str], *needles: str) -> bool:
    lines = r[2].strip().splitlines()
    return r[0] == 2 and len(lines) == 1 and "Traceback" not in r[2] and all(n in r[2] for n in needles)


# 18.9 ---------------------------------------------------------------------------------------------------------

EDITS: dict[str, tuple[Callable[[dict[str, Any]], None], tuple[str, ...]]] = {
    "missing table": (lambda p: p["placement"].pop("c"), ("table 'c' has no device",)),
    "all tables missing": (lambda p: p.update(placement={}, column_shards={}), ("has no device",)),
    "unknown table": (lambda p: p["placement"].update(ghost=1), ("table 'ghost'", "not in inventory 'small'")),
    "a shard unit as a table": (lambda p: p["placement"].update({"b@0:16": 1}), ("table 'b@0:16'", "not in inventory")),
    "whole and split": (lambda p: p["placement"].update(b=1), ("table 'b' is both placed whole and split",)),
    "over memory": (
        lambda p: p["topology"].update(memory_per_device_gb=1e-6),
        ("device ", "over its 1e-06 GB memory limit"),
    ),
    "forged memory figure": (lambda p: p.update(memory_per_device_gb=[0.0, 0.0]), ("states 0 GB on device 0",)),
    "shards that do not tile": (lambda p: p["column_shards"]["b"].pop(), ("column shards of table 'b'",)),
}


@pytest.mark.parametrize("what", list(EDITS))
def test_export_refuses_a_plan_that_is_not_legal_for_the_inventory(tmp_path: Path, what: str) -> None:
    edit, needles = EDITS[what]
    data = json.loads(_plan().model_dump_json())
    edit(data)
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(json.dumps(data))
    inv_path = save_inventory(INV, tmp_path / "inv.yaml")
    out = tmp_path / "tr.json"
    r = invoke(["torchrec", "export", str(plan_path), "-i", str(inv_path), "-o", str(out)])
    assert _one_line_2(r, *needles), r
    assert not out.exists()


def test_export_still_writes_a_legal_plan(tmp_path: Path) -> None:
    plan = _plan()
    inv_path, plan_path = save_inventory(INV, tmp_path / "inv.yaml"), save_plan(plan, tmp_path / "plan.json")
    out = tmp_path / "tr.json"
    r = invoke(["torchrec", "export", str(plan_path), "-i", str(inv_path), "-o", str(out)])
    assert r[0] == 0, r
    assert read_torchrec_plan(out) == torchrec_document(plan, INV)


def test_the_library_export_and_sharding_plan_check_the_plan_too() -> None:
    """An in-memory Plan edited past its validators (model_copy) meets the same rule in `torchrec_document` and
    in `sharding_plan(plan, module, inventory=...)` (the route of the store's current plan)."""
    plan = _plan()
    both = plan.model_copy(update={"placement": {**plan.placement, "b": 0}})
    with pytest.raises(PlanError, match="table 'b' is both placed whole and split"):
        torchrec_document(both, INV)
    missing = plan.model_copy(update={"placement": {"a": 0}})
    with pytest.raises(PlanError, match="table 'c' has no device"):
        torchrec_document(missing, INV)
    with pytest.raises(PlanError, match="table 'c' has no device"):
        sharding_plan(missing, build_ebc(INV), inventory=INV)
    over = plan.model_copy(update={"topology": TOPO.model_copy(update={"memory_per_device_gb": 1e-6})})
    with pytest.raises(PlanError, match="over its 1e-06 GB memory limit"):
        torchrec_document(over, INV)


# 18.10 --------------------------------------------------------------------------------------------------------

ONE = Inventory(name="one", tables=(Table(name="t", num_embeddings=300, embedding_dim=16, pooling_factor=1.0),))


def _file(tmp_path: Path, ranges: list[list[int]], ranks: list[int]) -> Path:
    path = tmp_path / "tr.json"
    path.write_text(
        json.dumps(
            {
                "world_size": 2,
                "tables": {"t": {"sharding_type": "column_wise", "ranks": ranks, "column_ranges": ranges}},
            }
        )
    )
    return path


def _imported(tmp_path: Path, path: Path) -> tuple[tuple[int, str, str], Path]:
    inv_path = save_inventory(ONE, tmp_path / "one.yaml")
    out = tmp_path / "imported.json"
    return invoke(["torchrec", "import", str(path), "-i", str(inv_path), "-m", "1", "-o", str(out)]), out


def _loaded(path: Path) -> list[tuple[int, int, int]]:
    ps = load_sharding_plan(path, build_ebc(ONE)).plan[""]["t"]
    shards = [
        (int(s.shard_offsets[1]), int(s.shard_offsets[1] + s.shard_sizes[1]), s.placement.rank())
        for s in ps.sharding_spec.shards
    ]
    assert list(ps.ranks) == [r for *_, r in shards]  # ParameterSharding.ranks in the shards' order
    return shards


@pytest.mark.parametrize(
    ("ranges", "expected"),
    [
        ([[8, 16], [0, 8]], [(0, 8, 1), (8, 16, 0)]),  # equal widths: TorchRec's column_wise(ranks=...)
        ([[4, 16], [0, 4]], [(0, 4, 1), (4, 16, 0)]),  # unequal widths: ShardMetadata
        ([[0, 8], [8, 16]], [(0, 8, 0), (8, 16, 1)]),  # column order: as before
    ],
)
def test_import_and_load_sharding_plan_read_one_placement(
    tmp_path: Path, ranges: list[list[int]], expected: list[tuple[int, int, int]]
) -> None:
    path = _file(tmp_path, ranges, [0, 1])
    r, out = _imported(tmp_path, path)
    assert r[0] == 0, r
    imported = [(sh.start, sh.end, sh.device) for sh in load_plan(out).column_shards["t"]]
    assert imported == expected
    assert _loaded(path) == expected  # columns 0:x live on the same rank whichever reader read the file
    doc = read_torchrec_plan(path)
    assert [(sh.start, sh.end, sh.device) for sh in doc.tables["t"].column_shards()] == expected


@pytest.mark.parametrize(
    ("ranges", "where"),
    [
        ([[8, 16], [0, 12]], "gap or overlap at column 12"),  # overlap, out of order
        ([[12, 16], [0, 8]], "gap or overlap at column 8"),  # gap, out of order
        ([[0, 8], [0, 8]], "gap or overlap at column 8"),
    ],  # the same range twice
)
def test_overlapping_or_gapped_ranges_stay_refused_by_both_readers(
    tmp_path: Path, ranges: list[list[int]], where: str
) -> None:
    path = _file(tmp_path, ranges, [0, 1])
    r, out = _imported(tmp_path, path)
    assert _one_line_2(r, "table 't'", where), r
    assert not out.exists()
    with pytest.raises(PlanError, match=where):
        load_sharding_plan(path, build_ebc(ONE))
