"""Attacks on every kind of file a command parses, nested past any document's depth: 100,000 `[` (and the same
closed, and as YAML) as an inventory, a params file, a plan, a comparison and an incumbent. Python's JSON parser
recursed into a RecursionError traceback (exit 1, which `plans publish` reports as "rejected"); every file is now
parsed by dreamshard.documents, which refuses nesting deeper than `MAX_NESTING` in one line, exit 2.

The files: the World's (tests/store_helpers.py: inv.yaml, good.json, cmp.json, gate-params.yaml) and `store`
with nothing published, and `model`, a copy of the packaged model (its card is a file too)."""

from __future__ import annotations

import shutil
from pathlib import Path

from harness import Case, Refused, Setup, Table, written
from store_helpers import world

#: The hostile files: (what, name, text).
DEEP: tuple[tuple[str, str, str], ...] = (
    ("100,000 open [ in JSON", "deep.json", "[" * 100_000),
    ("100,000 closed [ in JSON", "deep.json", "[" * 100_000 + "]" * 100_000),
    ("100,000 open [ in YAML", "deep.yaml", "[" * 100_000),
    ("a JSON object 500 levels deep", "deep.json", '{"a":' * 500 + "1" + "}" * 500),
)
GATE = "--store store --params gate-params.yaml"
#: (the command and the kind of file it reads as FILE, the command line)
COMMANDS: tuple[tuple[str, str], ...] = (
    ("inventory validate", "inventory validate FILE"),
    ("plan -i", "plan -i FILE -d 2 -s size_greedy -o out.json"),
    ("plan --params", "plan -i inv.yaml -d 2 -s size_greedy -o out.json --params FILE"),
    ("plans publish PLAN", f"plans publish FILE -i inv.yaml --comparison cmp.json {GATE}"),
    ("plans publish --comparison", f"plans publish good.json -i inv.yaml --comparison FILE {GATE}"),
    ("plans incumbent --from", "plans incumbent --from FILE -o out.json"),
    ("plan --incumbent", "plan -i inv.yaml -d 2 -o out.json --incumbent FILE"),
)


def world_files(d: Path) -> None:
    from dreamshard.learning.model_store import PACKAGED_DIR

    world().write(d)
    (d / "store").mkdir()
    shutil.copytree(PACKAGED_DIR, d / "model")


def _deep_card(text: str) -> Setup:
    """The packaged model's copy with its card replaced by `text`."""
    return written("model/model.json", text)


def _cases() -> list[Case]:
    cases: list[Case] = [
        Refused(
            f"{door}: {what}",
            command.replace("FILE", name),
            (name, "nested deeper than 100 levels"),
            setup=written(name, text),
        )
        for what, name, text in DEEP
        for door, command in COMMANDS
    ]
    cases += [
        Refused(
            f"plan --model: a card of {what}",
            "plan -i inv.yaml -d 2 -o out.json --model model",
            ("model.json", "nested deeper than 100 levels"),
            setup=_deep_card(text),
        )
        for what, name, text in DEEP
        if name.endswith(".json")
    ]
    return cases


TABLE = Table("deeply nested files", _cases(), world_files)
