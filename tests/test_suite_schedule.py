"""The recorded seconds a clean clone schedules the test files by (tests/file_seconds.json, `make test-seconds`)."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import RECORDED_SECONDS

TESTS = Path(__file__).resolve().parent


def test_every_recorded_file_exists_and_has_a_time() -> None:
    recorded = json.loads(RECORDED_SECONDS.read_text())
    names = {p.name for p in TESTS.rglob("test_*.py")}
    assert sorted(set(recorded) - names) == [], "recorded seconds for test files that are gone: make test-seconds"
    assert all(isinstance(s, (int, float)) and s >= 0 for s in recorded.values())
