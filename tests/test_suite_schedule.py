"""The recorded seconds a clean clone schedules the test files by (tests/file_seconds.json, `make test-seconds`)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from conftest import PREFECT_SERVER_FILES, RECORDED_SECONDS

TESTS = Path(__file__).resolve().parent


def test_every_recorded_file_exists_and_has_a_time() -> None:
    recorded = json.loads(RECORDED_SECONDS.read_text())
    names = {p.name for p in TESTS.rglob("test_*.py")}
    assert sorted(set(recorded) - names) == [], "recorded seconds for test files that are gone: make test-seconds"
    assert all(isinstance(s, (int, float)) and s >= 0 for s in recorded.values())


def timing_files(tests: Path) -> set[str]:
    """The test files (from the repository root) that mark a test `timing`."""
    return {
        str(p.relative_to(tests.parent))
        for p in tests.rglob("test_*.py")
        if re.search(r"mark\.timing\b", p.read_text())
    }


def makefile_timing_tests(makefile: Path) -> set[str]:
    """The Makefile's TIMING_TESTS: the files the timing step collects."""
    found = re.search(r"^TIMING_TESTS :=(.*)$", makefile.read_text(), re.MULTILINE)
    assert found is not None, "no TIMING_TESTS in the Makefile"
    return set(found.group(1).split())


def test_the_timing_step_collects_every_file_that_marks_a_timing_test(tmp_path: Path) -> None:
    """make test's timing step runs `-m timing` on TIMING_TESTS only: a timing test in another file would run in
    neither step (the main one deselects `timing`)."""
    assert timing_files(TESTS) == makefile_timing_tests(TESTS.parent / "Makefile")
    planted = tmp_path / "tests"
    planted.mkdir()
    marker = "@pytest.mark." + "timing"  # spelled apart: this file marks no timing test
    (planted / "test_x.py").write_text(f"import pytest\n\n{marker}\ndef test_a():\n    pass\n")
    (planted / "test_y.py").write_text("def test_b():\n    pass\n")
    assert timing_files(planted) == {"tests/test_x.py"}


def server_files_outside_the_group(tests: Path, group: frozenset[str]) -> set[str]:
    """The test files that ask for the session's Prefect server but are not in `group`: such a file may land on
    the other xdist worker, which then starts a second server."""
    return {
        str(p.relative_to(tests.parent))
        for p in tests.rglob("test_*.py")
        if re.search(r"\bprefect_api\b", p.read_text()) and str(p.relative_to(tests.parent)) not in group
    } - {"tests/test_suite_schedule.py"}


def test_every_file_using_the_prefect_server_is_in_its_group(tmp_path: Path) -> None:
    assert server_files_outside_the_group(TESTS, PREFECT_SERVER_FILES) == set()
    planted = tmp_path / "tests"
    planted.mkdir()
    (planted / "test_p.py").write_text("def test_a(prefect_api):\n    pass\n")
    (planted / "test_q.py").write_text("def test_b(tmp_path):\n    pass\n")
    assert server_files_outside_the_group(planted, frozenset({"tests/test_q.py"})) == {"tests/test_p.py"}
    assert server_files_outside_the_group(planted, frozenset({"tests/test_p.py"})) == set()
