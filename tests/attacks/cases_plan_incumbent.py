"""Attacks on `plan -s dreamshard --incumbent FILE` (the current plan as a search candidate): an inventory file
instead of a plan and a plan with a table on a device the topology does not have are refused in one line; a
plan that shares no table with the inventory, or is for another device count, is no candidate: the plan is made
without it. The files: `inv.yaml` (6 tables).

A truncated incumbent, `-o` onto the incumbent and `--incumbent` without the dreamshard sharder are
tests/test_learning_search.py's CLI test; `plans incumbent`'s own file is cases_incumbent.py's surface."""

from __future__ import annotations

import json
from pathlib import Path

from harness import Case, Refused, Result, Runs, Setup, Table

from dreamshard.documents import load_inventory, save_inventory, save_plan
from dreamshard.inventory.synth import synth_inventory
from dreamshard.sharders import get_sharder
from dreamshard.values import Topology

TOPO = Topology(num_devices=2, memory_per_device_gb=1.0, batch_size=512)
PLAN = "plan -i inv.yaml -d 2 -m 1 --batch-size 512 --incumbent inc.json -o p.json --explain"


def world(d: Path) -> None:
    save_inventory(synth_inventory(6, 0, name="inv"), d / "inv.yaml")


def _inventory_file(work: Path) -> None:
    save_inventory(load_inventory(work / "inv.yaml"), work / "inc.json")


def _off_the_topology(work: Path) -> None:
    inv = load_inventory(work / "inv.yaml")
    data = json.loads(get_sharder("size_greedy").shard(inv, TOPO).model_dump_json())
    data["placement"][inv.tables[0].name] = 7
    (work / "inc.json").write_text(json.dumps(data))


def _another_inventory(work: Path) -> None:
    other = synth_inventory(4, 5, name="other")
    other = other.model_copy(
        update={"tables": tuple(t.model_copy(update={"name": f"z{t.name}"}) for t in other.tables)}
    )
    save_plan(get_sharder("size_greedy").shard(other, TOPO), work / "inc.json")


def _three_devices(work: Path) -> None:
    inv = load_inventory(work / "inv.yaml")
    save_plan(get_sharder("size_greedy").shard(inv, TOPO.model_copy(update={"num_devices": 3})), work / "inc.json")


def _planned_without_current(work: Path, r: Result) -> None:
    assert (work / "p.json").exists()
    assert "current: no plan: " in r.out, r.out[-300:]  # the explanation's candidate list says why


REFUSED: dict[str, tuple[Setup, str]] = {
    "an inventory file, not a plan": (_inventory_file, "inc.json"),
    "a plan with a table on device 7 of 2": (_off_the_topology, "inc.json"),
}
NO_CANDIDATE: dict[str, Setup] = {
    "a plan of another inventory (no table in common)": _another_inventory,
    "a plan for 3 devices (the topology has 2)": _three_devices,
}

CASES: list[Case] = [
    *(Refused(f"plan --incumbent {what}", PLAN, needle, setup=setup) for what, (setup, needle) in REFUSED.items()),
    *(
        Runs(f"plan --incumbent {what}: planned without it", PLAN, _planned_without_current, setup=setup)
        for what, setup in NO_CANDIDATE.items()
    ),
]

TABLE = Table("plan --incumbent", CASES, world)
