"""Attacks on `plans incumbent` (the plan a new inventory version is planned from: the DVC `incumbent` stage, and by
hand before a `dvc repro`): relabelled, truncated, huge and colliding incumbent files, names no store key can hold,
outputs onto inputs or directories. The files: `store`, holding one published plan of inventory 'inv'
(tests/store_helpers.make_plan), and `good.json`, its incumbent as `plans incumbent` writes it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness import MAX_LINE, Case, Refused, Setup, Table, cli
from store_helpers import approve, make_plan

from dreamshard.store import LocalPlanStore, publish


def world(d: Path) -> None:
    plan = make_plan(inventory="inv")
    publish(LocalPlanStore(d / "store"), plan, approve(plan))
    argv = ["plans", "incumbent", "--inventory", "inv", "--store", str(d / "store"), "-o", str(d / "good.json")]
    code, _, err = cli(argv)
    assert code == 0, err


def _edited(**changes: Any) -> Setup:
    """in.json: the good incumbent with `changes` applied to its top-level fields."""

    def setup(work: Path) -> None:
        data = json.loads((work / "good.json").read_text())
        data.update(changes)
        (work / "in.json").write_text(json.dumps(data))

    return setup


def _in_json(make: Callable[[Path], object]) -> Setup:
    """in.json: what `make(work)` returns (text), or nothing when it makes the path itself."""

    def setup(work: Path) -> None:
        text = make(work)
        if isinstance(text, str):
            (work / "in.json").write_text(text)

    return setup


def _good(work: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((work / "good.json").read_text())
    return data


def _off_the_plan(work: Path) -> None:
    data = _good(work)
    data["placement"] = {**data["placement"], "t0": 9}
    (work / "in.json").write_text(json.dumps(data))


FROM = ["--from", "in.json", "-o", "out.json"]

#: what the attack is -> (the files it writes, argv after `plans incumbent`, what the one line must say)
ATTACKS: dict[str, tuple[Setup | None, list[str], str]] = {
    "a path as the inventory name": (
        None,
        ["--inventory", "../../etc", "-o", "out.json"],
        "inventory name '../../etc'",
    ),
    "an empty inventory name": (None, ["--inventory", "", "-o", "out.json"], "it is empty"),
    "an inventory name of 5000 characters": (None, ["--inventory", "a" * 5000, "-o", "out.json"], "5000 characters"),
    "a relabelled plan id with a path": (_edited(plan_id="../../x"), FROM, "plan id '../../x'"),
    "a plan id with a newline": (_edited(plan_id="a\nb"), FROM, "plan id 'a\\nb'"),
    "a relabelled inventory name": (_edited(inventory_name="x/y"), FROM, "inventory name 'x/y'"),
    "a table on a device the plan does not have": (_off_the_plan, FROM, "device 9"),
    "a plan and a note at once": (_edited(incumbent=None), FROM, "in.json"),
    "a note that holds a plan": (
        _in_json(lambda w: json.dumps({"incumbent": _good(w), "reason": "x"})),
        FROM,
        "incumbent: Input should be None",
    ),
    "a note with a 10000-character reason": (
        _in_json(lambda w: json.dumps({"incumbent": None, "reason": "r" * 10_000})),
        FROM,
        "at most 500 characters",
    ),
    "a truncated file": (_in_json(lambda w: (w / "good.json").read_text()[:120]), FROM, "not valid JSON"),
    "a 20 MB file of one string": (_in_json(lambda w: json.dumps("x" * 20_000_000)), FROM, "expected a mapping"),
    "a directory as --from": (_in_json(lambda w: (w / "in.json").mkdir()), FROM, "got a directory"),
    "--out onto --from": (None, ["--from", "good.json", "-o", "good.json"], "same file as --from"),
    "--out a directory": (
        lambda w: (w / "out.json").mkdir(),
        ["--from", "good.json", "-o", "out.json"],
        "is a directory",
    ),
    "both --from and --inventory": (
        None,
        ["--from", "good.json", "--inventory", "inv", "-o", "out.json"],
        "give one of",
    ),
}


def _argv(argv: list[str]) -> Callable[[Path], list[str]]:
    store = ["--store", "store"] if "--inventory" in argv else []
    return lambda work: ["plans", "incumbent", *argv, *store]


#: The error line echoes the whole 5000-character name (a defect of the store's name check, reported): the one row
#: whose line may be longer than harness.MAX_LINE until the name is shortened in the message.
ECHOES_THE_NAME = "an inventory name of 5000 characters"

CASES: list[Case] = [
    Refused(
        f"plans incumbent: {what}",
        _argv(argv),
        needle,
        setup=setup,
        max_line=5300 if what == ECHOES_THE_NAME else MAX_LINE,
    )
    for what, (setup, argv, needle) in ATTACKS.items()
]

TABLE = Table("incumbent", CASES, world)
