"""The publish path as a team meets it: a 13-table model published, then re-planned after a statistics change and
after a table is added, with the CPU backend (real FBGEMM timings) and the packaged model; each door timed from its
start to its end, with what the gate decided, how many rounds it measured and how many of the current plan's tables
moved (docs/architecture/gate.md, "One publish path"). Then the same publish with publish.require_human and nobody
at the terminal (pending), and `plans approve`. Run it on a quiet machine (about 10 minutes on 2 cores).

    python bench/publish_path.py                     # writes bench/results/publish_path.{json,md}
    python bench/publish_path.py --render            # rebuild the markdown from the JSON
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml
from results_files import write_results

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results"
BIN = Path(sys.executable).parent
TABLES = 13
PARAMS: dict[str, Any] = {
    "topology": {"memory_per_device_gb": 16.0, "batch_size": 2048},
    "profile": {"backend": "cpu", "num_threads": 1},
    "plan": {"num_devices": 4},
    "publish": {"store_uri": "store"},
}


def run(args: list[str], cwd: Path) -> dict[str, Any]:
    """One `dreamshard ... --json` command: its wall seconds, exit code and JSON answer."""
    t0 = time.perf_counter()
    res = subprocess.run([str(BIN / "dreamshard"), *args], cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if res.returncode not in (0, 1, 3):
        raise SystemExit(f"dreamshard {' '.join(args)} failed ({res.returncode}):\n{res.stderr[-2000:]}")
    return {"seconds": round(wall, 1), "exit": res.returncode, "answer": json.loads(res.stdout) if res.stdout else {}}


def _row(door: str, got: dict[str, Any]) -> dict[str, Any]:
    """What a door did: its time, status, the gate's outcome, its rounds, and the tables it moved."""
    a = got["answer"]
    pub = a.get("publication", a)  # replan wraps the publication
    d = (pub or {}).get("decision") or {}
    diff = (pub or {}).get("diff") or a.get("diff") or {}
    return {
        "door": door,
        "seconds": got["seconds"],
        "exit": got["exit"],
        "status": (pub or {}).get("status") or a.get("outcome"),
        "gate": d.get("label") or d.get("outcome"),
        "rounds": d.get("rounds"),
        "interval": [d.get("ratio_low"), d.get("ratio_high")],
        "decided_by": d.get("decided_by"),
        "moved": len(diff.get("moved", [])) if diff else None,
        "reason": (pub or {}).get("reason", a.get("reason", ""))[:400],
    }


def bench() -> dict[str, Any]:
    from dreamshard.documents import save_inventory
    from dreamshard.inventory.synth import synth_inventory
    from dreamshard.values import Inventory

    rows = []
    with tempfile.TemporaryDirectory(prefix="dreamshard-publish-") as d:
        work = Path(d)
        (work / "params.yaml").write_text(yaml.safe_dump(PARAMS))
        v1 = synth_inventory(TABLES, 11, dims=(8, 128), name="team")
        save_inventory(v1, work / "v1.yaml")
        t0 = v1.tables[0]
        v2 = v1.model_copy(
            update={"tables": (t0.model_copy(update={"pooling_factor": t0.pooling_factor * 1.5}), *v1.tables[1:])}
        )
        save_inventory(Inventory.model_validate(v2.model_dump()), work / "v2.yaml")
        v3 = Inventory(name="team", tables=(*v2.tables, v1.tables[3].model_copy(update={"name": "merchant"})))
        save_inventory(v3, work / "v3.yaml")
        got = run(["plan", "-i", "v1.yaml", "-s", "dreamshard", "-o", "p1.json", "--json"], work)
        rows.append({"door": "plan (search)", "seconds": got["seconds"], "exit": got["exit"]})
        rows.append(
            _row(
                "plans publish --measure",
                run(["plans", "publish", "p1.json", "-i", "v1.yaml", "--measure", "--json"], work),
            )
        )
        rows.append(_row("replan (statistics changed)", run(["replan", "-i", "v2.yaml", "--json"], work)))
        rows.append(_row("replan (a table added)", run(["replan", "-i", "v3.yaml", "--json"], work)))
        human = {**PARAMS, "publish": {**PARAMS["publish"], "store_uri": "store-h", "require_human": True}}
        (work / "human.yaml").write_text(yaml.safe_dump(human))
        pending = run(
            ["plans", "publish", "p1.json", "-i", "v1.yaml", "--measure", "--params", "human.yaml", "--json"], work
        )
        rows.append(_row("plans publish (require_human, no terminal)", pending))
        waiting = pending["answer"].get("pending_ref") or {}
        if waiting:
            got = run(["plans", "approve", waiting["plan_id"], "--store", "store-h", "--json"], work)
            rows.append(_row("plans approve", got))
    return {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "tables": TABLES, "rows": rows}


def render(result: dict[str, Any]) -> str:
    lines = [
        f"# The publish path, {result['tables']} tables on 4 cpu devices (real timings), {result['date']}",
        "",
        "| door | seconds | exit | status | gate | rounds | interval | decided by | moved |",
        "|---|---:|---:|---|---|---:|---|---|---:|",
    ]
    for r in result["rows"]:
        low, high = r.get("interval") or [None, None]
        interval = f"[{low:.3f}, {high:.3f}]" if low is not None and high is not None else "-"
        lines.append(
            f"| {r['door']} | {r['seconds']} | {r['exit']} | {r.get('status') or '-'} | {r.get('gate') or '-'} "
            f"| {r.get('rounds') or '-'} | {interval} | {r.get('decided_by') or '-'} | "
            f"{r['moved'] if r.get('moved') is not None else '-'} |"
        )
    lines += ["", "Reasons:", ""] + [f"- {r['door']}: {r['reason']}" for r in result["rows"] if r.get("reason")]
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--render", action="store_true", help="rebuild the markdown from the JSON")
    args = p.parse_args()
    write_results(OUT, "publish_path", args.render, bench, render)


if __name__ == "__main__":
    main()
