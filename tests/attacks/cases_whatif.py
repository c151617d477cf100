"""Attacks on `dreamshard whatif --add-table / --remove-table` through the CLI: specs the parser cannot read as
one table (empty pairs, path-like or huge names, numbers out of range), a table added twice, the inventory itself
as the tables to add, and output paths onto the inputs or each other. The files: `inv.yaml` (6 tables) and
`plan.json`, its size_greedy plan on 3 devices.

The spec parser's other refusals (unknown or repeated keys, dim not a multiple of 4, NaN pooling, a `like` that
is not a table, removing what is not there or everything, ...) are tests of `parse_added` and `what_if` in
tests/test_explain.py; `--out` without `--inventory-out` is its CLI test."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from harness import MAX_LINE, Case, Refused, Table

from dreamshard.documents import save_inventory, save_plan
from dreamshard.inventory.synth import synth_inventory
from dreamshard.sharders import get_sharder
from dreamshard.values import Topology


def world(d: Path) -> None:
    inv = synth_inventory(6, 0, name="inv")
    save_inventory(inv, d / "inv.yaml")
    save_plan(get_sharder("size_greedy").shard(inv, Topology(num_devices=3, memory_per_device_gb=1.0)), d / "plan.json")


#: what the attack is -> (argv after `whatif plan.json -i inv.yaml`, what the one line must say)
ATTACKS: dict[str, tuple[list[str], str]] = {
    "an empty pair": (["--add-table", "name=x,,rows=5"], "expected KEY=VALUE pairs"),
    "a path as the name": (["--add-table", "name=../../etc/x,rows=5,dim=8,pooling=1"], "'../../etc/x'"),
    "a name of 5000 characters": (["--add-table", f"name={'a' * 5000},rows=5,dim=8,pooling=1"], "5000 characters"),
    "the same new table twice": (
        ["--add-table", "name=x,rows=5,dim=8,pooling=1", "--add-table", "name=x,rows=6,dim=8,pooling=1"],
        "'x' is already",
    ),
    "rows not a number": (["--add-table", "name=x,rows=lots,dim=8,pooling=1"], "rows 'lots'"),
    "rows 1e30": (["--add-table", "name=x,rows=1e30,dim=8,pooling=1"], "rows: "),
    "rows inf": (["--add-table", "name=x,rows=inf,dim=8,pooling=1"], "rows 'inf'"),
    "device 99 of 3": (["--add-table", "name=x,like=t0001,device=99"], "device 99 is out of range"),
    "the inventory itself as the tables to add": (["--add-table", "inv.yaml"], "already in inventory"),
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


def _whatif(argv: list[str]) -> Callable[[Path], list[str]]:
    return lambda work: ["whatif", "plan.json", "-i", "inv.yaml", *argv]


#: The error line echoes the whole 5000-character name (the inventory-name rule's message, as in cases_incumbent.py):
#: the one row whose line may be longer than harness.MAX_LINE until the name is shortened in the message.
ECHOES_THE_NAME = "a name of 5000 characters"

CASES: list[Case] = [
    Refused(f"whatif {what}", _whatif(argv), needle, max_line=5300 if what == ECHOES_THE_NAME else MAX_LINE)
    for what, (argv, needle) in ATTACKS.items()
]

TABLE = Table("whatif", CASES, world)
