"""What an attack case is and how it is judged: the one runner of the attack tables (tests/attacks/cases_*.py).

A table holds the hostile inputs of one surface (the gate, the plan store, training data, ...) and the files its
cases start from (`Table.world`). Every case runs in a fresh copy of those files, with the working directory
there, so a command names its files as a user would (`plans publish plan.json -i inv.yaml`). The kinds:

- `Refused`: the command refuses the input: exit 2, one line on stderr holding every needle and at most
  `MAX_LINE` characters, no traceback on either stream, and every file and folder of the work directory as it
  was (nothing half-written);
- `Runs`: the command succeeds (or reports, with `code` 1) without a traceback, and `then` holds: the
  documented recovery, or the lenient reading of an input;
- `Holds`: a check of the library outside one command (`check(work)` asserts).

The contract is docs/architecture/rules.md's ("Where each rule lives": one-line typed errors): bad input is one typed
line naming what is wrong.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from dreamshard.cli.app import invoke

#: The longest error line a hostile input may cause (a file of 100k shards must not make a 300 kB line).
MAX_LINE = 500


class Result(NamedTuple):
    """What a command did: its exit code and its two streams."""

    code: int
    out: str
    err: str


#: A command: its argv as the user types it (split like a shell does), or built from the work directory.
Command = str | Callable[[Path], list[str]]
#: Something a case does before its command: writes its hostile file, publishes a plan, ...
Setup = Callable[[Path], object]


@dataclass(frozen=True)
class Refused:
    """The command must refuse the input in one line naming it and change nothing."""

    what: str
    command: Command
    needles: str | tuple[str, ...] = ()
    setup: Setup | None = None
    #: The refusal must come within this many seconds (inputs that would allocate or loop for long).
    seconds: float | None = None
    #: Held around the command: a guard that makes a regression fail fast (e.g. no huge batch is ever drawn).
    guard: Callable[[], AbstractContextManager[object]] | None = None
    #: What else must hold after the refusal (`then(work, result)`).
    then: Callable[[Path, Result], object] | None = None
    #: The longest the line may be: MAX_LINE, unless a row says why its input is echoed whole.
    max_line: int = MAX_LINE


@dataclass(frozen=True)
class Runs:
    """The command must succeed (exit `code`, no traceback) and `then(work, result)` must hold."""

    what: str
    command: Command
    then: Callable[[Path, Result], object] | None = None
    setup: Setup | None = None
    code: int = 0
    seconds: float | None = None


@dataclass(frozen=True)
class Holds:
    """`check(work)` must pass: the library's behaviour where one command does not show it."""

    what: str
    check: Callable[[Path], object]


Case = Refused | Runs | Holds


@dataclass(frozen=True)
class Table:
    """The attack cases of one surface and the files they start from (written once, copied for each case)."""

    surface: str
    cases: Sequence[Case]
    world: Setup | None = None


def argv_of(command: Command, work: Path) -> list[str]:
    return shlex.split(command) if isinstance(command, str) else command(work)


def snap(d: Path) -> dict[str, bytes | str]:
    """Every file (its bytes), folder and link (where it points) under `d`, following no link."""
    out: dict[str, bytes | str] = {}
    for dirpath, dirs, files in os.walk(d):
        for name in [*dirs, *files]:
            p = Path(dirpath) / name
            key = str(p.relative_to(d))
            if p.is_symlink():
                out[key] = f"link to {os.readlink(p)}"
            elif p.is_dir():
                out[key] = "folder"
            else:
                out[key] = p.read_bytes()
    return out


def changes(before: dict[str, bytes | str], after: dict[str, bytes | str]) -> list[str]:
    """What differs between two snapshots: the paths added, removed or rewritten."""
    return sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))


def one_line(r: Result, *needles: str, max_line: int = MAX_LINE) -> str:
    """The one error line of a refusal holding every needle (asserted: exit 2, no traceback, short)."""
    lines = r.err.strip().splitlines()
    assert r.code == 2, f"exit {r.code}, expected 2: {r.err.strip()[-300:] or r.out.strip()[-300:]}"
    assert "Traceback" not in r.out + r.err, r.err[-2000:]
    assert len(lines) == 1, f"{len(lines)} lines on stderr: {lines[:5]}"
    assert len(lines[0]) <= max_line, f"a line of {len(lines[0])} characters: {lines[0][:200]}..."
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in: {lines[0]}"
    return lines[0]


def cli(argv: Sequence[str]) -> Result:
    """The CLI run in-process on `argv`."""
    return Result(*invoke(list(argv)))


def run(case: Case, work: Path) -> None:
    """Run one case in `work` (the current directory, holding its table's world) and assert what it expects."""
    if isinstance(case, Holds):
        case.check(work)
        return
    if case.setup is not None:
        case.setup(work)
    argv = argv_of(case.command, work)
    before = snap(work)
    guard = case.guard() if isinstance(case, Refused) and case.guard else nullcontext()
    t0 = time.perf_counter()
    with guard:
        r = cli(argv)
    wall = time.perf_counter() - t0
    if case.seconds is not None:
        assert wall < case.seconds, f"answered in {wall:.1f} s, more than {case.seconds} s"
    if isinstance(case, Refused):
        needles = (case.needles,) if isinstance(case.needles, str) else case.needles
        one_line(r, *needles, max_line=case.max_line)
        assert not changes(before, snap(work)), f"the refused command changed {changes(before, snap(work))}"
        if case.then is not None:
            case.then(work, r)
        return
    assert r.code == case.code, f"exit {r.code}, expected {case.code}: {r.err.strip()[-500:]}"
    assert "Traceback" not in r.out + r.err, r.err[-2000:]
    if case.then is not None:
        case.then(work, r)


def copy_world(template: Path, work: Path) -> Path:
    """A fresh copy of a table's starting files (links copied as links)."""
    shutil.copytree(template, work, symlinks=True)
    return work


def edited(src: str, dst: str, edit: Callable[[Any], object]) -> Setup:
    """A setup writing `dst`: the JSON file `src` of the work directory with `edit` applied to its data."""

    def setup(work: Path) -> None:
        data = json.loads((work / src).read_text())
        edit(data)
        (work / dst).write_text(json.dumps(data))

    return setup


def written(name: str, text: str | bytes) -> Setup:
    """A setup writing `text` to the file `name` of the work directory."""

    def setup(work: Path) -> None:
        p = work / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(text) if isinstance(text, bytes) else p.write_text(text)

    return setup
