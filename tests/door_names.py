"""Which module defines each library name a door uses (tests/test_door_reexports.py): a door's imports and the
attributes it reads off an imported library module, each followed through re-exports (`from x import n as n`,
`from x import n` in an `__init__`) to the module that defines it. A door that may import `dreamshard.usecases`
then cannot reach `dreamshard.store` by a use case re-exporting one of its names."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def module_path(module: str) -> Path | None:
    """The source file of a module of this repository (a package: its `__init__.py`); None for any other."""
    base = ROOT.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _absolute(module: str, node: ast.ImportFrom) -> str:
    """The module a `from ... import` names, relative imports resolved against `module`."""
    if not node.level:
        return node.module or ""
    path = module_path(module)
    parts = module.split(".") if path is not None and path.name == "__init__.py" else module.split(".")[:-1]
    parts = parts[: len(parts) - (node.level - 1)]
    return ".".join([*parts, *([node.module] if node.module else [])])


def _top_level(tree: ast.Module) -> Iterator[ast.stmt]:
    """The statements that run at import: the module body, and the bodies of its top-level `if` and `try`."""
    for node in tree.body:
        if isinstance(node, ast.If):
            yield from (*node.body, *node.orelse)
        elif isinstance(node, ast.Try):
            yield from (*node.body, *(s for h in node.handlers for s in h.body), *node.orelse)
        else:
            yield node


def defining_module(module: str, name: str, seen: frozenset[tuple[str, str]] = frozenset()) -> str:
    """The module that defines `name` as `module` exposes it: a submodule named so is itself; a name `module`
    imports from elsewhere is followed there; anything else (a def, a class, an assignment, or a module outside
    this repository) is `module`'s own."""
    if module_path(f"{module}.{name}") is not None:
        return f"{module}.{name}"
    path = module_path(module)
    if path is None or (module, name) in seen:
        return module
    for node in _top_level(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    source = _absolute(module, node)
                    return defining_module(source, alias.name, seen | {(module, name)})
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname == name:
                    return alias.name
    return module


def _bound_modules(tree: ast.Module) -> dict[str, str]:
    """Local names bound to a library module anywhere in a door's source: `import dreamshard.x as m`,
    `from dreamshard.x import y as m` where y is a module, `m = lazy_module("dreamshard.x")`."""
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            bound |= {a.asname: a.name for a in node.names if a.asname and a.name.startswith("dreamshard")}
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith("dreamshard"):
            for a in node.names:
                if module_path(f"{node.module}.{a.name}") is not None:
                    bound[a.asname or a.name] = f"{node.module}.{a.name}"
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and len(node.targets) == 1:
            call, target = node.value, node.targets[0]
            called = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
            arg = call.args[0] if call.args else None
            if called in ("lazy_module", "import_module") and isinstance(target, ast.Name):
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("dreamshard"):
                    bound[target.id] = arg.value
    return bound


def used_names(source: str) -> list[tuple[int, str, str]]:
    """Every library name a door's source uses, with its line and the module it is taken from: names imported with
    `from dreamshard.x import n`, and attributes read off a module bound to a local name (`m.n`)."""
    tree = ast.parse(source)
    found: list[tuple[int, str, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith("dreamshard"):
            found += [(node.lineno, node.module or "", a.name) for a in node.names]
    bound = _bound_modules(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound:
            found.append((node.lineno, bound[node.value.id], node.attr))
    return found


def defined_where(source: str) -> list[tuple[int, str, str]]:
    """(line, `module.name` as used, the module that defines it) for every library name a door's source uses."""
    return [(line, f"{module}.{name}", defining_module(module, name)) for line, module, name in used_names(source)]
