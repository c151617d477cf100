"""Small hostile-user defects of issue 18 (items 16a-d and 7, part), run by bench/hostile_cases.py
(`cases(directory, case)`); tests/test_hardening_smalls.py holds the same behaviour as tests.

A case holds when the command refuses the input in one line (exit 2, no traceback) and leaves every file as it
was, or, for the lower bound, when no plan of any heuristic costs less than the LB under the simulator.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hostile_cases import one_line_2, snap  # bench/ is the script's directory

from dreamshard.cli.app import invoke as cli
from dreamshard.config.settings import installed_pipeline_file
from dreamshard.documents import save_inventory, save_plan
from dreamshard.evaluation import compare_sharders, evaluate_plan
from dreamshard.gate import evaluate_gate
from dreamshard.inventory.synth import synth_inventory
from dreamshard.profiling import make_oracle
from dreamshard.sharders import HEURISTICS, get_sharder
from dreamshard.store import open_store, publish
from dreamshard.values import Topology
from dreamshard.values.lineage import Lineage

Case = Callable[[str, str, str], Callable[[Callable[[], Any]], None]]


def _stored_with_lineage(d: Path, topo: Topology) -> tuple[str, str]:
    """A published plan with a lineage that passes every check and an empty DVC remote: reproducing it fails
    once the workspace is started. (store, plan id)."""
    inv = synth_inventory(6, 0, name="inv")
    plan = get_sharder("lookup_greedy").shard(inv, topo).model_copy(update={"sharder": "dreamshard"})
    plan = evaluate_plan(inv, plan, make_oracle("simulator"))
    (d / "remote").mkdir(parents=True, exist_ok=True)
    lineage = Lineage(
        inventory_fingerprint=inv.fingerprint(),
        dvc_lock="schema: '2.0'\n",
        params="{}\n",
        dvc_remote=str(d / "remote"),
        dvc_yaml=installed_pipeline_file("dvc.yaml").read_text(),
        model_md5="a" * 32 + ".dir",
        measurements_md5="b" * 32,
    )
    plan = plan.model_copy(update={"lineage": lineage})
    cost = plan.best_costs.overall_ms if plan.best_costs else 1.0
    publish(open_store(str(d / "store")), plan, evaluate_gate(plan, {"size_greedy": cost * 2}, 0.0))
    return str(d / "store"), plan.plan_id


def cases(d: Path, case: Case) -> None:  # noqa: C901 - one flat list of cases reads best
    d.mkdir(parents=True, exist_ok=True)
    topo = Topology(num_devices=2, memory_per_device_gb=1.0, batch_size=512)

    # -- 18.16a: a failed reproduce removes only what it created
    store, plan_id = _stored_with_lineage(d / "16a", topo)
    for what, rel in (
        ("an existing empty --into directory stays", "mine"),
        ("a new --into directory (and its new parents) is removed again", "new/deeper"),
    ):

        @case("18.16", f"failed plans reproduce: {what}", f"plans reproduce ID --into {rel} (empty DVC remote)")
        def _(rel: str = rel) -> bool:
            into = d / "16a" / rel
            if rel == "mine":
                into.mkdir()
            r = cli(["plans", "reproduce", plan_id, "--store", store, "--into", str(into)])
            kept = into.is_dir() and not any(into.iterdir()) if rel == "mine" else not (d / "16a" / "new").exists()
            return one_line_2(r) and kept

    # -- 18.16b: the same plan twice in one comparison
    inv = synth_inventory(8, 0, name="inv")
    bdir = d / "16b"
    bdir.mkdir()
    invf = save_inventory(inv, bdir / "inv.yaml")
    planf = save_plan(
        get_sharder("lookup_greedy").shard(inv, topo).model_copy(update={"sharder": "dreamshard"}), bdir / "plan.json"
    )
    (bdir / "copy.json").write_bytes(planf.read_bytes())
    os.link(planf, bdir / "hard.json")
    edited = json.loads(planf.read_text())
    edited["sharder"] = "size_greedy"
    (bdir / "same_id.json").write_text(json.dumps(edited))
    for what, second, needle in (
        ("the same path", "plan.json", "is the same file as"),
        ("a hard link to it", "hard.json", "is the same file as"),
        ("a copy (same content)", "copy.json", "has the same content as"),
        ("another file holding the same plan id", "same_id.json", "both hold plan"),
    ):

        @case(
            "18.16", f"compare -p X -p {what}: refused up front, nothing written", f"compare -p plan.json -p {second}"
        )
        def _(second: str = second, needle: str = needle) -> bool:
            before = snap(bdir)
            r = cli(
                [
                    "compare",
                    "-i",
                    str(invf),
                    "-d",
                    "2",
                    "-m",
                    "1",
                    "--batch-size",
                    "512",
                    "--backend",
                    "simulator",
                    "--rounds",
                    "2",
                    "--sharders",
                    "round_robin",
                    "-p",
                    str(planf),
                    "-p",
                    str(bdir / second),
                    "--out",
                    str(bdir / "cmp.json"),
                ]
            )
            return one_line_2(r, "ConfigError", needle) and snap(bdir) == before

    # -- 18.16c: an infeasible learned plan names the sharder asked for
    cdir = d / "16c"
    cdir.mkdir()
    tiny = save_inventory(synth_inventory(6, 0, name="tiny"), cdir / "inv.yaml")  # each table fits, not all
    for sharder in ("dreamshard", "dreamshard_lpt", "dreamshard_rl"):

        @case(
            "18.16",
            f"infeasible plan -s {sharder} names {sharder}, not a candidate",
            f"plan -i inv.yaml -d 2 -m 0.15 -s {sharder}",
        )
        def _(sharder: str = sharder) -> tuple[bool, str]:
            r = cli(["plan", "-i", str(tiny), "-d", "2", "-m", "0.15", "-s", sharder, "-o", str(cdir / "p.json")])
            ok = one_line_2(r, "InfeasiblePlacementError", f"(sharder {sharder})") and "round_robin" not in r[2]
            return ok and not (cdir / "p.json").exists(), r[2].strip()[-60:]

    # -- 18.16d: the LB is below every heuristic plan under the simulator
    for n, seed, devices in ((12, 0, 2), (40, 1, 4), (80, 2, 8), (8, 3, 8), (30, 4, 4)):

        @case(
            "18.16",
            f"LB <= every heuristic's plan: {n} tables, {devices} devices (simulator)",
            f"compare -i synth({n}, seed {seed}) -d {devices} --backend simulator",
        )
        def _(n: int = n, seed: int = seed, devices: int = devices) -> tuple[bool, str]:
            t = Topology(num_devices=devices, memory_per_device_gb=8.0, batch_size=512)
            cmp = compare_sharders(
                synth_inventory(n, seed, name="x"), t, [*HEURISTICS, "torchrec"], make_oracle("simulator"), rounds=1
            )
            low = min(r.ratio_to_lower_bound for r in cmp.results)
            return low >= 1.0 - 1e-9, f"lowest x LB {low:.3f}"

    # -- 18.7 (part): pipeline init on a file
    pdir = d / "18.7"
    pdir.mkdir()
    existing = pdir / "existing.txt"
    existing.write_text("mine\n")
    for what, target in (("an existing file", existing), ("a path under an existing file", existing / "ws")):

        @case("18.7", f"pipeline init on {what}: one line, nothing created", f"pipeline init {target.relative_to(d)}")
        def _(target: Path = target) -> bool:
            before = snap(pdir)
            return one_line_2(cli(["pipeline", "init", str(target)]), "is a file") and snap(pdir) == before
