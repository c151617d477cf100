"""The package's import rules (docs/architecture.md, "Layers"): no import cycle in dreamshard/ (counting imports
inside functions too), no module over 400 lines, function-level imports only for optional heavy dependencies
(each with a comment saying which), the library CLI imports neither Prefect nor the flows package, and the CLI
works in an environment without Prefect."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "dreamshard"
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


def _late_imports(path: Path) -> list[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import inside a function, and whether a comment names it an optional dependency: on its own lines,
    or on the line above the run of consecutive imports it belongs to."""
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
            text = " ".join([lines[first - 2], *lines[node.lineno - 1: node.end_lineno or node.lineno]])
            out.append((node, "optional dependency" in text))
    return out


def test_function_level_imports_are_optional_dependencies_with_a_comment() -> None:
    bad = []
    for name, path in _modules().items():
        for node, commented in _late_imports(path):
            mod = node.names[0].name if isinstance(node, ast.Import) else (node.module or "")
            if getattr(node, "level", 0) or mod.split(".")[0] not in OPTIONAL or not commented:
                bad.append(f"{name}:{node.lineno} imports {mod or '.'}")
    assert bad == []


def _python(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})}, cwd=ROOT)


def test_library_cli_imports_neither_prefect_nor_the_flows() -> None:
    res = _python("import sys, dreamshard.cli.app\n"
                  "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('prefect', 'dreamshard_flows'))\n"
                  "print(bad)")
    assert res.returncode == 0 and res.stdout.strip() == "[]", res.stderr


def test_a_library_command_does_not_load_the_pipeline_plugin_and_the_top_level_help_lists_it() -> None:
    """Only `dreamshard pipeline ...` (and the top-level help) loads the flows: every DVC stage is a library
    command, and Prefect's import was 2.6 s of each one's start."""
    check = ("import sys\nfrom dreamshard.cli.app import main\ntry:\n    main({})\nexcept SystemExit:\n    pass\n"
             "print('LOADED' if 'prefect' in sys.modules else 'NOT-LOADED')")
    res = _python(check.format(["inventory", "--help"]))
    assert res.returncode == 0 and res.stdout.split()[-1] == "NOT-LOADED", res.stderr
    res = _python(check.format(["--help"]))
    assert res.returncode == 0 and "pipeline" in res.stdout and res.stdout.split()[-1] == "LOADED", res.stderr
    res = _python(check.format(["pipeline", "--help"]))
    assert res.returncode == 0 and "workspace" in res.stdout.lower() and res.stdout.split()[-1] == "LOADED"


def _without_prefect(tmp_path: Path) -> dict[str, str]:
    """An environment where `import prefect` fails, as in an installation without it."""
    fake = tmp_path / "no-prefect" / "prefect"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'prefect'\", name='prefect')\n")
    return {"PYTHONPATH": str(fake.parent)}


def test_the_cli_without_prefect(tmp_path: Path) -> None:
    env = _without_prefect(tmp_path)
    assert _python("import prefect", env).returncode != 0
    run = "from dreamshard.cli.app import main; main({})"
    res = _python(run.format(["inventory", "synth", "-n", "3", "-o", str(tmp_path / "inv.yaml")]), env)
    assert res.returncode == 0 and (tmp_path / "inv.yaml").is_file(), res.stderr
    res = _python(run.format(["pipeline", "status"]), env)  # the pipeline commands need Prefect: one line
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "prefect" in res.stderr, res.stderr


def test_the_late_import_check_reads_comments(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text("def f():\n    import json\n\n\ndef g():\n    # optional dependency: torchrec\n"
                   "    import torchrec\n    from torchrec import x\n    y = 1\n    import torchrec.z\n")
    found = [(n.lineno, ok) for n, ok in _late_imports(src)]
    assert found == [(2, False), (7, True), (8, True), (10, False)]
