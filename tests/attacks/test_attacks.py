"""Every case of every attack table (tests/attacks/cases_*.py), each judged by the one runner (harness.run) in a
fresh copy of its table's starting files."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import cases_batches
import cases_checkpoints
import cases_forged_plans
import cases_gate
import cases_incumbent
import cases_inventory_files
import cases_loop
import cases_nested_files
import cases_params_files
import cases_pipeline
import cases_plan_files
import cases_plan_incumbent
import cases_publish_path
import cases_release
import cases_store_damage
import cases_store_layout
import cases_topology
import cases_torchrec_files
import cases_whatif
import pytest
from harness import Case, Table, copy_world, run

TABLES: tuple[Table, ...] = (
    cases_gate.TABLE,
    cases_forged_plans.TABLE,
    cases_plan_files.TABLE,
    cases_topology.TABLE,
    cases_store_layout.TABLE,
    cases_store_damage.TABLE,
    cases_torchrec_files.TABLE,
    cases_checkpoints.TABLE,
    cases_batches.TABLE,
    cases_incumbent.TABLE,
    cases_plan_incumbent.TABLE,
    cases_whatif.TABLE,
    cases_loop.TABLE,
    cases_pipeline.TABLE,
    cases_inventory_files.TABLE,
    cases_params_files.TABLE,
    cases_publish_path.TABLE,
    cases_nested_files.TABLE,
    cases_release.TABLE,
)


class Worlds:
    """Each table's starting files, written once per test process on first use."""

    def __init__(self, factory: pytest.TempPathFactory) -> None:
        self.factory = factory
        self.built: dict[str, Path] = {}

    def template(self, table: Table) -> Path:
        if table.surface not in self.built:
            d = self.factory.mktemp("world")
            if table.world is not None:
                table.world(d)
            self.built[table.surface] = d
        return self.built[table.surface]


@pytest.fixture(scope="session")
def worlds(tmp_path_factory: pytest.TempPathFactory) -> Worlds:
    return Worlds(tmp_path_factory)


@pytest.mark.parametrize(
    ("table", "case"), [pytest.param(t, c, id=f"{t.surface}: {c.what}") for t in TABLES for c in t.cases]
)
def test_attack(table: Table, case: Case, worlds: Worlds, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    work = copy_world(worlds.template(table), tmp_path / "work")
    monkeypatch.chdir(work)
    run(case, work)


def test_every_case_is_named_once_per_surface() -> None:
    names = Counter((t.surface, c.what) for t in TABLES for c in t.cases)
    assert [n for n, k in names.items() if k > 1] == []
