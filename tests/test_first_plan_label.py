"""A first plan the gate cannot tell from the best baseline becomes current, and every surface says so in the same
words: the decision, the stored record, `plans list` (never "approved") and the flow's artifact line."""

from __future__ import annotations

from pathlib import Path

import pytest
from flows_support import REPLAN_PARAMS, fast_path_workspace, tiny_inventory

from dreamshard.cli.app import invoke
from dreamshard.config.settings import resolve
from dreamshard.documents import load_inventory
from dreamshard.gate.publish_policy import first_plan_label
from dreamshard.store import list_plans, open_store
from dreamshard.usecases import replan as replan_uc


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return fast_path_workspace(tmp_path, monkeypatch, REPLAN_PARAMS)


def test_a_tied_first_plan_is_labelled_current_first_plan_equivalent(work: Path) -> None:
    tiny_inventory(work / "v1.yaml")
    first = replan_uc.run(
        replan_uc.ReplanRequest(settings=resolve(work / "params.yaml"), inventory=load_inventory(work / "v1.yaml"))
    )
    assert first.outcome == "published" and "equivalent" in first.reason  # the simulator ties its baseline
    record = list_plans(open_store("store"))[0]
    assert record.outcome == first_plan_label("equivalent") and record.is_current
    code, out, err = invoke(["plans", "list", "--store", "store"])
    assert code == 0, err
    row = next(line for line in out.splitlines() if first.plan.plan_id in line)  # type: ignore[union-attr]
    assert "current: first plan" in row and "approved" not in row
