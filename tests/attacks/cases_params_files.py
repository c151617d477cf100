"""Attacks on `--params` files: every command that takes one validates the file whole (every section, strict
numbers and booleans, unknown keys), even the sections it does not read and the keys its own options override.
`dreamshard evaluate --params q.yaml` with `evaluate: {rounds: true}` or `{rounds: 0}` exited 0 (its --rounds
default replaced the file's value before anything read it). One line naming the file, the section and the key."""

from __future__ import annotations

from harness import Case, Refused, Table, written

#: (what, the params file, needles of the refusal)
FILES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("rounds: true", "evaluate: {rounds: true}\n", ("q.yaml", "evaluate.rounds", "must be a number")),
    ("rounds: 0", "evaluate: {rounds: 0}\n", ("q.yaml", "evaluate.rounds", "greater than or equal to 1")),
    ("a typo in a key", "evaluate: {roundz: 3}\n", ("q.yaml", "evaluate.roundz", "Extra inputs")),
    ("a boolean as a string", 'evaluate: {stop_early: "yes"}\n', ("q.yaml", "evaluate.stop_early", "true or false")),
    ("a section the command does not read", "train: {iterations: -1}\n", ("q.yaml", "train.iterations")),
    ("an unknown section", "evaluat: {rounds: 3}\n", ("q.yaml", "evaluat")),
    # the drift monitor's paired check: an interval needs two rounds, a reference plan comes from a heuristic
    ("drift rounds: 1", "drift: {rounds: 1}\n", ("q.yaml", "drift.rounds", "greater than or equal to 2")),
    ("drift confidence: 1", "drift: {confidence: 1}\n", ("q.yaml", "drift.confidence", "less than 1")),
    (
        "a learned drift reference",
        "drift: {reference_sharders: [dreamshard]}\n",
        ("q.yaml", "drift.reference_sharders", "unknown reference sharder 'dreamshard'"),
    ),
    ("no drift reference", "drift: {reference_sharders: []}\n", ("q.yaml", "drift.reference_sharders", "at least one")),
)
#: Commands taking --params, each on files that exist (the refusal must come from the params file).
COMMANDS: tuple[str, ...] = (
    "evaluate -i inv.yaml -p plan.json --backend simulator --params q.yaml",
    "compare -i inv.yaml -d 2 --sharders size_greedy --backend simulator --params q.yaml",
    "plan -i inv.yaml -d 2 -s size_greedy -o out.json --params q.yaml",
)


def world(d: object) -> None:
    from pathlib import Path

    from dreamshard.documents import save_inventory, save_plan
    from dreamshard.inventory.synth import synth_inventory
    from dreamshard.sharders import get_sharder
    from dreamshard.values import Topology

    work = Path(str(d))
    inv = synth_inventory(6, seed=0, name="inv")
    save_inventory(inv, work / "inv.yaml")
    save_plan(
        get_sharder("size_greedy").shard(inv, Topology(num_devices=2, memory_per_device_gb=16.0)), work / "plan.json"
    )


def _cases() -> list[Case]:
    return [
        Refused(f"{command.split()[0]}: {what}", command, needles, setup=written("q.yaml", text))
        for command in COMMANDS
        for what, text, needles in FILES
    ]


TABLE = Table("params files", _cases(), world)
