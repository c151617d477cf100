"""Hostile inputs to the production loop's fast-path surfaces (`replan --refine-seconds`,
`plan --verify-anchors`, params `plan.replan_refine_seconds` / `plan.verify_anchors`) and to the gate's "keep the
current plan" rule, run by bench/hostile_cases.py (`cases(directory, case)`).

A case holds when the command refuses the input in one line (exit 2, no traceback) and writes nothing, or, for
the gate, when a plan inside the noise never leaves a current plan that cannot place the new version.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from dreamshard.cli.app import invoke as cli
from dreamshard.gate import GateDecision
from dreamshard.inventory.synth import synth_inventory
from dreamshard.io import save_inventory
from dreamshard.sharders import get_sharder
from dreamshard.store import open_store, publish_or_reject
from dreamshard.types import Inventory, Topology
from dreamshard.usecases.publish import first_plan
from hostile_small_cases import _one_line_2, _snap  # bench/ is the script's directory

Case = Callable[[str, str, str], Callable[[Callable[[], Any]], None]]


def cases(d: Path, case: Case) -> None:
    d.mkdir(parents=True, exist_ok=True)
    inv = synth_inventory(8, 0, name="loop")
    save_inventory(inv, d / "inv.yaml")

    for value in ("-1", "nan", "inf", "1e12", "abc", ""):
        @case("15.fast", f"replan --refine-seconds {value!r}", "replan -i inv.yaml --refine-seconds V")
        def _(value: str = value) -> tuple[bool, str]:
            before = _snap(d)
            r = cli(["replan", "-i", str(d / "inv.yaml"), "--refine-seconds", value, "--store", str(d / "store")])
            return _one_line_2(r, "--refine-seconds") and _snap(d) == before, r[2][-80:]

        @case("15.fast", f"plan --verify 1 --verify-anchors {value!r}", "plan -i inv.yaml --verify 1 --verify-anchors V")
        def _(value: str = value) -> tuple[bool, str]:
            before = _snap(d)
            r = cli(["plan", "-i", str(d / "inv.yaml"), "--verify", "1", "--verify-anchors", value, "-o", str(d / "p.json")])
            return _one_line_2(r, "--verify-anchors") and _snap(d) == before, r[2][-80:]

    for key, value in (("replan_refine_seconds", ".nan"), ("replan_refine_seconds", "-5"), ("verify_anchors", "-1"),
                       ("verify_anchors", "99"), ("verify_anchors", "[2]"), ("replan_refine_seconds", "'x'")):
        @case("15.fast", f"params plan.{key}: {value}", "replan -i inv.yaml --params bad.yaml")
        def _(key: str = key, value: str = value) -> tuple[bool, str]:
            (d / "bad.yaml").write_text(f"plan:\n  {key}: {value}\n")
            before = _snap(d)
            r = cli(["replan", "-i", str(d / "inv.yaml"), "--params", str(d / "bad.yaml"), "--store", str(d / "store")])
            return _one_line_2(r, f"plan.{key}") and _snap(d) == before, r[2][-80:]

    topo = Topology(num_devices=2, memory_per_device_gb=4.0)

    def current_store(name: str) -> Any:
        store = open_store(str(d / name))
        plan = get_sharder("dim_greedy").shard(inv, topo)
        ok = GateDecision(approved=True, outcome="approved", plan_id=plan.plan_id, reason="approved",
                          inventory_fingerprint=inv.fingerprint())
        publish_or_reject(store, plan.model_copy(update={"measured": plan.predicted}), ok)
        return store

    def unsure(plan_id: str) -> GateDecision:
        return GateDecision(approved=False, outcome="inconclusive", plan_id=plan_id,
                            reason="inconclusive: ... the current plan stays (measure more rounds)")

    grown = Inventory(name="loop", tables=(*inv.tables, inv.tables[0].model_copy(update={"name": "t_added"})))
    shrunk = Inventory(name="loop", tables=inv.tables[1:])
    resized = Inventory(name="loop", tables=(inv.tables[0].model_copy(update={"num_embeddings": 7}), *inv.tables[1:]))
    renamed = Inventory(name="loop", tables=(inv.tables[0].model_copy(update={"name": "t_renamed"}), *inv.tables[1:]))
    for what, other in (("a table added", grown), ("a table removed", shrunk), ("a table's rows changed", resized),
                        ("a table renamed", renamed)):
        @case("15.gate", f"inside the noise after {what}: the plan becomes current", "replan -i v2.yaml")
        def _(other: Inventory = other, what: str = what) -> tuple[bool, str]:
            store = current_store(f"store-{what.replace(' ', '-')}")
            plan = get_sharder("size_greedy").shard(other, topo)
            got = first_plan(store, plan, unsure(plan.plan_id))
            return got.outcome == "approved" and "cannot serve" in got.reason, got.reason[-80:]

    @case("15.gate", "inside the noise after a statistics-only change: the current plan stays", "replan -i v2.yaml")
    def _() -> tuple[bool, str]:
        store = current_store("store-stats")
        t0 = inv.tables[0]
        stats = Inventory(name="loop", tables=(t0.model_copy(update={"pooling_factor": t0.pooling_factor * 2}),
                                               *inv.tables[1:]))
        plan = get_sharder("size_greedy").shard(stats, topo)
        got = first_plan(store, plan, unsure(plan.plan_id))
        return got.outcome == "inconclusive", got.reason[-80:]

    @case("15.gate", "a clearly slower plan after a table was added: never current", "replan -i v2.yaml")
    def _() -> tuple[bool, str]:
        store = current_store("store-slow")
        plan = get_sharder("size_greedy").shard(grown, topo)
        slow = unsure(plan.plan_id).model_copy(update={"outcome": "rejected"})
        return first_plan(store, plan, slow).outcome == "rejected", ""
