"""Attacks on the one publish path's new doors and the gate's backend checks: `plans approve` / `plans decline` with
hostile plan ids, answers and stores; a rollback to a plan that was never approved; a comparison whose backend name
was edited (cpu to cuda) to pass as the plan's own devices; a cuda plan measured on the cpu backend without
--allow-proxy (refused before anything is measured); a rejected proxy's fallback, which stays labelled PROXY.

The files: the World's (tests/store_helpers.py: inv.yaml, good/bad/worse.json, cmp.json, gate-params.yaml), a store
with `good` waiting for a reviewer (pending-store/), a comparison of the World's plans relabelled as measured on
the cpu backend (cmp-cpu.json), and cuda plans of the World's inventory with their cpu comparison (cuda-*.json)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

from harness import Case, Holds, Refused, Result, Runs, Table, cli, edited
from store_helpers import world

from dreamshard.store import list_plans, open_store

LONG = "p" * 5000
PARAMS = "--params gate-params.yaml"


def _cpu(data: dict[str, Any]) -> None:
    """A comparison as the cpu backend writes it (the simulator's figures, relabelled consistently)."""
    cpu = {"name": "cpu", "operator": "fbgemm_tbe", "device": "cpu", "is_simulated": False}
    data["backend"].update(cpu)
    for r in data["results"]:
        if r["plan"].get("measured_by"):
            r["plan"]["measured_by"].update(cpu)


def world_files(d: Path) -> None:
    from dreamshard.documents import save_plan
    from dreamshard.evaluation import compare_sharders
    from dreamshard.profiling import make_oracle
    from dreamshard.sharders import get_sharder

    w = world()
    w.write(d)
    data = json.loads((d / "cmp.json").read_text())
    _cpu(data)
    (d / "cmp-cpu.json").write_text(json.dumps(data))
    cuda = w.topology.model_copy(update={"device_type": "cuda"})
    slow = get_sharder("round_robin").shard(w.inventory, cuda).model_copy(update={"sharder": "dreamshard"})
    save_plan(slow, d / "cuda-slow.json")
    cmp = compare_sharders(w.inventory, cuda, list(w.baselines), make_oracle("simulator"), rounds=5, extra_plans=[slow])
    data = json.loads(cmp.model_dump_json())
    _cpu(data)
    (d / "cuda-cmp.json").write_text(json.dumps(data))
    human = d / "human.yaml"
    human.write_text(w.params_text(require_human=True))
    r = cli(
        [
            *("plans", "publish", str(d / "good.json"), "--comparison", str(d / "cmp.json")),
            *("-i", str(d / "inv.yaml"), "--params", str(human), "--store", str(d / "pending-store")),
        ]
    )
    assert r.code == 3, r.err


def _no_measuring() -> Any:
    """A guard: the gate's measurement is never reached (a refusal must come before any timing)."""
    return mock.patch("dreamshard.gate.decide.compare_sharders", side_effect=AssertionError("measured first"))


def _fallback_keeps_proxy(work: Path, r: Result) -> None:
    """The rejected proxy plan's fallback is current and carries the proxy label in its record."""
    (fb,) = [x for x in list_plans(open_store(str(work / "store"))) if x.outcome == "fallback"]
    assert fb.is_current and "PROXY: a cuda plan timed on 'cpu'" in fb.reason, fb.reason
    assert "fallback: published" in r.out


def _pending_only(work: Path) -> None:
    """A plan waiting for a reviewer is no approved plan: a rollback to it is refused, nothing moves."""
    pending = [x.plan_id for x in list_plans(open_store(str(work / "pending-store"))) if x.status == "pending"]
    r = cli(["plans", "rollback", "--inventory", "inv", "--to", pending[0], "--store", "pending-store"])
    assert r.code == 2 and "not approved" in r.err and len(r.err.strip().splitlines()) == 1, r.err


def _approved_after_hostile_answers(work: Path) -> None:
    """After every refused answer the pending change still waits, and a plain approve makes it current."""
    pending = [x.plan_id for x in list_plans(open_store(str(work / "pending-store"))) if x.status == "pending"]
    r = cli(["plans", "approve", pending[0], "--store", "pending-store", "--reviewer", "ops"])
    assert r.code == 0, r.err
    assert [x.status for x in list_plans(open_store(str(work / "pending-store")))] == ["approved"]


def _store(cmd: str) -> Callable[[Path], list[str]]:
    return lambda work: [*cmd.split(), "--store", "pending-store"]


def _cases() -> list[Case]:
    return [
        Refused("approve: a plan id that climbs out of the store", _store("plans approve ../x"), "plan id"),
        Refused("approve: an empty plan id", lambda w: ["plans", "approve", "", "--store", "pending-store"], "empty"),
        Refused("approve: a 5,000-character plan id", _store(f"plans approve {LONG}"), ("plan id", "5000 characters")),
        Refused("approve: nothing waits for this id", _store("plans approve plan-nope"), "no change is waiting"),
        Refused("decline: a store that does not exist", "plans decline plan-x --store missing", "no plan store"),
        Refused(
            "approve: a 3,000-character comment",
            lambda w: ["plans", "approve", "plan-x", "--store", "pending-store", "--comment", "c" * 3000],
            "comment",
        ),
        Refused(
            "approve: a 300-character reviewer",
            lambda w: ["plans", "approve", "plan-x", "--store", "pending-store", "--reviewer", "r" * 300],
            "reviewer",
        ),
        Holds("rollback to a plan that only waits for a reviewer", _pending_only),
        Holds("the pending change survives the hostile answers", _approved_after_hostile_answers),
        Refused(
            "a comparison whose backend name was edited from cpu to cuda",
            f"plans publish good.json --comparison cuda-named.json {PARAMS} -i inv.yaml --store store",
            ("backend 'cuda' but device 'cpu'",),
            setup=edited("cmp-cpu.json", "cuda-named.json", lambda d: d["backend"].update({"name": "cuda"})),
        ),
        Refused(
            "a cuda plan measured on cpu without --allow-proxy: refused before measuring",
            f"plans publish cuda-slow.json --measure --backend cpu {PARAMS} -i inv.yaml --store store",
            ("measured on backend 'cpu', the plan is for cuda devices", "publish.allow_proxy"),
            guard=_no_measuring,
        ),
        Runs(
            "a rejected proxy plan's fallback stays labelled PROXY",
            f"plans publish cuda-slow.json --comparison cuda-cmp.json --allow-proxy {PARAMS} -i inv.yaml --store store",
            then=_fallback_keeps_proxy,
            code=1,
        ),
    ]


TABLE = Table("publish path", _cases(), world_files)
