"""No two packages of `dreamshard/` import each other (docs/architecture/index.md, "Layers"): a package-level import
graph read from every import statement (module level, under TYPE_CHECKING, inside functions). There were 6 pairs on
2026-12-05 and none since: each went by moving what both sides needed down a layer (values/model_files.py,
placement/make_plan.py, the comm constants in values/topology.py, ProfileConfig into profiling/) or by handing it
in (the training loop's search planner, `learning.loop_planner.Searcher`)."""

from __future__ import annotations

import ast
import itertools
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def package_edges(sources: dict[str, str]) -> dict[str, set[str]]:
    """{package: the other packages it imports} for `sources` ({path relative to dreamshard/: source})."""
    edges: dict[str, set[str]] = defaultdict(set)
    for rel, source in sources.items():
        package = rel.split("/")[0].removesuffix(".py")
        for node in ast.walk(ast.parse(source)):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                parts = name.split(".")
                if parts[0] == "dreamshard" and len(parts) > 1 and parts[1] != package:
                    edges[package].add(parts[1])
    return edges


def mutual_pairs(edges: dict[str, set[str]]) -> set[tuple[str, str]]:
    return {(a, b) for a, b in itertools.combinations(sorted(edges), 2) if b in edges[a] and a in edges[b]}


def test_no_two_packages_import_each_other() -> None:
    base = ROOT / "dreamshard"
    sources = {str(p.relative_to(base)): p.read_text() for p in base.rglob("*.py")}
    assert sorted(mutual_pairs(package_edges(sources))) == []


def test_a_planted_mutual_import_is_found() -> None:
    sources = {
        "gate/rule.py": "from dreamshard.store.plans import x\n",
        "store/plans.py": "def f():\n    from dreamshard.gate.rule import y\n",
        "values/plan.py": "import dreamshard.errors\n",
    }
    assert mutual_pairs(package_edges(sources)) == {("gate", "store")}
