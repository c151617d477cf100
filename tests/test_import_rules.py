"""The package's import rules (docs/architecture/index.md, "Layers"): no import cycle in dreamshard/ (counting imports
inside functions too), no module over 400 lines, function-level imports only for optional heavy dependencies
(each with a comment saying which), the doors (`cli/`, `flows/`) import only use cases, settings, errors, value
types, rendering and the integrations, the library CLI imports neither Prefect nor the flows package, and the CLI
works in an environment without Prefect."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "dreamshard"
#: The doors: they parse, call a use case and render (docs/architecture/index.md, "Layers").
DOORS = (PACKAGE / "cli", ROOT / "flows")
#: What a door may import from the library, and why.
DOOR_ALLOWED = {
    "dreamshard.usecases": "the use cases",
    "dreamshard.config": "the settings (params.yaml, resolve)",
    "dreamshard.errors": "the typed errors",
    "dreamshard.documents": "the file adapter: inventories, plans and measurements read and written",
    "dreamshard.values": "the value types",
    "dreamshard.evaluation.render": "rendering plans and comparisons",
    "dreamshard.cli.console": "rendering tables where they are read",
    "dreamshard.cli.review": "the terminal as a reviewer (publish.require_human), where a command runs at one",
    "dreamshard.integrations": "the documented integrations (TorchRec)",
    "dreamshard.lazy": "lazy_module: a use case loaded when a command runs",
}
#: What a module of the CLI may import besides: the CLI's own modules.
CLI_OWN = "dreamshard.cli"
MAX_LINES = 400
#: Optional heavy dependencies a library function may import late (each line says which, in a comment).
OPTIONAL = ("torchrec", "fbgemm_gpu", "matplotlib", "boto3", "botocore", "prefect")


def _modules() -> dict[str, Path]:
    mods = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        mods[name.removesuffix(".__init__")] = path
    return mods


def _targets(module: str, node: ast.Import | ast.ImportFrom, is_pkg: bool, mods: dict[str, Path]) -> set[str]:
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        prefix = node.module or ""
        if node.level:
            parts = module.split(".") if is_pkg else module.split(".")[:-1]
            prefix = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
        names = [prefix, *(f"{prefix}.{a.name}" for a in node.names)]
    out = set()
    for n in names:
        while n and n not in mods:
            n = n.rpartition(".")[0]
        if n and n != module:
            out.add(n)
    return out


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    edges: dict[str, set[str]] = {}
    for name, path in mods.items():
        tree = ast.parse(path.read_text())
        edges[name] = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                edges[name] |= _targets(name, node, path.name == "__init__.py", mods)
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (a package __init__ re-exporting its own
    submodule is not a cycle)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in edges:
        if v not in index:
            visit(v)
    return [c for c in found if not (len(c) == 2 and c[1].startswith(c[0] + "."))]


def test_no_import_cycle_in_the_package() -> None:
    assert _cycles(_graph()) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"p": {"p.x"}, "p.x": {"p"}}) == []  # a package and the submodule it re-exports


def test_no_module_over_400_lines() -> None:
    long = {name: n for name, path in _modules().items() if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def _late_imports(path: Path) -> list[tuple[ast.Import | ast.ImportFrom, str]]:
    """Every import inside a function, and the text that may comment it: its own lines, and the line above the
    run of consecutive imports it belongs to."""
    lines = path.read_text().splitlines()
    out = []
    for fn in ast.walk(ast.parse(path.read_text())):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        nodes = sorted((n for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom))), key=lambda n: n.lineno)
        first = 0
        for i, node in enumerate(nodes):
            if i == 0 or node.lineno != (nodes[i - 1].end_lineno or nodes[i - 1].lineno) + 1:
                first = node.lineno  # a new run of consecutive imports starts here
            text = " ".join([lines[first - 2], *lines[node.lineno - 1 : node.end_lineno or node.lineno]])
            out.append((node, text))
    return out


def _module_of(node: ast.Import | ast.ImportFrom) -> str:
    """The module an import statement names (its first, for `import a, b`)."""
    return node.names[0].name if isinstance(node, ast.Import) else (node.module or "")


def _import_time(body: list[ast.stmt]) -> list[ast.Import | ast.ImportFrom]:
    """The imports a module runs when it is imported: its top-level statements and class bodies, into `if`, `try`
    and `with` blocks, leaving out function bodies and `if TYPE_CHECKING:` blocks."""
    out: list[ast.Import | ast.ImportFrom] = []
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.append(node)
        elif isinstance(node, ast.If):
            if not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
                out += _import_time(node.body)
            out += _import_time(node.orelse)
        elif isinstance(node, ast.Try):
            for part in (node.body, *(h.body for h in node.handlers), node.orelse, node.finalbody):
                out += _import_time(part)
        elif isinstance(node, (ast.With, ast.ClassDef)):
            out += _import_time(node.body)
    return out


def _loads_torch() -> set[str]:
    """The package's modules whose import imports torch: they import it, or import (or sit in a package that
    imports) a module that does."""
    mods = _modules()
    edges: dict[str, set[str]] = {}
    found: set[str] = set()
    for name, path in mods.items():
        nodes = _import_time(ast.parse(path.read_text()).body)
        if any(_module_of(n).split(".")[0] == "torch" for n in nodes):
            found.add(name)
        parents = {name.rsplit(".", i)[0] for i in range(1, name.count(".") + 1)}
        edges[name] = set().union(parents, *(_targets(name, n, path.name == "__init__.py", mods) for n in nodes))
    grew = True
    while grew:
        before = len(found)
        found |= {m for m, deps in edges.items() if deps & found}
        grew = len(found) > before
    return found


def named_modules(source: str) -> list[tuple[int, str]]:
    """Every module a source names for import, with its line: `import` and `from ... import` statements (at module
    level, in `if TYPE_CHECKING:` blocks, in functions) and the string arguments of `lazy_module(...)` and
    `importlib.import_module(...)`. `from dreamshard import x` names dreamshard.x; relative imports name no
    library module."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            if node.module == "dreamshard":
                found += [(node.lineno, f"dreamshard.{a.name}") for a in node.names]
            else:
                found.append((node.lineno, node.module))
        elif isinstance(node, ast.Call):
            called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if called in ("lazy_module", "import_module") and node.args:
                arg = node.args[0]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    found.append((node.lineno, arg.value))
    return found


def door_may_import(module: str, cli: bool) -> bool:
    """Whether a door may take `module`: anything outside the library, DOOR_ALLOWED, and for a CLI module the CLI's
    own modules."""
    allowed = (*DOOR_ALLOWED, CLI_OWN) if cli else tuple(DOOR_ALLOWED)
    return module.split(".")[0] != "dreamshard" or any(module == a or module.startswith(f"{a}.") for a in allowed)


def door_files() -> Iterator[tuple[str, str, bool]]:
    """Every door's source file: its text, its path from the repository root, and whether it is the CLI's."""
    for door in DOORS:
        for path in sorted(door.rglob("*.py")):
            yield path.read_text(), str(path.relative_to(ROOT)), door.name == "cli"


def door_violations(source: str, where: str, cli: bool) -> list[str]:
    """The library modules a door's source imports that it may not (`door_may_import`)."""
    return [
        f"{where}:{line} imports {module}" for line, module in named_modules(source) if not door_may_import(module, cli)
    ]


def test_the_doors_import_only_use_cases_settings_errors_values_rendering_and_integrations() -> None:
    """A command parses, calls one use case and renders; a Prefect task is one use-case call: a door importing the
    store, the gate or the workspace would be deciding something itself."""
    assert [v for source, where, cli in door_files() for v in door_violations(source, where, cli)] == []


def test_the_door_rule_catches_a_planted_violation(tmp_path: Path) -> None:
    planted = {
        "import dreamshard.store\n": "dreamshard.store",
        "from dreamshard.gate.publish_policy import publish_verdict\n": "dreamshard.gate.publish_policy",
        "from dreamshard import store\n": "dreamshard.store",
        "def f():\n    from dreamshard.pipeline.workspace import PipelineWorkspace\n": "dreamshard.pipeline.workspace",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from dreamshard.store import x\n": "dreamshard.store",
        "x = lazy_module('dreamshard.store.plans')\n": "dreamshard.store.plans",
        "import importlib\ny = importlib.import_module('dreamshard.profiling.oracle')\n": "dreamshard.profiling.oracle",
    }
    for source, module in planted.items():
        assert door_violations(source, "m.py", cli=False) == [f"m.py:{source.count(chr(10))} imports {module}"]
    fine = (
        "from dreamshard.usecases import plan\nfrom dreamshard.values import Plan\nimport dreamshard.errors\n"
        "from dreamshard.evaluation.render import device_table\nz = lazy_module('dreamshard.usecases.plan')\n"
        "from dreamshard.integrations.torchrec import sharding_plan\nfrom dreamshard.config.settings import resolve\n"
    )
    assert door_violations(fine, "m.py", cli=False) == []
    assert door_violations("from dreamshard.cli.options import JsonOpt\n", "m.py", cli=False) != []  # flows: no
    assert door_violations("from dreamshard.cli.options import JsonOpt\n", "m.py", cli=True) == []
    door = tmp_path / "flows" / "planted.py"  # a door file on disk, read like the real ones
    door.parent.mkdir()
    door.write_text("from dreamshard.usecases import replan\nfrom dreamshard.store import open_store\n")
    assert door_violations(door.read_text(), "flows/planted.py", cli=False) == [
        "flows/planted.py:2 imports dreamshard.store"
    ]


def test_function_level_imports_are_optional_dependencies_or_torch_with_a_comment() -> None:
    """A late import is an optional dependency (its comment says which), or torch or a module whose import loads
    torch, commented `loads torch`: the light commands (and the DVC stages that are light commands) start without
    torch (test_light_commands_run_without_torch); the claim is checked here, so it cannot hide another import.
    DVC's API is imported in one place, dreamshard.pipeline.dvc (in-process `dvc status`), commented `loads dvc`."""
    heavy = _loads_torch()
    bad = []
    for name, path in _modules().items():
        for node, said in _late_imports(path):
            mod = _module_of(node)
            torch_late = "loads torch" in said and (mod.split(".")[0] == "torch" or mod in heavy)
            optional = mod.split(".")[0] in OPTIONAL and "optional dependency" in said
            dvc_late = mod.split(".")[0] == "dvc" and "loads dvc" in said and name == "dreamshard.pipeline.dvc"
            if getattr(node, "level", 0) or not (torch_late or optional or dvc_late):
                bad.append(f"{name}:{node.lineno} imports {mod or '.'}")
    assert bad == []


def test_the_torch_finder_follows_packages_and_leaves_out_type_checking_blocks() -> None:
    heavy = _loads_torch()
    assert {
        "dreamshard.profiling.fbgemm_backend",
        "dreamshard.learning.model_store",
        "dreamshard.usecases.plan",
    } <= heavy
    assert (
        not {
            "dreamshard.config.settings",
            "dreamshard.cli.app",
            "dreamshard.profiling",
            "dreamshard.gate",
            "dreamshard.usecases.inventory",
            "dreamshard.usecases.taskset",
            "dreamshard.pipeline.incumbent",
        }
        & heavy
    )
    tree = ast.parse(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import torch\nelse:\n    import json\n"
        "class A:\n    import numpy\ndef f():\n    import yaml\n"
    )
    assert [_module_of(n) for n in _import_time(tree.body)] == ["typing", "json", "numpy"]


def _python(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
        cwd=ROOT,
    )


def test_library_cli_imports_neither_prefect_nor_the_flows() -> None:
    res = _python(
        "import sys, dreamshard.cli.app\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('prefect', 'dreamshard_flows'))\n"
        "print(bad)"
    )
    assert res.returncode == 0 and res.stdout.strip() == "[]", res.stderr


def test_a_library_command_does_not_load_the_pipeline_plugin_and_the_top_level_help_lists_it() -> None:
    """Only `dreamshard pipeline ...` (and the top-level help) loads the flows: every DVC stage is a library
    command, and Prefect's import was 2.6 s of each one's start."""
    check = (
        "import sys\nfrom dreamshard.cli.app import main\ntry:\n    main({})\nexcept SystemExit:\n    pass\n"
        "print('LOADED' if 'prefect' in sys.modules else 'NOT-LOADED')"
    )
    res = _python(check.format(["inventory", "--help"]))
    assert res.returncode == 0 and res.stdout.split()[-1] == "NOT-LOADED", res.stderr
    # The top-level help and the pipeline's help in one process (both load Prefect, 2.6 s a start)
    both = (
        "import sys\nfrom dreamshard.cli.app import invoke\n"
        "top, pipeline = invoke(['--help']), invoke(['pipeline', '--help'])\n"
        "print(top[0], 'pipeline' in top[1], pipeline[0], 'workspace' in pipeline[1].lower(), "
        "'LOADED' if 'prefect' in sys.modules else 'NOT-LOADED')"
    )
    res = _python(both)
    assert res.returncode == 0 and res.stdout.split()[-5:] == ["0", "True", "0", "True", "LOADED"], res.stderr


def test_the_cli_without_prefect(tmp_path: Path) -> None:
    env = _without("prefect", tmp_path)
    assert _python("import prefect", env).returncode != 0
    run = "from dreamshard.cli.app import main; main({})"
    res = _python(run.format(["inventory", "synth", "-n", "3", "-o", str(tmp_path / "inv.yaml")]), env)
    assert res.returncode == 0 and (tmp_path / "inv.yaml").is_file(), res.stderr
    res = _python(run.format(["pipeline", "status"]), env)  # the pipeline commands need Prefect: one line
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "prefect" in res.stderr, res.stderr


def _without(package: str, tmp_path: Path) -> dict[str, str]:
    """An environment where `import package` fails, as in an installation without it."""
    fake = tmp_path / f"no-{package}" / package
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(f"raise ModuleNotFoundError(\"No module named '{package}'\", name='{package}')\n")
    return {"PYTHONPATH": str(fake.parent)}


def test_light_commands_run_without_torch(tmp_path: Path) -> None:
    """The commands that only read, check and write files (and the DVC stages `inventory`, `incumbent` and
    `tasks`, which are such commands) never import torch: 1-2 s a start instead of 4-5 (dreamshard/lazy.py)."""
    inv, tasks, note, store = (tmp_path / n for n in ("inv.yaml", "tasks.json", "incumbent.json", "store"))
    env = _without("torch", tmp_path)
    assert _python("import torch", env).returncode != 0
    commands = [
        ["--help"],
        ["plans", "--help"],
        ["inventory", "synth", "-n", "12", "-o", str(inv)],
        ["inventory", "push", str(inv), "--store", str(store), "--no-event"],
        ["inventory", "validate", str(inv), "-o", str(tmp_path / "v.yaml")],
        ["plans", "incumbent", "--inventory", "pool", "--store", str(store), "-o", str(note)],
        ["plans", "incumbent", "--from", str(note), "-o", str(tmp_path / "i.json")],
        ["tasks", "--inventory", str(inv), "-o", str(tasks)],
        ["plans", "list", "--store", str(store)],
        ["plans", "show", "--store", str(store), "--inventory", "pool"],
        ["plan", "--inventory", str(inv), "--sharder", "dim_greedy", "-d", "2"],
    ]
    # One process runs them all in turn (where torch cannot load, the order does not matter): a process each cost
    # a second apiece
    res = _python(
        "import json\nfrom dreamshard.cli.app import invoke\n"
        "def answer(argv):\n"
        "    try:\n        return invoke(argv)[::2]\n"
        "    except ImportError as e:\n        return 1, repr(e)\n"
        f"print(json.dumps([answer(a) for a in {commands!r}]))",
        env,
    )
    assert res.returncode == 0, res.stderr
    answers = [tuple(a) for a in json.loads(res.stdout.splitlines()[-1])]
    for argv, (code, err) in zip(commands[:-2], answers, strict=False):  # the last two answers are checked below
        assert code == 0, (argv, err)
    assert tasks.is_file() and (tmp_path / "v.yaml").is_file() and (tmp_path / "i.json").is_file()
    code, err = answers[-2]
    assert code == 2 and "publish one first" in err  # the store's one line, not a torch import
    code, err = answers[-1]
    assert code != 0 and "torch" in err  # a command that measures or learns does need it


def test_the_late_import_check_reads_comments(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text(
        "def f():\n    import json\n\n\ndef g():\n    # optional dependency: torchrec\n"
        "    import torchrec\n    from torchrec import x\n    y = 1\n    import torchrec.z\n"
    )
    found = [(n.lineno, "optional dependency" in said) for n, said in _late_imports(src)]
    assert found == [(2, False), (7, True), (8, True), (10, False)]


MAX_BODY = 60


def long_functions(source: str, where: str) -> list[str]:
    """The functions of `source` whose body runs over MAX_BODY lines: from the first statement after the docstring
    to the last line (the signature, decorators and docstring not counted; a nested function counts in its outer
    one's body and on its own)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        body = node.body
        if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and len(body) > 1:
            body = body[1:]
        first = body[0]
        start = min([first.lineno, *(d.lineno for d in getattr(first, "decorator_list", []))])
        lines = (node.end_lineno or node.lineno) - start + 1
        if lines > MAX_BODY:
            found.append(f"{where}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_function_body_over_60_lines() -> None:
    files = sorted([*PACKAGE.rglob("*.py"), *(ROOT / "flows").rglob("*.py")])
    found = [f for p in files for f in long_functions(p.read_text(), str(p.relative_to(ROOT)))]
    assert found == []


def test_the_body_measure_catches_a_planted_long_function() -> None:
    statements = "".join(f"    x{i} = {i}\n" for i in range(MAX_BODY))
    doc = '    """A docstring\n    of three\n    lines."""\n'
    at_limit = f"def f(\n    a: int,\n) -> None:\n{doc}{statements}"
    assert long_functions(at_limit, "m.py") == []
    over = f"class C:\n    @staticmethod\n    def g() -> None:\n{doc.replace('    ', '        ')}"
    over += statements.replace("    ", "        ") + "        return None\n"
    assert long_functions(over, "m.py") == [f"m.py:3 g ({MAX_BODY + 1} lines)"]
