"""Hostile cases of `dreamshard plans incumbent` (the incumbent a new inventory version is planned from: the DVC
`incumbent` stage, and by hand before a `dvc repro`), run by bench/hostile_cases.py (`cases(directory, case)`);
tests/test_incumbent.py holds the same behaviour as tests.

Relabelled, truncated, huge and colliding incumbent files, names no store key can hold, outputs onto inputs or
directories. A case holds when the command refuses in one short line (exit 2, no traceback) naming the problem,
and every file in the directory is as it was.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from hostile_cases import snap  # noqa: E402 - bench/ is the script's directory
from store_helpers import approve, make_plan  # noqa: E402 - tests/ is not a package

from dreamshard.cli.app import invoke as cli  # noqa: E402
from dreamshard.store import LocalPlanStore, publish  # noqa: E402

Case = Callable[[str, str, str], Callable[[Callable[[], Any]], None]]


def _edit(src: Path, dst: Path, **changes: Any) -> None:
    data = json.loads(src.read_text())
    data.update(changes)
    dst.write_text(json.dumps(data))


#: what the attack is -> (how to make the directory's files from the store's good incumbent `good.json`, argv after
#: `plans incumbent`, what the one line must say)
ATTACKS: dict[str, tuple[Callable[[Path], None], list[str], str]] = {
    "a path as the inventory name": (
        lambda w: None,
        ["--inventory", "../../etc", "-o", "out.json"],
        "inventory name '../../etc'",
    ),
    "an empty inventory name": (lambda w: None, ["--inventory", "", "-o", "out.json"], "it is empty"),
    "an inventory name of 5000 characters": (
        lambda w: None,
        ["--inventory", "a" * 5000, "-o", "out.json"],
        "5000 characters",
    ),
    "a relabelled plan id with a path": (
        lambda w: _edit(w / "good.json", w / "in.json", plan_id="../../x"),
        ["--from", "in.json", "-o", "out.json"],
        "plan id '../../x'",
    ),
    "a plan id with a newline": (
        lambda w: _edit(w / "good.json", w / "in.json", plan_id="a\nb"),
        ["--from", "in.json", "-o", "out.json"],
        "plan id 'a\\nb'",
    ),
    "a relabelled inventory name": (
        lambda w: _edit(w / "good.json", w / "in.json", inventory_name="x/y"),
        ["--from", "in.json", "-o", "out.json"],
        "inventory name 'x/y'",
    ),
    "a table on a device the plan does not have": (
        lambda w: _edit(
            w / "good.json",
            w / "in.json",
            placement={**json.loads((w / "good.json").read_text())["placement"], "t0": 9},
        ),
        ["--from", "in.json", "-o", "out.json"],
        "device 9",
    ),
    "a plan and a note at once": (
        lambda w: _edit(w / "good.json", w / "in.json", incumbent=None),
        ["--from", "in.json", "-o", "out.json"],
        "in.json",
    ),
    "a note that holds a plan": (
        lambda w: (w / "in.json").write_text(
            json.dumps({"incumbent": json.loads((w / "good.json").read_text()), "reason": "x"})
        ),
        ["--from", "in.json", "-o", "out.json"],
        "incumbent: Input should be None",
    ),
    "a note with a 10000-character reason": (
        lambda w: (w / "in.json").write_text(json.dumps({"incumbent": None, "reason": "r" * 10_000})),
        ["--from", "in.json", "-o", "out.json"],
        "at most 500 characters",
    ),
    "a truncated file": (
        lambda w: (w / "in.json").write_text((w / "good.json").read_text()[:120]),
        ["--from", "in.json", "-o", "out.json"],
        "not valid JSON",
    ),
    "a 20 MB file of one string": (
        lambda w: (w / "in.json").write_text(json.dumps("x" * 20_000_000)),
        ["--from", "in.json", "-o", "out.json"],
        "expected a mapping",
    ),
    "a directory as --from": (
        lambda w: (w / "in.json").mkdir(),
        ["--from", "in.json", "-o", "out.json"],
        "got a directory",
    ),
    "--out onto --from": (lambda w: None, ["--from", "good.json", "-o", "good.json"], "same file as --from"),
    "--out a directory": (
        lambda w: (w / "out.json").mkdir(),
        ["--from", "good.json", "-o", "out.json"],
        "is a directory",
    ),
    "both --from and --inventory": (
        lambda w: None,
        ["--from", "good.json", "--inventory", "inv", "-o", "out.json"],
        "give one of",
    ),
}


def published_store(root: Path, inventory: str) -> Path:
    plan = make_plan(inventory=inventory)
    publish(LocalPlanStore(root), plan, approve(plan))
    return root


def cases(d: Path, case: Case) -> None:
    d.mkdir(parents=True, exist_ok=True)
    for i, (what, (make, argv, needle)) in enumerate(ATTACKS.items()):

        @case(
            "15.incumbent",
            f"plans incumbent {what}: refused in one line, nothing written",
            f"plans incumbent {' '.join(a if len(a) < 60 else a[:30] + '...' for a in argv)}",
        )
        def _(
            i: int = i, make: Callable[[Path], None] = make, argv: list[str] = argv, needle: str = needle
        ) -> tuple[bool, str]:
            w = d / str(i)
            store = published_store(w / "store", "inv")
            code, _, err = cli(
                ["plans", "incumbent", "--inventory", "inv", "--store", str(store), "-o", str(w / "good.json")]
            )
            assert code == 0, err
            make(w)
            before = snap(w)
            paths = [str(w / a) if a.endswith(".json") else a for a in argv]
            store_opt = ["--store", str(store)] if "--inventory" in argv else []
            code, out, err = cli(["plans", "incumbent", *paths, *store_opt])
            lines = err.strip().splitlines()
            ok = (
                code == 2
                and len(lines) == 1
                and "Traceback" not in out + err
                and needle in lines[0]
                and snap(w) == before
            )
            return ok, (lines[0] if lines else f"exit {code}")[:200]
