"""Attacks on plan files: duplicated, colliding, out-of-range, mistyped, huge (100k shards) and truncated
`row_shards` / `data_parallel` / `column_shards` / `placement` entries, read by `plans publish --measure`,
`compare --plan`, `torchrec export` and `whatif`; a stored typed plan edited behind its checksum; `whatif` moving
a row shard or a replica; a plan `torchrec export` must not write (the placement rule,
`dreamshard.placement.validate`, as the gate applies it)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from harness import Case, Holds, Refused, Result, Runs, Table, edited

from dreamshard.documents import save_inventory, save_plan
from dreamshard.values import ColumnShard, Inventory, Plan, Topology
from dreamshard.values import Table as EmbeddingTable

#: The inventory of the typed plans: a and e whole, b row-wise, c data-parallel.
TYPES_INV = Inventory(
    name="types",
    tables=(
        EmbeddingTable(name="a", num_embeddings=300, embedding_dim=16, pooling_factor=1.0),
        EmbeddingTable(name="b", num_embeddings=500, embedding_dim=32, pooling_factor=3.0),
        EmbeddingTable(name="c", num_embeddings=40, embedding_dim=8, pooling_factor=0.5),
        EmbeddingTable(name="e", num_embeddings=100, embedding_dim=8, pooling_factor=0.5),
    ),
)
TYPES_TOPO = Topology(num_devices=2, memory_per_device_gb=1.0, batch_size=512)
#: The inventory of the column-split plan (`torchrec export`).
SMALL_INV = Inventory(
    name="small",
    tables=(
        EmbeddingTable(name="a", num_embeddings=300, embedding_dim=16, pooling_factor=1.0),
        EmbeddingTable(name="b", num_embeddings=500, embedding_dim=32, pooling_factor=3.0),
        EmbeddingTable(name="c", num_embeddings=40, embedding_dim=8, pooling_factor=0.5),
    ),
)


def types_plan() -> Plan:
    """A legal plan of TYPES_INV with every sharding type: a and e whole, b row-wise over both devices, c
    data-parallel."""
    from dreamshard.sharders.base import make_plan
    from dreamshard.values.units import row_shards_for

    return make_plan(
        TYPES_INV,
        TYPES_TOPO,
        {"a": 0, "e": 1},
        "dreamshard",
        row_shards={"b": row_shards_for(500, [0, 1])},
        data_parallel=["c"],
    )


def split_plan() -> Plan:
    """A legal plan of SMALL_INV with b split in two column shards (its second half on device 0)."""
    from dreamshard.sharders import make_plan

    return make_plan(
        SMALL_INV,
        Topology(num_devices=2, memory_per_device_gb=1.0),
        {"a": 0, "c": 1},
        "hand",
        column_shards={"b": (ColumnShard(start=0, end=16, device=1), ColumnShard(start=16, end=32, device=0))},
    )


def world(d: Path) -> None:
    save_inventory(TYPES_INV, d / "inv.yaml")
    save_plan(types_plan(), d / "plan.json")
    save_inventory(SMALL_INV, d / "small.yaml")
    save_plan(split_plan(), d / "split.json")


def _rows(p: dict[str, Any], shards: list[dict[str, Any]]) -> None:
    p["row_shards"]["b"] = shards


def _dev(p: dict[str, Any], device: Any) -> None:
    p["row_shards"]["b"][1]["device"] = device


HUGE = 100_000
#: The typed plan file edited by the function; the one error line must hold the needle.
PLAN_ATTACKS: dict[str, tuple[Any, str]] = {
    "a table twice in data_parallel": (
        lambda p: p.update(data_parallel=["c", "c"]),
        "table 'c' is listed twice in data_parallel",
    ),
    f"{HUGE} copies of a table in data_parallel": (
        lambda p: p.update(data_parallel=["c"] * HUGE),
        "table 'c' is listed twice in data_parallel",
    ),
    "a table data-parallel and row-sharded": (
        lambda p: p.update(data_parallel=["c", "b"]),
        "table 'b' is both split into row shards and data-parallel",
    ),
    "a table data-parallel and whole": (
        lambda p: p.update(data_parallel=["c", "a"]),
        "table 'a' is both placed whole and data-parallel",
    ),
    "a row shard on device 5 of 2": (lambda p: _dev(p, 5), "row shard 250:500 of table 'b' placed on device 5"),
    "row shards on a duplicated device": (lambda p: _dev(p, 0), "row shards of table 'b' are on devices [0, 0]"),
    "a row shard on device -1": (lambda p: _dev(p, -1), "row_shards.b[1].device"),
    "a row shard on device true": (lambda p: _dev(p, True), "row_shards.b[1].device: must be a number, got bool"),
    "a row shard on device 1.5": (lambda p: _dev(p, 1.5), "row_shards.b[1].device"),
    "a row shard on device '1'": (lambda p: _dev(p, "1"), "row_shards.b[1].device: must be a number, got str"),
    "row shards past the table's rows": (
        lambda p: p["row_shards"]["b"][1].update(end=600),
        "row shards of table 'b' are [(0, 250), (250, 600)]",
    ),
    "row shards not TorchRec's blocks": (
        lambda p: _rows(p, [{"start": 0, "end": 100, "device": 0}, {"start": 100, "end": 500, "device": 1}]),
        "ceil(rows / shards)",
    ),
    "an empty list of row shards": (lambda p: _rows(p, []), "table 'b' has an empty list of row shards"),
    "the row-sharded table dropped": (lambda p: p.update(row_shards={}), "table 'b' has no device"),
    f"{HUGE} row shards on device 0": (
        lambda p: _rows(p, [{"start": i, "end": i + 1, "device": 0} for i in range(HUGE)]),
        f"({HUGE - 8} more, {HUGE} in all)",
    ),
    f"{HUGE} row shards on devices 0..{HUGE - 1}": (
        lambda p: _rows(p, [{"start": i, "end": i + 1, "device": i} for i in range(HUGE)]),
        "row shard 2:3 of table 'b' placed on device 2 but topology has 2 devices",
    ),
    "a row-shard unit name as a placement key": (
        lambda p: p["placement"].update({"b@r0:250": 0}),
        "table 'b@r0:250', which is not in inventory",
    ),
    "a column-shard unit name as a placement key": (
        lambda p: p["placement"].update({"a@0:4": 0}),
        "table 'a@0:4', which is not in inventory",
    ),
    "a replica unit name as a placement key": (
        lambda p: p["placement"].update({"c@dp0": 0}),
        "table 'c@dp0', which is not in inventory",
    ),
    "a unit name as a row_shards key": (
        lambda p: p["row_shards"].update(
            {"a@r0:10": [{"start": 0, "end": 150, "device": 0}, {"start": 150, "end": 300, "device": 1}]}
        ),
        "table 'a@r0:10', which is not in inventory",
    ),
    "a unit name in data_parallel": (
        lambda p: p.update(data_parallel=["c", "a@dp0"]),
        "table 'a@dp0', which is not in inventory",
    ),
    "a unit name as a column_shards key": (
        lambda p: p.update(
            column_shards={"e@0:4": [{"start": 0, "end": 4, "device": 0}, {"start": 4, "end": 8, "device": 1}]}
        ),
        "table 'e@0:4', which is not in inventory",
    ),
    "forged memory of a typed plan": (lambda p: p.update(memory_per_device_gb=[0.0, 0.0]), "states 0 GB on device 0"),
}

#: The commands that read a plan file ({plan}), each writing nothing when it refuses.
PLAN_COMMANDS = {
    "plans publish --measure": "plans publish {plan} -i inv.yaml --measure --store store --backend simulator "
    "--allow-simulated --sharders round_robin",
    "compare --plan": "compare -i inv.yaml --plan {plan} --backend simulator --rounds 1 --sharders round_robin "
    "--out out.json",
    "torchrec export": "torchrec export {plan} -i inv.yaml -o out.json",
    "whatif": "whatif {plan} -i inv.yaml --move a:1 -o out.json",
}

#: `whatif` on the typed plan: a row shard or a replica has no device of its own to move to.
WHATIF_MOVES = {
    "--move b@r0:250:1 (a row shard)": "--move b@r0:250:1",
    "--move b@r250:500:9 (a row shard, bad device)": "--move b@r250:500:9",
    "--move c@dp0:1 (a replica)": "--move c@dp0:1",
    "--swap b@r0:250,e (a row shard)": "--swap b@r0:250,e",
    "--swap c@dp0,e (a replica)": "--swap c@dp0,e",
}

#: The column-split plan file edited: `torchrec export` refuses it in one line holding the needle.
EXPORT_EDITS: dict[str, tuple[Any, str]] = {
    "a table missing": (lambda p: p["placement"].pop("c"), "table 'c' has no device"),
    "every table missing": (lambda p: p.update(placement={}, column_shards={}), "has no device"),
    "an unknown table": (lambda p: p["placement"].update(ghost=1), "table 'ghost', which is not in inventory 'small'"),
    "a column shard of a whole table as a table": (
        lambda p: p["placement"].update({"a@0:8": 1}),
        "table 'a@0:8', which is not",
    ),
    "a column shard of the split table as a table": (
        lambda p: p["placement"].update({"b@0:16": 1}),
        "table 'b@0:16', which is not in inventory",
    ),
    "a table both whole and split": (lambda p: p["placement"].update(b=1), "table 'b' is both placed whole and split"),
    "column shards that do not tile the table": (
        lambda p: p["column_shards"]["b"].pop(),
        "column shards of table 'b'",
    ),
    "a device over its memory": (
        lambda p: p["topology"].update(memory_per_device_gb=1e-6),
        "over its 1e-06 GB memory limit",
    ),
    "a forged memory figure": (lambda p: p.update(memory_per_device_gb=[0.0, 0.0]), "states 0 GB on device 0"),
}


def _truncated(work: Path) -> None:
    text = (work / "plan.json").read_text()
    (work / "cut.json").write_text(text[: len(text) // 2])


def _stored(tamper: bool) -> Any:
    """A setup publishing the typed plan (measured on the simulator) to `store`; with `tamper`, its stored file
    edited afterwards (c listed twice in data_parallel) and its checksum sidecar rewritten to match."""

    def setup(work: Path) -> None:
        from dreamshard.evaluation import evaluate_plan
        from dreamshard.gate import evaluate_gate
        from dreamshard.profiling import make_oracle
        from dreamshard.store import open_store, publish

        plan = evaluate_plan(TYPES_INV, types_plan(), make_oracle("simulator"))
        cost = plan.best_costs.overall_ms if plan.best_costs else 1.0
        publish(open_store(str(work / "store")), plan, evaluate_gate(plan, {"size_greedy": cost * 2}, 0.0))
        (work / "stored-id.txt").write_text(plan.plan_id)
        if tamper:
            f = next((work / "store").rglob(f"{plan.plan_id}.json"))
            data = json.loads(f.read_text())
            data["data_parallel"] = ["c", "c"]
            f.write_text(json.dumps(data))
            (f.parent / (f.name + ".sha256")).write_text(hashlib.sha256(f.read_bytes()).hexdigest() + "  x\n")

    return setup


def _show(work: Path) -> list[str]:
    return ["plans", "show", (work / "stored-id.txt").read_text(), "--store", "store", "--torchrec"]


def _shows_both_types(work: Path, r: Result) -> None:
    assert '"row_wise"' in r.out and '"data_parallel"' in r.out, r.out[:300]


def _exported_as_the_library_does(work: Path, r: Result) -> None:
    from dreamshard.documents import load_plan
    from dreamshard.integrations.torchrec_file import read_torchrec_plan, torchrec_document

    assert read_torchrec_plan(work / "tr.json") == torchrec_document(load_plan(work / "split.json"), SMALL_INV)


def _library_export_checks_the_plan(work: Path) -> None:
    """An in-memory plan edited past its validators (model_copy) meets the same rule in `torchrec_document` and
    `sharding_plan(plan, module, inventory=...)` (the route of the store's current plan)."""
    from dreamshard.errors import PlanError
    from dreamshard.integrations.torchrec import build_ebc, sharding_plan
    from dreamshard.integrations.torchrec_file import torchrec_document

    plan = split_plan()
    both = plan.model_copy(update={"placement": {**plan.placement, "b": 0}})
    with pytest.raises(PlanError, match="table 'b' is both placed whole and split"):
        torchrec_document(both, SMALL_INV)
    missing = plan.model_copy(update={"placement": {"a": 0}})
    with pytest.raises(PlanError, match="table 'c' has no device"):
        torchrec_document(missing, SMALL_INV)
    with pytest.raises(PlanError, match="table 'c' has no device"):
        sharding_plan(missing, build_ebc(SMALL_INV), inventory=SMALL_INV)
    over = plan.model_copy(update={"topology": plan.topology.model_copy(update={"memory_per_device_gb": 1e-6})})
    with pytest.raises(PlanError, match="over its 1e-06 GB memory limit"):
        torchrec_document(over, SMALL_INV)


def _cases() -> list[Case]:
    cases: list[Case] = [
        Refused(
            f"{command}: {what}",
            template.format(plan="bad.json"),
            needle,
            setup=edited("plan.json", "bad.json", edit),
            seconds=10,
        )
        for what, (edit, needle) in PLAN_ATTACKS.items()
        for command, template in PLAN_COMMANDS.items()
    ]
    cases += [
        Refused(
            f"{command}: a typed plan file cut in half",
            template.format(plan="cut.json"),
            "not valid JSON/YAML",
            setup=_truncated,
        )
        for command, template in PLAN_COMMANDS.items()
    ]
    cases += [
        Runs(
            "plans show --torchrec: a stored typed plan shows row_wise and data_parallel",
            _show,
            _shows_both_types,
            setup=_stored(False),
        ),
        Refused(
            "plans show --torchrec: a stored typed plan edited behind its checksum",
            _show,
            ("the object has sha256", "the pointer's history says"),  # verified against the store's own record
            setup=_stored(True),
        ),
    ]
    cases += [
        Refused(f"whatif {what}", f"whatif plan.json -i inv.yaml {move} -o moved.json", "cannot move on its own")
        for what, move in WHATIF_MOVES.items()
    ]
    cases += [
        Refused(
            f"torchrec export of a plan with {what}",
            "torchrec export edited.json -i small.yaml -o tr.json",
            needle,
            setup=edited("split.json", "edited.json", edit),
        )
        for what, (edit, needle) in EXPORT_EDITS.items()
    ]
    cases += [
        Runs(
            "torchrec export of the legal plan writes the library's document",
            "torchrec export split.json -i small.yaml -o tr.json",
            _exported_as_the_library_does,
        ),
        Holds(
            "an in-memory plan edited past its validators: the library's export refuses it too",
            _library_export_checks_the_plan,
        ),
    ]
    return cases


TABLE = Table("plan files", _cases(), world)
