"""Hostile cases of `dreamshard whatif --add-table / --remove-table` (issue 17 item 4) and of `plan --incumbent`
(the current plan as a search candidate), run by bench/hostile_cases.py (`cases(directory, case)`);
tests/test_explain.py and tests/test_learning_search.py hold the same behaviour as tests.

Malformed, colliding, huge, relabelled and path-like specs, removals that name nothing or everything, and output
paths that collide with the inputs or each other. A case holds when the command refuses in one short line (exit 2,
no traceback) naming the spec or the field, and every file in the directory is as it was; for an incumbent
that shares nothing with the inventory or has another device count, when the plan is made without the `current`
candidate.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from hostile_cases import snap  # bench/ is the script's directory

from dreamshard.cli.app import invoke as cli
from dreamshard.documents import save_inventory, save_plan
from dreamshard.inventory.synth import synth_inventory
from dreamshard.sharders import get_sharder
from dreamshard.values import Topology

Case = Callable[[str, str, str], Callable[[Callable[[], Any]], None]]

#: argv after `whatif plan.json -i inv.yaml`, and what the one line must say.
ATTACKS: dict[str, tuple[list[str], str]] = {
    "a spec without '='": (["--add-table", "t_new"], "neither a KEY=VALUE spec"),
    "an empty pair": (["--add-table", "name=x,,rows=5"], "expected KEY=VALUE pairs"),
    "an unknown key": (["--add-table", "name=x,rows=5,dim=8,pooling=1,hist=3"], "unknown key 'hist'"),
    "a key twice": (["--add-table", "name=x,rows=5,rows=9,dim=8,pooling=1"], "'rows' is given twice"),
    "no name": (["--add-table", "rows=5,dim=8,pooling=1"], "'name' is required"),
    "a path as the name": (["--add-table", "name=../../etc/x,rows=5,dim=8,pooling=1"], "'../../etc/x'"),
    "a name of 5000 characters": (["--add-table", f"name={'a' * 5000},rows=5,dim=8,pooling=1"], "5000 characters"),
    "an existing table's name": (["--add-table", "name=t0001,rows=5,dim=8,pooling=1"], "'t0001' is already"),
    "the same new table twice": (
        ["--add-table", "name=x,rows=5,dim=8,pooling=1", "--add-table", "name=x,rows=6,dim=8,pooling=1"],
        "'x' is already",
    ),
    "rows not a number": (["--add-table", "name=x,rows=lots,dim=8,pooling=1"], "rows 'lots'"),
    "rows 1e30": (["--add-table", "name=x,rows=1e30,dim=8,pooling=1"], "rows: "),
    "rows inf": (["--add-table", "name=x,rows=inf,dim=8,pooling=1"], "rows 'inf'"),
    "dim 6": (["--add-table", "name=x,rows=5,dim=6,pooling=1"], "multiple of 4"),
    "pooling -1": (["--add-table", "name=x,rows=5,dim=8,pooling=-1"], "pooling: "),
    "pooling nan": (["--add-table", "name=x,rows=5,dim=8,pooling=nan"], "pooling 'nan'"),
    "dtype int3": (["--add-table", "name=x,rows=5,dim=8,pooling=1,dtype=int3"], "dtype: "),
    "like a table that is not there": (["--add-table", "name=x,like=nope"], "like='nope'"),
    "device -1": (["--add-table", "name=x,like=t0001,device=-1"], "device '-1'"),
    "device out of range": (["--add-table", "name=x,like=t0001,device=99"], "device 99 is out of range"),
    "a table no device has room for": (
        ["--add-table", "name=x,rows=900000000,dim=512,pooling=1"],
        "no device has room",
    ),
    "the inventory itself as the tables to add": (["--add-table", "inv.yaml"], "already in inventory"),
    "remove a table that is not there": (["--remove-table", "nope"], "'nope' is not a table"),
    "remove every table": ([a for i in range(6) for a in ("--remove-table", f"t{i:04d}")], "without tables"),
    "move a removed table": (["--remove-table", "t0001", "--move", "t0001:0"], "not a unit"),
    "--out without --inventory-out": (["--add-table", "name=x,like=t0001", "-o", "new.json"], "--inventory-out"),
    "--inventory-out onto the inventory": (
        ["--remove-table", "t0001", "-o", "new.json", "--inventory-out", "inv.yaml"],
        "same file as --inventory",
    ),
    "--inventory-out onto --out": (
        ["--remove-table", "t0001", "-o", "new.json", "--inventory-out", "new.json"],
        "are the same file",
    ),
    "--inventory-out not yaml or json": (
        ["--remove-table", "t0001", "-o", "new.json", "--inventory-out", "inv.txt"],
        "name it .yaml",
    ),
}


def cases(d: Path, case: Case) -> None:
    d.mkdir(parents=True, exist_ok=True)
    topo = Topology(num_devices=3, memory_per_device_gb=1.0, batch_size=512)
    inv = synth_inventory(6, 0, name="inv")
    for i, (what, (argv, needle)) in enumerate(ATTACKS.items()):

        @case(
            "17.whatif",
            f"whatif {what}: refused in one line, nothing written",
            f"whatif plan.json -i inv.yaml {' '.join(a if len(a) < 60 else a[:40] + '...' for a in argv)}",
        )
        def _(i: int = i, argv: list[str] = argv, needle: str = needle) -> tuple[bool, str]:
            w = d / str(i)
            w.mkdir()
            save_inventory(inv, w / "inv.yaml")
            save_plan(get_sharder("size_greedy").shard(inv, topo), w / "plan.json")
            before = snap(w)
            paths = [str(w / a) if a.endswith((".json", ".yaml", ".txt")) else a for a in argv]
            code, out, err = cli(["whatif", str(w / "plan.json"), "-i", str(w / "inv.yaml"), *paths])
            lines = err.strip().splitlines()
            ok = (
                code == 2
                and len(lines) == 1
                and "Traceback" not in out + err
                and needle in lines[0]
                and snap(w) == before
            )
            return ok, (lines[0] if lines else f"exit {code}")[:200]


#: `plan -i inv.yaml -s dreamshard --incumbent X`: what X is, and the one line (None: planned without `current`).
INCUMBENTS: dict[str, str | None] = {
    "cut in half": "inc.json",
    "the output file itself": "same file as --incumbent",
    "an inventory file, not a plan": "inc.json",
    "a plan of another inventory (no table in common)": None,
    "a plan for 3 devices (the topology has 2)": None,
    "a plan with a table on device 7 of 2": "inc.json",
}


def incumbent_cases(d: Path, case: Case) -> None:
    import json

    topo = Topology(num_devices=2, memory_per_device_gb=1.0, batch_size=512)
    inv = synth_inventory(6, 0, name="inv")
    for i, (what, needle) in enumerate(INCUMBENTS.items()):

        @case(
            "17.incumbent",
            f"plan --incumbent {what}: "
            + ("refused in one line, nothing written" if needle else "planned without the current candidate"),
            "plan -i inv.yaml -d 2 --incumbent inc.json -o p.json",
        )
        def _(i: int = i, what: str = what, needle: str | None = needle) -> tuple[bool, str]:
            w = d / f"inc{i}"
            w.mkdir(parents=True)
            save_inventory(inv, w / "inv.yaml")
            good = get_sharder("size_greedy").shard(inv, topo)
            inc, out = w / "inc.json", w / "p.json"
            if what == "cut in half":
                save_plan(good, inc)
                inc.write_text(inc.read_text()[:150])
            elif what == "the output file itself":
                save_plan(good, inc)
                out = inc
            elif what.startswith("an inventory file"):
                save_inventory(inv, inc)
            elif what.startswith("a plan of another"):
                other = synth_inventory(4, 5, name="other").model_copy()
                other = other.model_copy(
                    update={"tables": tuple(t.model_copy(update={"name": f"z{t.name}"}) for t in other.tables)}
                )
                save_plan(get_sharder("size_greedy").shard(other, topo), inc)
            elif what.startswith("a plan for 3"):
                save_plan(get_sharder("size_greedy").shard(inv, topo.model_copy(update={"num_devices": 3})), inc)
            else:
                data = json.loads(good.model_dump_json())
                data["placement"][inv.tables[0].name] = 7
                inc.write_text(json.dumps(data))
            before = snap(w)
            code, outs, err = cli(
                [
                    "plan",
                    "-i",
                    str(w / "inv.yaml"),
                    "-d",
                    "2",
                    "-m",
                    "1",
                    "--batch-size",
                    "512",
                    "--incumbent",
                    str(inc),
                    "-o",
                    str(out),
                    "--explain",
                ]
            )
            lines = err.strip().splitlines()
            if needle is None:
                return code == 0 and out.exists() and "Traceback" not in outs + err, (lines or ["ok"])[-1][:200]
            ok = (
                code == 2
                and len(lines) == 1
                and needle in lines[0]
                and "Traceback" not in outs + err
                and snap(w) == before
            )
            return ok, (lines[0] if lines else f"exit {code}")[:200]
