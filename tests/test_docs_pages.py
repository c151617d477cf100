"""The architecture reference reads in pages (docs/architecture/index.md): none over 400 lines, each in the nav, and
every page a code comment names (`docs/architecture/<page>.md, "Section"`) exists with that section. No page of
docs/ names the project's issue tracker."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = ROOT / "docs" / "architecture"
MAX_LINES = 400
#: A code comment's pointer into the architecture pages: the page and, when given, the section's heading.
POINTER = re.compile(r'docs/architecture/([\w-]+)\.md(?:,\s*"([^"]+)")?')


def long_pages(pages: dict[str, str]) -> list[str]:
    return [f"{name}: {text.count(chr(10))} lines" for name, text in pages.items() if text.count("\n") > MAX_LINES]


def broken_pointers(source: str, where: str, headings: dict[str, set[str]]) -> list[str]:
    """The pointers in `source` to a page that does not exist or a section its page does not have."""
    bad = []
    for page, section in POINTER.findall(source):
        if page not in headings:
            bad.append(f"{where}: no page docs/architecture/{page}.md")
        elif section and not any(h.startswith(" ".join(section.lower().split())) for h in headings[page]):
            bad.append(f'{where}: docs/architecture/{page}.md has no section "{section}"')
    return bad


def _headings() -> dict[str, set[str]]:
    return {p.stem: {m.lower() for m in re.findall(r"^#{1,6} (.+)$", p.read_text(), re.M)} for p in PAGES.glob("*.md")}


def test_no_architecture_page_is_over_400_lines_and_each_is_in_the_nav() -> None:
    pages = {p.stem: p.read_text() for p in PAGES.glob("*.md")}
    assert len(pages) >= 2 and long_pages(pages) == []
    nav = (ROOT / "mkdocs.yml").read_text().split("\nnav:", 1)[1]
    assert [p for p in pages if f"architecture/{p}.md" not in nav] == []


def test_every_pointer_in_the_code_names_a_page_and_section_that_exist() -> None:
    headings = _headings()
    bad = []
    for folder in ("dreamshard", "flows", "tests", "bench"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.name != Path(__file__).name:  # its planted pointers are meant to be broken
                bad += broken_pointers(path.read_text(), str(path.relative_to(ROOT)), headings)
    assert bad == []


def test_the_checks_catch_a_long_page_and_a_stale_pointer() -> None:
    assert long_pages({"big": "x\n" * 401, "fine": "x\n" * 400}) == ["big: 401 lines"]
    headings = {"learning": {"learning", "measured refinement"}}
    stale = 'see (docs/architecture/learning.md, "Errors") and (docs/architecture/gone.md)'
    assert broken_pointers(stale, "m.py", headings) == [
        'm.py: docs/architecture/learning.md has no section "Errors"',
        "m.py: no page docs/architecture/gone.md",
    ]
    assert broken_pointers('(docs/architecture/learning.md, "Measured\n    refinement")', "m.py", headings) == []


#: A mention of the project's own tracker: "issue 48", "issues 12 and 13", "(#12)". Another project's issue, named
#: with its project ("TorchRec issue #2394"), is a reference a reader can follow.
TRACKER = re.compile(r"(?<!TorchRec )\bissues? #?\d+|\(#\d+\)|\bthe issue's\b|\bthe issue of\b", re.IGNORECASE)


def tracker_mentions(pages: dict[str, str]) -> list[str]:
    """`page:line: text` for each line of `pages` that names the project's tracker."""
    return [
        f"{name}:{i}: {line.strip()[:80]}"
        for name, text in pages.items()
        for i, line in enumerate(text.splitlines(), 1)
        if TRACKER.search(line)
    ]


def test_the_docs_speak_of_the_project_not_of_its_tracker() -> None:
    pages = {str(p.relative_to(ROOT)): p.read_text() for p in (ROOT / "docs").rglob("*.md")}
    pages["README.md"] = (ROOT / "README.md").read_text()
    assert tracker_mentions(pages) == []
    planted = {"x.md": "after the refactor of issue 48\n(#12) fixed\nTorchRec issue #2394 stays\nthe issue's case\n"}
    assert [m.split(":")[1] for m in tracker_mentions(planted)] == ["1", "2", "4"]
