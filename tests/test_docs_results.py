"""The generated results pages are outside the nav (mkdocs.yml `not_in_nav`) and reached from the Benchmarks page's
list: every `bench/results/*.md` is linked there, so a new results page cannot be left unreachable."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_results_page_is_linked_from_the_benchmarks_page() -> None:
    index = (ROOT / "docs" / "benchmarks" / "index.md").read_text()
    pages = sorted(p.name for p in (ROOT / "bench" / "results").glob("*.md"))
    assert pages, "no results pages found"
    missing = [p for p in pages if f"(results/{p})" not in index]
    assert not missing, f"results pages not linked from docs/benchmarks/index.md: {missing}"
    assert "benchmarks/results/" not in (ROOT / "mkdocs.yml").read_text().split("\nnav:", 1)[1]
