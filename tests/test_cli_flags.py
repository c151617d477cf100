"""Library messages name settings, the CLI adds the flags (dreamshard.cli.flags): the flows and the DVC stages show
the library's text, so it must not speak of one door's options."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from dreamshard.cli.flags import with_flags

ROOT = Path(__file__).resolve().parents[1]
#: The modules whose messages name settings only (more join as their messages are reworded).
SETTING_WORDED = (
    "dreamshard/usecases/plan.py",
    "dreamshard/gate/decide.py",
    "dreamshard/search/sharders.py",
    "dreamshard/gate/checks.py",
    "dreamshard/gate/current.py",
    "dreamshard/usecases/publish.py",
    "dreamshard/usecases/replan.py",
    "dreamshard/usecases/pipeline_steps.py",
    "dreamshard/usecases/pipeline_run.py",
)
FLAG = re.compile(r"(?:^|[\s(`'])--[a-z]")
#: A whole command to run (`dreamshard plans publish PLAN --measure`): valid from every door, so it may name flags.
COMMAND = re.compile(r"`dreamshard [^`]*(?:`|$)")  # an f-string may cut it at a value


def flag_strings(source: str) -> list[str]:
    """The string literals of `source` (f-string parts included, docstrings left out) that name a CLI flag."""
    tree = ast.parse(source)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
        if FLAG.search(COMMAND.sub("", node.value))
    ]


def test_the_cli_adds_the_flag_after_the_setting_once() -> None:
    said = with_flags("plan.verify must be >= 0 candidates; plan.verify_rounds too; plan.verify again")
    assert said == (
        "plan.verify (--verify) must be >= 0 candidates; plan.verify_rounds (--verify-rounds) too; plan.verify again"
    )
    assert with_flags("plan.verify (--verify) given") == "plan.verify (--verify) given"  # already said
    assert with_flags("publish.min_rounds is 5") == "publish.min_rounds is 5"  # no flag sets it


def test_the_worded_modules_name_no_flag() -> None:
    bad = {f: flag_strings((ROOT / f).read_text()) for f in SETTING_WORDED}
    assert {f: s for f, s in bad.items() if s} == {}


def test_a_planted_flag_in_a_message_is_found() -> None:
    planted = 'def f(x):\n    """Docs may say --verify."""\n    raise ValueError(f"--verify must be >= 0, got {x}")\n'
    assert flag_strings(planted) == ["--verify must be >= 0, got "]
    command = 'raise ValueError("run `dreamshard plans publish PLAN --measure`")\n'
    assert flag_strings(command) == []  # a command to run names its flags
    assert flag_strings('raise ValueError("run `dreamshard plans publish PLAN` --measure")\n') != []
