"""One publish path (docs/architecture/gate.md, "One publish path"), door by door: with publish.require_human and
nobody to answer, no door makes anything current (`plans publish`, `replan`, `plans rollback`, the pipeline's
publish step, the replan flow); the change waits, pending, and `plans approve` / `plans decline` answer it. Only one
module of the library writes the current pointer."""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from flows_support import tiny_inventory

from dreamshard.cli.app import invoke
from dreamshard.documents import load_plan, save_inventory
from dreamshard.store import get_current, get_pointer, list_plans, open_store
from dreamshard.values import Inventory

ROOT = Path(__file__).resolve().parents[1]
SIM = ["--measure", "--backend", "simulator", "--allow-simulated", "--rounds", "2", "--store", "store"]


def _params(work: Path, **publish: Any) -> Path:
    """params.yaml for a simulator replan of the tiny inventory on 2 devices, with these publish settings."""
    path = work / "params.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "topology": {"memory_per_device_gb": 1.0, "batch_size": 2048},
                "profile": {"backend": "simulator", "warmup": 0, "repeats": 1},
                "plan": {"num_devices": 2, "candidates": ["round_robin"], "verify": 0, "samples": 0},
                "evaluate": {"rounds": 2},
                "publish": {"store_uri": "store", "allow_simulated": True, "min_rounds": 2, **publish},
            }
        )
    )
    return path


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _plan(inv: str, sharder: str, out: str, memory_gb: str = "1") -> str:
    code, _, err = invoke(["plan", "-i", inv, "-d", "2", "-m", memory_gb, "-s", sharder, "-o", out])
    assert code == 0, err
    return load_plan(Path(out)).plan_id


def _pending(store: str = "store") -> list[str]:
    return [r.plan_id for r in list_plans(open_store(store)) if r.status == "pending"]


def test_plans_publish_waits_for_a_reviewer_and_plans_approve_answers(work: Path) -> None:
    tiny_inventory(work / "inv.yaml")
    pid = _plan("inv.yaml", "size_lookup_greedy", "p.json")
    _params(work, require_human=True)
    code, out, err = invoke(["plans", "publish", "p.json", "-i", "inv.yaml", "--params", "params.yaml", *SIM])
    assert code == 3 and "pending: waiting for a reviewer" in out and f"plans approve {pid}" in out, out + err
    assert get_pointer(open_store("store"), "tiny") is None and _pending() == [pid]
    code, out, _ = invoke(["plans", "list", "--store", "store"])
    assert code == 0 and "pending" in out
    # publishing it again neither measures nor asks twice
    code, out, err = invoke(["plans", "publish", "p.json", "-i", "inv.yaml", "--params", "params.yaml", *SIM])
    assert code == 3 and "waiting for a reviewer already" in out, out + err
    code, out, err = invoke(["plans", "approve", pid, "--store", "store", "--reviewer", "alice", "--comment", "ok"])
    assert code == 0 and f"plan {pid} is current" in out and "approved by alice via plans approve: ok" in out, err
    assert get_current(open_store("store"), "tiny").plan_id == pid and _pending() == []
    record = next(r for r in list_plans(open_store("store")) if r.plan_id == pid)
    assert record.status == "approved" and "approved by alice" in record.reason
    code, _, err = invoke(["plans", "approve", pid, "--store", "store"])
    assert code == 2 and "no change is waiting for a reviewer" in err and len(err.strip().splitlines()) == 1


def test_a_declined_change_is_kept_rejected_and_nothing_becomes_current(work: Path) -> None:
    tiny_inventory(work / "inv.yaml")
    pid = _plan("inv.yaml", "size_lookup_greedy", "p.json")
    _params(work, require_human=True)
    assert invoke(["plans", "publish", "p.json", "-i", "inv.yaml", "--params", "params.yaml", *SIM])[0] == 3
    code, out, err = invoke(["plans", "decline", pid, "--store", "store", "--reviewer", "bob", "--comment", "no"])
    assert code == 1 and "declined by bob via plans decline: no" in err, out + err
    assert get_pointer(open_store("store"), "tiny") is None and _pending() == []
    assert [r.status for r in list_plans(open_store("store"))] == ["rejected"]


def test_replan_waits_for_a_reviewer(work: Path) -> None:
    tiny_inventory(work / "v1.yaml")
    _params(work, require_human=True)
    code, out, err = invoke(["replan", "-i", "v1.yaml", "--params", "params.yaml", "--json"])
    assert code == 3, out + err
    result = json.loads(out)
    assert result["outcome"] == "pending" and result["publication"]["status"] == "pending"
    assert get_pointer(open_store("store"), "tiny") is None and len(_pending()) == 1


def _store_with_history(work: Path) -> tuple[str, str]:
    """A store whose pointer went plan A -> plan B (both approved; no reviewer then)."""
    from store_helpers import approve, make_plan, publish_or_reject

    from dreamshard.sharders import get_sharder
    from dreamshard.values import Topology

    inv = tiny_inventory(work / "inv.yaml")
    topo = Topology(num_devices=2, memory_per_device_gb=1.0, batch_size=2048)
    store = open_store(str(work / "store"))
    ids = []
    for sharder in ("size_greedy", "dim_greedy"):
        plan = get_sharder(sharder).shard(inv, topo)
        plan = plan.model_copy(update={"measured": make_plan(overall=5.0).measured})
        publish_or_reject(store, plan, approve(plan))
        ids.append(plan.plan_id)
    return ids[0], ids[1]


def test_plans_rollback_waits_for_a_reviewer_and_approve_or_decline_answers(work: Path) -> None:
    a, b = _store_with_history(work)
    _params(work, require_human=True)
    argv = ["plans", "rollback", "--inventory", "tiny", "--store", "store", "--params", "params.yaml"]
    code, out, err = invoke(argv)
    assert code == 3 and f"the rollback to {a} is kept pending" in out, out + err
    store = open_store("store")
    assert get_current(store, "tiny").plan_id == b and _pending() == [a]
    code, out, err = invoke(["plans", "approve", a, "--store", "store", "--reviewer", "carol"])
    assert code == 0 and get_current(store, "tiny").plan_id == a, out + err
    pointer = get_pointer(store, "tiny")
    assert pointer is not None and pointer.action == "rollback" and pointer.review is not None
    assert pointer.review.reviewer == "carol" and _pending() == []
    # without require_human the rollback is made at once
    _params(work)
    code, out, err = invoke([*argv[:-2], "--to", b, "--params", "params.yaml"])
    assert code == 0 and get_current(store, "tiny").plan_id == b and "rolled back" in out, out + err


def test_an_approval_decided_against_another_current_plan_is_refused(work: Path) -> None:
    a, b = _store_with_history(work)
    _params(work, require_human=True)
    base = ["plans", "rollback", "--inventory", "tiny", "--store", "store", "--params", "params.yaml"]
    assert invoke(base)[0] == 3  # pending: back to a, decided against b
    _params(work)
    assert invoke([*base[:-2], "--to", a, "--params", "params.yaml"])[0] == 0  # meanwhile someone rolled back
    code, _, err = invoke(["plans", "approve", a, "--store", "store"])
    assert code == 2 and f"decided against the current plan {b}" in err and len(err.strip().splitlines()) == 1
    code, out, err = invoke(["plans", "decline", a, "--store", "store"])
    assert "declined" in out + err and _pending() == [], out + err


def _workspace(work: Path, require_human: bool) -> Path:
    """A pipeline workspace as the stages leave it before the publish step: git, params, dvc files, the plan,
    its inventory and the comparison with the baselines (simulator)."""
    import subprocess

    from store_helpers import World

    from dreamshard.documents import save_plan

    w = World()
    ws = work / "ws"
    (ws / "data").mkdir(parents=True)
    save_inventory(w.inventory, ws / "data" / "inventory.yaml")
    save_plan(w.good, ws / "data" / "plan.json")
    shutil.copytree(ROOT / "dreamshard" / "pretrained", ws / "models" / "dreamshard")  # the run's trained model
    (ws / "data" / "comparison.json").write_text(w.comparison.model_dump_json())
    (ws / "params.yaml").write_text(w.params_text(require_human=require_human, store_uri=str(work / "store")))
    (ws / "dvc.yaml").write_text("stages: {}\n")
    (ws / "dvc.lock").write_text("schema: '2.0'\nstages: {}\n")
    for args in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "ws"]):
        subprocess.run(["git", *args], cwd=ws, check=True)
    return ws


def test_the_pipeline_publish_step_keeps_the_plan_pending_when_its_runner_has_no_reviewer(work: Path) -> None:
    from dreamshard.usecases.pipeline_publish import WorkspacePublish, publish_workspace
    from dreamshard.usecases.runner import InProcessRunner

    ws = _workspace(work, require_human=True)
    done = publish_workspace(WorkspacePublish(workspace=ws), InProcessRunner())
    assert done.status == "pending" and done.asked and "nobody" in done.reviewer
    store = open_store(str(work / "store"))
    assert get_pointer(store, "inv") is None and [r.status for r in list_plans(store)] == ["pending"]
    assert done.diff is None  # nothing was current: no moves


def test_the_replan_flow_waits_when_nobody_answers_in_the_ui(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The replan flow's task asks the Prefect UI (flows/review.py): a pause that times out is no answer."""
    import logging

    import dreamshard_flows.replan as replan_flow
    import dreamshard_flows.review as review
    import prefect.flow_runs
    from dreamshard_flows.replan import replan_task
    from prefect.exceptions import FlowPauseTimeout

    from dreamshard.config.settings import resolve
    from dreamshard.documents import load_inventory
    from dreamshard.usecases import replan as replan_uc

    def timed_out(*a: object, **k: object) -> None:
        raise FlowPauseTimeout("no answer")

    monkeypatch.setattr(prefect.flow_runs, "pause_flow_run", timed_out)
    monkeypatch.setattr(review, "get_run_logger", lambda: logging.getLogger("test"))
    monkeypatch.setattr(review, "review_artifact", lambda question: None)
    logged: list[str] = []
    monkeypatch.setattr(replan_flow, "get_run_logger", lambda: type("L", (), {"info": logged.append})())
    tiny_inventory(work / "v1.yaml")
    request = replan_uc.ReplanRequest(
        settings=resolve(_params(work, require_human=True)), inventory=load_inventory(work / "v1.yaml")
    )
    result = replan_task.fn(request)
    assert result.outcome == "pending" and result.publication is not None
    assert result.publication.reviewer == "the Prefect UI"
    assert get_pointer(open_store("store"), "tiny") is None
    assert any("gate: " in line for line in logged), logged  # what the gate measured, in the flow's log


def test_only_the_publish_write_module_moves_the_current_pointer() -> None:
    """The store's writers of what is current (publish, rollback, hold, clear_pending, update_pointer) are called
    from dreamshard/usecases/publish_write.py alone (and inside the store itself). Planted: a call from any other
    module of the library or the flows fails this."""
    writers = {"publish", "rollback", "hold", "clear_pending", "update_pointer", "advanced", "stepped_back"}
    allowed = {ROOT / "dreamshard" / "usecases" / "publish_write.py"}
    offenders = []
    for path in [*(ROOT / "dreamshard").rglob("*.py"), *(ROOT / "flows").rglob("*.py")]:
        if path in allowed or (ROOT / "dreamshard" / "store") in path.parents:
            continue
        tree = ast.parse(path.read_text())
        imported = {
            a.asname or a.name
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("dreamshard.store")
            for a in node.names
            if a.name in writers
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                f = node.func
                name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
                owner = f.value.id if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) else ""
                if name in imported or (name in writers and owner in ("store", "plans", "pointer")):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} {name}")
    assert offenders == [], offenders


def _with_first(inv: Inventory, constraints: dict[str, Any]) -> Inventory:
    """`inv` with `constraints` on its first table, parsed as a file's would be."""
    first = {**inv.tables[0].model_dump(exclude_none=True), "constraints": constraints}
    return Inventory.model_validate({"name": inv.name, "tables": [first, *(t.model_dump() for t in inv.tables[1:])]})


def _forty(name: str = "big") -> Inventory:
    from dreamshard.inventory.synth import synth_inventory

    return synth_inventory(40, 3, dims=(4, 64), name=name)


def test_one_added_table_moves_no_old_table_through_the_fallback(work: Path) -> None:
    """A 40-table plan is current; one table is added and a re-plan the gate rejects is published: the fallback is
    the current plan extended (moves 0 of 40), never a fresh baseline that moves most of them."""
    from dreamshard.placement.diff import plan_diff

    v1 = _forty()
    save_inventory(v1, work / "v1.yaml")
    _plan("v1.yaml", "size_lookup_greedy", "p1.json", "16")
    assert invoke(["plans", "publish", "p1.json", "-i", "v1.yaml", *SIM])[0] in (0, 1)
    store = open_store("store")
    old = get_current(store, "big")
    t = v1.tables[5]
    v2 = Inventory(name="big", tables=(*v1.tables, t.model_copy(update={"name": "merchant"})))
    save_inventory(v2, work / "v2.yaml")
    _plan("v2.yaml", "round_robin", "p2.json", "16")
    code, out, err = invoke(["plans", "publish", "p2.json", "-i", "v2.yaml", *SIM, "--json"])
    done = json.loads(out)
    assert code == 1 and done["status"] == "fallback", out + err
    now = get_current(store, "big")
    assert now.sharder == "current+new" and len(plan_diff(old, now, v2).moved) <= 2
    assert done["diff"]["moved"] and done["diff"]["added"] == ["merchant"]  # the judged plan's moves, shown anyway


def test_a_constraint_change_makes_the_current_plan_change_and_says_which(work: Path) -> None:
    v1 = tiny_inventory(work / "v1.yaml")
    _plan("v1.yaml", "size_lookup_greedy", "p1.json")
    assert invoke(["plans", "publish", "p1.json", "-i", "v1.yaml", *SIM])[0] in (0, 1)
    store = open_store("store")
    old = get_current(store, "tiny")
    v2 = _with_first(v1, {"sharding_types": ["data_parallel"]})
    save_inventory(v2, work / "v2.yaml")
    _plan("v2.yaml", "size_lookup_greedy", "p2.json")
    code, out, err = invoke(["plans", "publish", "p2.json", "-i", "v2.yaml", *SIM])
    now = get_current(store, "tiny")
    assert now.plan_id != old.plan_id and now.sharding_type(v1.tables[0].name) == "data_parallel", out + err
    assert "breaks its constraint sharding_types ['data_parallel']" in out + err


def test_a_pinned_table_puts_a_labelled_torchrec_row_into_the_gates_evidence(work: Path) -> None:
    v1 = tiny_inventory(work / "v1.yaml")
    pinned = _with_first(v1, {"devices": [1]})
    save_inventory(pinned, work / "pin.yaml")
    _plan("pin.yaml", "size_lookup_greedy", "p.json")
    code, out, err = invoke(["plans", "publish", "p.json", "-i", "pin.yaml", *SIM, "--json"])
    assert code in (0, 1), out + err
    d = json.loads(out)["decision"]
    assert "torchrec" in d["infeasible"]
    (ref,) = [r for r in d["references"] if r["name"] == "torchrec"]
    assert "devices [1]" in ref["breaks"] and ref["overall_ms"] > 0 and ref["ratio"] > 0
    assert "torchrec cannot honour table" in d["reason"] and "shown, not compared" in d["reason"]


def test_a_constraint_torchrec_cannot_offer_does_not_block_a_plan_that_honours_it(work: Path) -> None:
    """A pooled table constrained row_wise on cpu: TorchRec's planner offers no row_wise there. The plan that
    honours it is gated (never exit 2 for the baseline), and TorchRec's plan without that constraint is shown."""
    v1 = tiny_inventory(work / "v1.yaml")
    rw = _with_first(v1, {"sharding_types": ["row_wise"]})
    save_inventory(rw, work / "rw.yaml")
    _plan("rw.yaml", "size_greedy", "p.json")
    code, out, err = invoke(["plans", "publish", "p.json", "-i", "rw.yaml", *SIM])
    assert code in (0, 1) and "torchrec cannot honour table" in out + err and "row_wise" in out + err, out + err


def test_moves_are_named_with_their_gib_and_why(work: Path) -> None:
    tiny_inventory(work / "v1.yaml")
    _plan("v1.yaml", "size_lookup_greedy", "p1.json")
    assert invoke(["plans", "publish", "p1.json", "-i", "v1.yaml", *SIM])[0] in (0, 1)
    _plan("v1.yaml", "round_robin", "p2.json")
    code, out, err = invoke(["plans", "publish", "p2.json", "-i", "v1.yaml", *SIM])
    text = out + err
    assert "against the plan that was current:" in text and "GiB weights" in text and " GB " not in text
    moved = [ln for ln in text.splitlines() if ln.startswith("  t") and " -> " in ln]
    assert moved and all("GiB" in ln and "device" in ln for ln in moved), text
    code, out, _ = invoke(["plans", "publish", "p2.json", "-i", "v1.yaml", *SIM, "--json"])
    assert json.loads(out)["status"] == "already-decided"
