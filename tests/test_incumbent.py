"""The incumbent a new inventory version is planned from (dreamshard.pipeline.incumbent): its file (a plan, or a
note that none was current), `dreamshard plans incumbent`, and the workspace's rule for when it is rewritten."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from flows_support import tiny_inventory
from store_helpers import approve, make_plan

from dreamshard.cli.app import invoke
from dreamshard.errors import PlanError
from dreamshard.pipeline.incumbent import load_incumbent, no_incumbent, read_incumbent, save_incumbent
from dreamshard.pipeline.workspace import INPUT_INCUMBENT, PipelineWorkspace
from dreamshard.store import open_store, publish


def test_an_incumbent_file_is_a_plan_or_a_note_and_is_written_byte_canonical(tmp_path: Path) -> None:
    plan = make_plan()
    save_incumbent(plan, tmp_path / "a.json")
    assert load_incumbent(tmp_path / "a.json") == plan
    save_incumbent(load_incumbent(tmp_path / "a.json") or plan, tmp_path / "b.json")
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()  # DVC sees no change
    save_incumbent(no_incumbent("pool"), tmp_path / "none.json")
    assert load_incumbent(tmp_path / "none.json") is None
    assert read_incumbent(tmp_path / "none.json") == no_incumbent("pool")
    for name, text, needle in (
        ("extra.json", {"incumbent": None, "reason": "x", "plan_id": "p"}, "plan_id: Extra inputs"),
        ("nested.json", {"incumbent": plan.model_dump(mode="json"), "reason": "x"}, "incumbent: Input should be None"),
        ("long.json", {"incumbent": None, "reason": "x" * 501}, "reason: String should have at most 500"),
        ("notaplan.json", {"plan_id": 3}, "plan_id: Input should be a valid string"),
        ("list.json", [1, 2], "expected a mapping"),
    ):
        (tmp_path / name).write_text(json.dumps(text))
        with pytest.raises(PlanError, match=needle):
            load_incumbent(tmp_path / name)


def test_plans_incumbent_writes_the_stores_current_plan_or_a_note_and_checks_a_file(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    plan = make_plan(inventory="pool")
    publish(open_store(str(store_dir)), plan, approve(plan))
    out = tmp_path / "inc.json"
    code, text, err = invoke(["plans", "incumbent", "--inventory", "pool", "--store", str(store_dir), "-o", str(out)])
    assert code == 0, err
    assert plan.plan_id in text
    got = load_incumbent(out)
    assert got is not None and got.plan_id == plan.plan_id
    code, shown, _ = invoke(["plans", "show", "current", "--inventory", "pool", "--store", str(store_dir)])
    assert code == 0 and shown == out.read_text()  # `plans show current > inputs/incumbent.json` is the same file

    code, text, err = invoke(
        ["plans", "incumbent", "--inventory", "other", "--store", str(store_dir), "-o", str(tmp_path / "none.json")]
    )
    assert code == 0 and "no plan was current for inventory 'other'" in text, err
    assert load_incumbent(tmp_path / "none.json") is None

    code, _, err = invoke(["plans", "incumbent", "--from", str(out), "-o", str(tmp_path / "copy.json")])
    assert code == 0, err
    assert (tmp_path / "copy.json").read_bytes() == out.read_bytes()

    (tmp_path / "cut.json").write_text(out.read_text()[:150])
    for argv, needle in (
        (["--from", str(tmp_path / "cut.json")], "not valid JSON"),
        (["--from", str(out), "--inventory", "pool"], "give one of --inventory NAME"),
        ([], "give one of --inventory NAME"),
        (["--inventory", "pool", "--store", str(tmp_path / "nowhere")], "no plan store at"),
    ):
        code, _, err = invoke(["plans", "incumbent", *argv, "-o", str(tmp_path / "x.json")])
        assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, (argv, err)
        assert not (tmp_path / "x.json").exists()
    code, _, err = invoke(["plans", "incumbent", "--from", str(out), "-o", str(out)])
    assert code == 2 and "same file as --from" in err


def test_a_workspace_rewrites_its_incumbent_only_for_a_new_inventory(tmp_path: Path) -> None:
    ws = PipelineWorkspace(tmp_path / "ws")
    name = tiny_inventory(tmp_path / "inv.yaml").name
    first, second = make_plan(inventory=name), make_plan(inventory=name, overall=9.0)
    assert ws.write_incumbent(first, name, replace=False)  # none yet: written
    assert not ws.write_incumbent(second, name, replace=False)  # same inventory: the incumbent stays
    assert load_incumbent(ws.path(INPUT_INCUMBENT)) == first
    assert not ws.write_incumbent(first, name, replace=True)  # rewritten, byte-equal: no change
    assert ws.write_incumbent(None, name, replace=True)  # a new version with nothing current
    assert load_incumbent(ws.path(INPUT_INCUMBENT)) is None


def test_pipeline_init_writes_no_incumbent_and_status_says_what_the_plan_stage_starts_from(tmp_path: Path) -> None:
    tiny_inventory(tmp_path / "inv.yaml")
    ws = tmp_path / "ws"
    code, _, err = invoke(
        ["pipeline", "init", str(ws), "-i", str(tmp_path / "inv.yaml"), "--dvc-remote", str(tmp_path / "remote")]
    )
    assert code == 0, err
    assert load_incumbent(ws / INPUT_INCUMBENT) is None  # a new workspace: no plan current yet
    code, out, err = invoke(["pipeline", "status", "--workspace", str(ws)])
    assert code == 0 and f"{INPUT_INCUMBENT}: none: no plan was current for inventory 'tiny'" in out, err
    plan = make_plan(inventory="tiny")
    save_incumbent(plan, ws / INPUT_INCUMBENT)
    out = invoke(["pipeline", "status", "--workspace", str(ws)])[1]
    assert f"{INPUT_INCUMBENT}: plan {plan.plan_id} (tiny " in out and "the plan stage searches from it" in out
    (ws / INPUT_INCUMBENT).write_text("{")
    code, out, _ = invoke(["pipeline", "status", "--workspace", str(ws)])
    assert code == 0 and f"{INPUT_INCUMBENT}: unreadable: " in out and "not valid JSON" in out  # the rest still shows
