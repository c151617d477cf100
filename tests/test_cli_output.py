"""The CLI's output where it is read (dreamshard/cli/console.py): piped, a table keeps its full width and no number is
cut to "1.6…"; on an 80-column terminal its cells wrap instead; `--help` piped is plain text, wrapped, nothing cut;
the report commands' `--json`."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from flows_support import tiny_inventory
from rich.console import Console
from store_helpers import publish_or_reject

from dreamshard.cli.app import invoke
from dreamshard.cli.console import show
from dreamshard.documents import load_inventory, load_plan
from dreamshard.evaluation.render import device_table
from dreamshard.store import open_store, push_inventory
from dreamshard.values import GateDecision

ELLIPSIS = "…"


@pytest.fixture
def measured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A tiny inventory, a plan and that plan measured on the simulator (a 12-column device table)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "80")
    tiny_inventory(tmp_path / "inv.yaml")
    code, _, err = invoke(["plan", "-i", "inv.yaml", "--sharder", "dim_greedy", "-d", "2", "-o", "p.json"])
    assert code == 0, err
    code, _, err = invoke(["evaluate", "-i", "inv.yaml", "-p", "p.json", "--backend", "simulator", "-o", "m.json"])
    assert code == 0, err
    return tmp_path


def test_piped_tables_keep_every_number_whole(measured: Path) -> None:
    code, out, err = invoke(["evaluate", "-i", "inv.yaml", "-p", "p.json", "--backend", "simulator", "--stats"])
    assert code == 0, err
    assert ELLIPSIS not in out
    header = next(line for line in out.splitlines() if "fwd compute" in line)
    assert "bwd compute" in header and "optimizer GB" in header  # one line: the table's own width
    plan = load_plan(measured / "m.json")
    assert plan.measured is not None and f"{plan.measured.overall_ms:.3f}" in out


def test_on_an_80_column_terminal_cells_wrap_instead_of_being_cut(measured: Path) -> None:
    buffer = io.StringIO()
    terminal = Console(file=buffer, force_terminal=True, color_system=None, width=80)
    show(terminal, device_table(load_plan(measured / "m.json"), load_inventory(measured / "inv.yaml")))
    lines = buffer.getvalue().splitlines()
    assert ELLIPSIS not in buffer.getvalue()
    assert max(len(line) for line in lines) <= 80
    alone = io.StringIO()  # what rich does without show(): cuts the numbers
    plain = Console(file=alone, force_terminal=True, color_system=None, width=80)
    plain.print(device_table(load_plan(measured / "m.json"), load_inventory(measured / "inv.yaml")))
    assert ELLIPSIS in alone.getvalue()


def test_help_piped_is_plain_wrapped_text_with_nothing_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = invoke(["plan", "--help"])
    assert code == 0 and ELLIPSIS not in out
    assert "(topology.memory_per_device_gb;" in out and "--verify-confidence" in out
    assert max(len(line) for line in out.splitlines()) <= 80


def test_plan_and_evaluate_json(measured: Path) -> None:
    code, out, err = invoke(["plan", "-i", "inv.yaml", "--sharder", "dim_greedy", "-d", "2", "-o", "q.json", "--json"])
    assert code == 0, err
    doc = json.loads(out)
    assert doc["sharder"] == "dim_greedy" and [d["device"] for d in doc["per_device"]] == [0, 1]
    assert doc["stats"] is None and doc["search"] is None and load_plan(measured / "q.json").plan_id == doc["plan_id"]
    args = ["evaluate", "-i", "inv.yaml", "-p", "p.json", "--backend", "simulator", "--stats", "--json"]
    code, out, err = invoke(args)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["overall_ms"] > 0 and len(doc["per_device"]) == 2
    assert {t["unit"] for t in doc["stats"]["tables"]} == set(load_inventory(measured / "inv.yaml").by_name())


def test_plans_show_stats_and_lineage_json(measured: Path) -> None:
    store = open_store(str(measured / "store"))
    inv = load_inventory(measured / "inv.yaml")
    push_inventory(store, inv)
    plan = load_plan(measured / "m.json")
    decision = GateDecision(
        approved=True,
        outcome="approved",
        reason="approved",
        plan_id=plan.plan_id,
        inventory_fingerprint=inv.fingerprint(),
    )
    assert publish_or_reject(store, plan, decision).is_current
    base = ["plans", "show", "current", "--inventory", "tiny", "--store", str(measured / "store")]
    code, out, err = invoke([*base, "--stats", "--json"])
    assert code == 0, err
    stats = json.loads(out)
    assert stats["plan_id"] == plan.plan_id and len(stats["devices"]) == 2
    code, _, err = invoke([*base, "--lineage", "--json"])
    assert code == 2 and "has no lineage" in err  # not published by the pipeline
