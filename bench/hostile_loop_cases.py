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

from hostile_cases import one_line_2, snap  # bench/ is the script's directory

from dreamshard.cli.app import invoke as cli
from dreamshard.documents import save_inventory
from dreamshard.gate import GateDecision
from dreamshard.inventory.synth import synth_inventory
from dreamshard.sharders import get_sharder
from dreamshard.store import open_store, publish_or_reject
from dreamshard.usecases.publish import first_plan
from dreamshard.values import Inventory, Topology

Case = Callable[[str, str, str], Callable[[Callable[[], Any]], None]]


def cases(d: Path, case: Case) -> None:
    d.mkdir(parents=True, exist_ok=True)
    inv = synth_inventory(8, 0, name="loop")
    save_inventory(inv, d / "inv.yaml")

    for value in ("-1", "nan", "inf", "1e12", "abc", ""):

        @case("15.fast", f"replan --refine-seconds {value!r}", "replan -i inv.yaml --refine-seconds V")
        def _(value: str = value) -> tuple[bool, str]:
            before = snap(d)
            r = cli(["replan", "-i", str(d / "inv.yaml"), "--refine-seconds", value, "--store", str(d / "store")])
            return one_line_2(r, "--refine-seconds") and snap(d) == before, r[2][-80:]

        @case(
            "15.fast", f"plan --verify 1 --verify-anchors {value!r}", "plan -i inv.yaml --verify 1 --verify-anchors V"
        )
        def _(value: str = value) -> tuple[bool, str]:
            before = snap(d)
            r = cli(
                ["plan", "-i", str(d / "inv.yaml"), "--verify", "1", "--verify-anchors", value, "-o", str(d / "p.json")]
            )
            return one_line_2(r, "--verify-anchors") and snap(d) == before, r[2][-80:]

    for key, value in (
        ("replan_refine_seconds", ".nan"),
        ("replan_refine_seconds", "-5"),
        ("verify_anchors", "-1"),
        ("verify_anchors", "99"),
        ("verify_anchors", "[2]"),
        ("replan_refine_seconds", "'x'"),
        ("refine_confirm_rounds", "-1"),
        ("refine_confirm_rounds", "101"),
        ("refine_confirm_rounds", "1.5"),
        ("refine_confirm_rounds", "'x'"),
    ):

        @case("15.fast", f"params plan.{key}: {value}", "replan -i inv.yaml --params bad.yaml")
        def _(key: str = key, value: str = value) -> tuple[bool, str]:
            (d / "bad.yaml").write_text(f"plan:\n  {key}: {value}\n")
            before = snap(d)
            r = cli(["replan", "-i", str(d / "inv.yaml"), "--params", str(d / "bad.yaml"), "--store", str(d / "store")])
            return one_line_2(r, f"plan.{key}") and snap(d) == before, r[2][-80:]

    topo = Topology(num_devices=2, memory_per_device_gb=4.0)

    def current_store(name: str) -> Any:
        store = open_store(str(d / name))
        plan = get_sharder("dim_greedy").shard(inv, topo)
        ok = GateDecision(
            approved=True,
            outcome="approved",
            plan_id=plan.plan_id,
            reason="approved",
            inventory_fingerprint=inv.fingerprint(),
        )
        publish_or_reject(store, plan.model_copy(update={"measured": plan.predicted}), ok)
        return store

    def unsure(plan_id: str) -> GateDecision:
        return GateDecision(
            approved=False,
            outcome="inconclusive",
            plan_id=plan_id,
            reason="inconclusive: ... the current plan stays (measure more rounds)",
        )

    grown = Inventory(name="loop", tables=(*inv.tables, inv.tables[0].model_copy(update={"name": "t_added"})))
    shrunk = Inventory(name="loop", tables=inv.tables[1:])
    resized = Inventory(name="loop", tables=(inv.tables[0].model_copy(update={"num_embeddings": 7}), *inv.tables[1:]))
    renamed = Inventory(name="loop", tables=(inv.tables[0].model_copy(update={"name": "t_renamed"}), *inv.tables[1:]))
    for what, other in (
        ("a table added", grown),
        ("a table removed", shrunk),
        ("a table's rows changed", resized),
        ("a table renamed", renamed),
    ):

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
        stats = Inventory(
            name="loop", tables=(t0.model_copy(update={"pooling_factor": t0.pooling_factor * 2}), *inv.tables[1:])
        )
        plan = get_sharder("size_greedy").shard(stats, topo)
        got = first_plan(store, plan, unsure(plan.plan_id))
        return got.outcome == "inconclusive", got.reason[-80:]

    @case("15.gate", "a clearly slower plan after a table was added: never current", "replan -i v2.yaml")
    def _() -> tuple[bool, str]:
        store = current_store("store-slow")
        plan = get_sharder("size_greedy").shard(grown, topo)
        slow = unsure(plan.plan_id).model_copy(update={"outcome": "rejected"})
        return first_plan(store, plan, slow).outcome == "rejected", ""

    # -- the fallback: a rejected plan for a version nothing current serves (gate.fallback) ------------------
    save_inventory(grown, d / "grown.yaml")

    def rejected_comparison(tag: str) -> tuple[Path, Path]:
        """A round-robin plan of `grown` (clearly slower on the simulator) and a genuine comparison holding it."""
        plan_file, cmp_file = d / f"rr-{tag}.json", d / f"cmp-{tag}.json"
        assert (
            cli(["plan", "-i", str(d / "grown.yaml"), "-d", "2", "-m", "4", "-s", "round_robin", "-o", str(plan_file)])[
                0
            ]
            == 0
        )
        assert (
            cli(
                [
                    "compare",
                    "-i",
                    str(d / "grown.yaml"),
                    "-d",
                    "2",
                    "-m",
                    "4",
                    "--backend",
                    "simulator",
                    "--rounds",
                    "5",
                    "--sharders",
                    "dim_greedy,size_greedy,lookup_greedy,size_lookup_greedy,torchrec",
                    "-p",
                    str(plan_file),
                    "--out",
                    str(cmp_file),
                ]
            )[0]
            == 0
        )
        return plan_file, cmp_file

    @case(
        "15.fallback",
        "rejected after a table was added: the best baseline's own plan becomes current",
        "plans publish rr.json -i grown.yaml --comparison cmp.json",
    )
    def _() -> tuple[bool, str]:
        from dreamshard.gate import baseline_plan
        from dreamshard.store import get_current, list_plans

        plan_file, cmp_file = rejected_comparison("ok")
        store = current_store("store-fallback")
        r = cli(
            [
                "plans",
                "publish",
                str(plan_file),
                "-i",
                str(d / "grown.yaml"),
                "--comparison",
                str(cmp_file),
                "--store",
                str(d / "store-fallback"),
                "--allow-simulated",
            ]
        )
        cur = get_current(store, "loop")
        real = baseline_plan(cur.sharder, grown, cur.topology, 0)
        outcomes = sorted(x.outcome for x in list_plans(store, "loop", grown.fingerprint()))
        return (
            r[0] == 1 and cur.units() == real.units() and outcomes == ["fallback", "rejected"],
            f"{cur.sharder}: {outcomes}",
        )

    for edit in ("swap two tables of the best baseline", "relabel round_robin's plan as the best baseline"):

        @case(
            "15.fallback",
            f"a comparison that would choose the fallback ({edit}): refused, nothing stored",
            "plans publish rr.json -i grown.yaml --comparison forged.json",
        )
        def _(edit: str = edit) -> tuple[bool, str]:
            import json

            plan_file, cmp_file = rejected_comparison(edit[:4])
            data = json.loads(cmp_file.read_text())
            best = min((x for x in data["results"] if x["sharder"] != "round_robin"), key=lambda x: x["overall_ms"])
            if edit.startswith("swap"):
                placement = best["plan"]["placement"]
                a, b = (n for n, dev in placement.items() if dev == 0), (n for n, dev in placement.items() if dev == 1)
                x, y = next(a), next(b)
                placement[x], placement[y] = placement[y], placement[x]
            else:
                rr = next(x for x in data["results"] if x["sharder"] == "round_robin")
                best["plan"]["placement"] = rr["plan"]["placement"]
                best["plan"]["column_shards"] = rr["plan"].get("column_shards", {})
            (d / "forged.json").write_text(json.dumps(data))
            store_dir = d / f"store-forged-{edit[:4]}"
            current_store(store_dir.name)
            before = snap(store_dir)
            r = cli(
                [
                    "plans",
                    "publish",
                    str(plan_file),
                    "-i",
                    str(d / "grown.yaml"),
                    "--comparison",
                    str(d / "forged.json"),
                    "--store",
                    str(store_dir),
                    "--allow-simulated",
                ]
            )
            return one_line_2(r, "") and snap(store_dir) == before, r[2][-80:]

    for value in ("mean", "MIN", "''", "[min]", "3"):

        @case("issue17", f"params profile.statistic: {value}", "replan -i inv.yaml --params bad.yaml")
        def _(value: str = value) -> tuple[bool, str]:
            (d / "bad.yaml").write_text(f"profile:\n  statistic: {value}\n")
            before = snap(d)
            r = cli(["replan", "-i", str(d / "inv.yaml"), "--params", str(d / "bad.yaml"), "--store", str(d / "store")])
            return one_line_2(r, "profile.statistic") and snap(d) == before, r[2][-80:]

    # -- the gate's sequential rule (gate/sequential.py) ------------------------------------------------------
    for section, key, value in (
        ("publish", "early_rounds", "1"),
        ("publish", "early_rounds", "-1"),
        ("publish", "early_rounds", "1000"),
        ("publish", "early_rounds", "'x'"),
        ("publish", "early_share", "0"),
        ("publish", "early_share", "1"),
        ("publish", "early_share", ".nan"),
        ("evaluate", "stop_early", "'maybe'"),
        ("publish", "early_rounds", "[3, 3]"),
        ("publish", "early_rounds", "[4, 3]"),
        ("publish", "early_rounds", "[3, 1]"),
        ("publish", "early_rounds", "true"),
        ("publish", "early_rounds", "[3, 'x']"),
        ("publish", "early_share", "0.5"),
    ):

        @case("15.seq", f"params {section}.{key}: {value}", "replan -i inv.yaml --params bad.yaml")
        def _(section: str = section, key: str = key, value: str = value) -> tuple[bool, str]:
            (d / "bad.yaml").write_text(f"{section}:\n  {key}: {value}\n")
            before = snap(d)
            r = cli(["replan", "-i", str(d / "inv.yaml"), "--params", str(d / "bad.yaml"), "--store", str(d / "store")])
            return one_line_2(r, f"{section}.") and snap(d) == before, r[2][-80:]

    @case(
        "15.seq",
        "a 3-round comparison edited so its early look cannot decide: refused, nothing stored",
        "plans publish rr.json -i grown.yaml --comparison noisy.json",
    )
    def _() -> tuple[bool, str]:
        import json

        plan_file, cmp_file = rejected_comparison("seq")
        data = json.loads(cmp_file.read_text())
        if data["rounds"] != 3:
            return False, f"the simulator's comparison took {data['rounds']} rounds, not the early look's 3"
        plan_id = json.loads(plan_file.read_text())["plan_id"]
        for r in data["results"]:  # the same medians (and measured figures), rounds far apart: noise
            o = r["overall_ms"]
            r["samples_ms"] = [o * 1.4, o, o * 0.7] if r["plan"]["plan_id"] == plan_id else [o * 0.7, o, o * 1.4]
        (d / "noisy.json").write_text(json.dumps(data))
        store_dir = d / "store-seq"
        current_store(store_dir.name)
        before = snap(store_dir)
        r = cli(
            [
                "plans",
                "publish",
                str(plan_file),
                "-i",
                str(d / "grown.yaml"),
                "--comparison",
                str(d / "noisy.json"),
                "--store",
                str(store_dir),
                "--allow-simulated",
            ]
        )
        return one_line_2(r, "decide nothing") and snap(store_dir) == before, r[2][-80:]
