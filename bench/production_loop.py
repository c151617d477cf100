"""Production-loop benchmark: a one-table change on the 120-table pool, fresh pipeline run vs an incremental
retrain vs the fast path vs a full retrain (docs/architecture/pipeline.md, "The production loop"). Run it on a quiet
machine (about 30 minutes on 2 cores). Every v2 path starts with v1's published plan current in its store, as in
production: the fast path and the pipeline's plan stage search from it (the incumbent).

    python bench/production_loop.py                  # writes bench/results/production_loop.{json,md}
    python bench/production_loop.py --render         # rebuild the markdown from the JSON

1. fresh: `dreamshard pipeline run` on the pool (params.yaml, CPU backend) in a new workspace;
2. the change: one table's pooling factor x1.5 and one new table (a copy of another under a new name);
3. incremental: `dreamshard pipeline run -i v2` in the same workspace (params.yaml: the measurement corpus serves
   every unchanged device, profile.incremental_tasks, train.init: previous);
4. fast path: `dreamshard replan -i v2` with the workspace's v1 model (search + verify, the gate measures the plan
   and the baselines interleaved, publish): no profiling, no training;
5. full retrain: `dreamshard pipeline run -i v2` in a copy of the fresh workspace without its corpus, with
   train.init: pretrained and profile.incremental_tasks: null (what the loop did before);
6. quality: the incremental, full-retrain and fast-path plans (the fast path's twice: the noise row), TorchRec's
   planner and every heuristic on v2, measured interleaved (>= 5 rounds, shuffled order each round).

Measurements counted: device timings (one fused operator timed on one device: the unit the corpus stores; the
new lines of data/corpus), profile records, the outer loop's measured placements (train metrics), the verify
and gate timings of the fast path (candidates x rounds); wall times from the commands' start to end.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results"
BIN = Path(sys.executable).parent
HEURISTICS = ("round_robin", "dim_greedy", "size_greedy", "lookup_greedy", "size_lookup_greedy")


def run(args: list[str], cwd: Path) -> tuple[float, str, str]:
    """(wall seconds, stdout, stderr) of one `dreamshard` command; exit codes 0 and 1 (not published) are results."""
    t0 = time.perf_counter()
    res = subprocess.run([str(BIN / "dreamshard"), *args], cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if res.returncode not in (0, 1):
        raise SystemExit(
            f"dreamshard {' '.join(args)} failed ({res.returncode}):\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}"
        )
    return wall, res.stdout, res.stderr


_FINISHED = re.compile(r"^(\d\d):(\d\d):(\d\d\.\d+) \| INFO +\| Task run '([^']+)' - Finished")
_BEGIN = re.compile(r"^(\d\d):(\d\d):(\d\d\.\d+) \| INFO +\| Flow run '[^']+' - Beginning flow run")


def stage_seconds(log: str) -> dict[str, float]:
    """Seconds per orchestrator task from a `pipeline run`'s log: each task's finish minus the previous finish (the
    flow's start for the first); tasks with a hashed suffix (git-commit-1a2) lose it."""
    out: dict[str, float] = {}
    last: float | None = None
    for line in log.splitlines():
        m = _BEGIN.match(line) or _FINISHED.match(line)
        if m is None:
            continue
        t = int(m.group(1)) * 3600 + int(m.group(2)) * 60 + float(m.group(3))
        if m.re is _FINISHED and last is not None:
            name = re.sub(r"-[0-9a-f]{3}$", "", m.group(4))
            out[name] = round(out.get(name, 0.0) + (t - last) % 86400, 1)
        if m.re is _BEGIN and last is not None:
            continue  # a subflow's start (publish-plan): its time goes to its own tasks
        last = t
    return out


def changed_inventory(src: Path, dst: Path) -> str:
    from dreamshard.documents import load_inventory, save_inventory
    from dreamshard.values import Inventory

    inv = load_inventory(src)
    t0, t1 = inv.tables[0], inv.tables[1]
    new = t1.model_copy(update={"name": f"{t1.name}_new"})
    v2 = Inventory(
        name=inv.name, tables=(t0.model_copy(update={"pooling_factor": t0.pooling_factor * 1.5}), *inv.tables[1:], new)
    )
    save_inventory(v2, dst)
    return f"{t0.name}: pooling x1.5; {new.name}: new (a copy of {t1.name})"


#: The corpus writers whose timings are training data the change made necessary (the profile stage, the loop);
#: the others are the plan stage's verify and refinement (a fixed time budget whatever changed) and the lower
#: bound's singles.
TRAINING_WRITERS = ("profile", "profile-workers", "loop")


def corpus_counts(ws: Path) -> dict[str, int]:
    """Device timings in the workspace's corpus, by writer (one JSONL file each)."""
    return {f.stem: len(f.read_text().splitlines()) for f in (ws / "data" / "corpus").glob("*.jsonl")}


def pipeline_counts(ws: Path, corpus_before: dict[str, int] | None = None) -> dict[str, Any]:
    """Profile records, device timings (all, and the training data's) and the outer loop's new measurements of the
    workspace's last run (`corpus_before`: the corpus's counts before it)."""
    profile = (
        sum(1 for _ in (ws / "data" / "measurements.jsonl").open())
        if (ws / "data" / "measurements.jsonl").is_file()
        else 0
    )
    train = json.loads((ws / "metrics" / "train.json").read_text()) if (ws / "metrics" / "train.json").is_file() else {}
    new = {w: n - (corpus_before or {}).get(w, 0) for w, n in corpus_counts(ws).items()}
    return {
        "profile_records": profile,
        "device_timings": sum(new.values()),
        "training_timings": sum(n for w, n in new.items() if w in TRAINING_WRITERS),
        "loop_measured": int(train.get("measured_now", 0)),
        "loop_from_cache": int(train.get("from_cache", 0)),
        "incremental": bool(train.get("incremental", False)),
        "tasks_measured": train.get("tasks_measured"),
    }


def full_retrain_params(work: Path) -> Path:
    """params.yaml as the loop ran before the corpus: a retrain from the packaged model on every task."""
    import yaml

    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["train"]["init"] = "pretrained"
    params["profile"]["incremental_tasks"] = None
    out = work / "params-full.yaml"
    out.write_text(yaml.safe_dump(params, sort_keys=False))
    return out


def bench(work: Path, rounds: int) -> dict[str, Any]:
    from dreamshard.config.settings import resolve

    settings = resolve(ROOT / "params.yaml")
    store = work / "store"
    base = ["--params", str(ROOT / "params.yaml"), "--store", str(store)]
    pool = work / "v1.yaml"
    run(["inventory", "synth", "--params", str(ROOT / "params.yaml"), "-o", str(pool)], work)
    ws = work / "ws"
    fresh_s, *fresh_log = run(
        ["pipeline", "run", "--workspace", str(ws), "-i", str(pool), *base, "--dvc-remote", str(work / "remote")], work
    )
    fresh = {**pipeline_counts(ws), "stages_s": stage_seconds("\n".join(fresh_log))}
    # every v2 path runs as in production: v1's plan current in its store (copies taken now, before the incremental
    # run publishes v2), so its plan search starts from that plan (the `current` candidate; the pipeline's plan
    # stage reads it as its incumbent)
    shutil.copytree(store, work / "store-fast")
    shutil.copytree(store, work / "store-v1")  # untouched: the fast path can be run again from it (--work)
    shutil.copytree(store, work / "store-retrain")
    v1_plan = work / "v1-plan.json"
    v1_plan.write_text((ws / "data" / "plan.json").read_text())
    change = changed_inventory(pool, work / "v2.yaml")
    retrain_ws = work / "ws-retrain"
    shutil.copytree(ws, retrain_ws, symlinks=True)
    shutil.rmtree(retrain_ws / "data" / "corpus", ignore_errors=True)
    before = corpus_counts(ws)
    inc_s, *inc_log = run(
        [
            "pipeline",
            "run",
            "--workspace",
            str(ws),
            "-i",
            str(work / "v2.yaml"),
            *base,
            "--dvc-remote",
            str(work / "remote"),
        ],
        work,
    )
    incremental = {**pipeline_counts(ws, before), "stages_s": stage_seconds("\n".join(inc_log))}

    fast_s, fast_out, _ = run(
        [
            "replan",
            "-i",
            str(work / "v2.yaml"),
            "--model",
            str(retrain_ws / "models" / "dreamshard"),
            "--json",
            "--params",
            str(ROOT / "params.yaml"),
            "--store",
            str(work / "store-fast"),
        ],
        work,
    )
    fast = json.loads(fast_out)
    n_baselines = len(settings.publish.baselines)
    # the rounds the gate measured: min_rounds, or an early look's (publish.early_rounds) when it decided (the reason
    # says)
    said = re.search(r"over (\d+) round", fast.get("reason", ""))
    gate_rounds = int(said.group(1)) if said else max(settings.evaluate.rounds, settings.publish.min_rounds)
    # what verify measured (replan reports it: candidates and anchors, each for the rounds it lasted)
    ver = fast.get("verification") or {}
    verify_timings = sum(c.get("rounds") or ver["rounds"] for c in ver.get("candidates", ()))
    fast_timings = verify_timings + (n_baselines + 1) * gate_rounds

    full = ["--params", str(full_retrain_params(work)), "--store", str(work / "store-retrain")]
    retrain_s, *retrain_log = run(
        [
            "pipeline",
            "run",
            "--workspace",
            str(retrain_ws),
            "-i",
            str(work / "v2.yaml"),
            *full,
            "--dvc-remote",
            str(work / "remote"),
        ],
        work,
    )
    retrain = {**pipeline_counts(retrain_ws), "stages_s": stage_seconds("\n".join(retrain_log))}

    from dreamshard.store import get_current, open_store

    fast_plan = get_current(open_store(str(work / "store-fast")), "pool") if fast["outcome"] == "published" else None
    plans = work / "plans"
    plans.mkdir()
    contenders: list[str] = []
    (plans / "retrain.json").write_text((retrain_ws / "data" / "plan.json").read_text())
    (plans / "incremental.json").write_text((ws / "data" / "plan.json").read_text())
    contenders += ["-p", str(plans / "retrain.json")]
    if (
        json.loads((plans / "incremental.json").read_text())["plan_id"]
        != json.loads((plans / "retrain.json").read_text())["plan_id"]
    ):
        contenders += ["-p", str(plans / "incremental.json")]
    if fast_plan is not None:  # twice, under two ids (compare measures each plan once): the noise row
        (plans / "fast.json").write_text(fast_plan.model_dump_json())
        again = fast_plan.model_copy(update={"plan_id": f"{fast_plan.plan_id}-again"})
        (plans / "fast-again.json").write_text(again.model_dump_json())
        contenders += ["-p", str(plans / "fast.json"), "-p", str(plans / "fast-again.json")]
    cmp_file = work / "comparison.json"
    run(
        [
            "compare",
            "-i",
            str(work / "v2.yaml"),
            "--params",
            str(ROOT / "params.yaml"),
            "--rounds",
            str(rounds),
            "--sharders",
            ",".join([*HEURISTICS, "torchrec"]),
            "-d",
            str(settings.plan_devices),
            *contenders,
            "--out",
            str(cmp_file),
        ],
        work,
    )
    cmp = json.loads(cmp_file.read_text())
    roles = {
        json.loads((plans / "incremental.json").read_text())["plan_id"]: "incremental retrain",
        json.loads((plans / "retrain.json").read_text())["plan_id"]: "full retrain",
    }
    if fast_plan is not None:
        roles[fast_plan.plan_id] = "fast path"
        roles[f"{fast_plan.plan_id}-again"] = "fast path (again: the noise row)"
    from dreamshard.documents import load_inventory, load_plan
    from dreamshard.placement.diff import plan_diff

    v2, old = load_inventory(work / "v2.yaml"), load_plan(v1_plan)
    moved = {
        label: plan_diff(old, load_plan(plans / f"{name}.json"), v2).model_dump()
        for label, name in (("incremental", "incremental"), ("retrain", "retrain"))
    }
    if fast.get("diff"):
        moved["fast_path"] = fast["diff"]
    return {
        "change": change,
        "rounds": rounds,
        "roles": roles,
        "backend": settings.profile.backend,
        "moved": moved,
        "fast_candidates": [c["source"] for c in ver.get("candidates", ())],
        "fast_chosen": ver.get("chosen"),
        "fresh": {"wall_s": round(fresh_s, 1), **fresh},
        "incremental": {"wall_s": round(inc_s, 1), **incremental},
        "fast_path": {
            "wall_s": round(fast_s, 1),
            "outcome": fast["outcome"],
            "reason": fast["reason"],
            "profile_records": 0,
            "loop_measured": 0,
            "verify_and_gate_timings": fast_timings,
            "gate_rounds": gate_rounds,
            "verify_timings": verify_timings,
            "verify_most": len(ver.get("candidates", ())) * ver.get("rounds", 0),
        },
        "retrain": {"wall_s": round(retrain_s, 1), **retrain},
        "comparison": [
            {
                "plan_id": r["plan"]["plan_id"],
                "sharder": r["sharder"],
                "overall_ms": r["overall_ms"],
                "samples_ms": r["samples_ms"],
            }
            for r in cmp["results"]
        ],
    }


def render(data: dict[str, Any]) -> str:
    rows = data["comparison"]
    by_sharder: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_sharder.setdefault(r["sharder"], []).append(r)
    torchrec = by_sharder["torchrec"][0]["overall_ms"]
    best = min(r["overall_ms"] for s in HEURISTICS for r in by_sharder.get(s, []))
    f, fa, rt, inc = data["fresh"], data["fast_path"], data["retrain"], data["incremental"]

    def row(label: str, r: dict[str, Any]) -> str:
        tr = (
            f"{r['training_timings']} | {r['training_timings'] / f['training_timings']:.2f}"
            if "training_timings" in r and "training_timings" in f
            else "- | -"
        )
        return (
            f"| {label} | {r['wall_s']} | {r['wall_s'] / f['wall_s']:.2f} | {r['device_timings']} | "
            f"{r['device_timings'] / f['device_timings']:.2f} | {tr} | {r['profile_records']} | "
            f"{r['loop_measured']} | - |"
        )

    lines = [
        "# Production loop: a one-table change on the 120-table pool (CPU backend)",
        "",
        f"Change: {data['change']}. Generated by `bench/production_loop.py` on a 2-core machine with nothing "
        "else running "
        "(the same-plan-twice row below shows how noisy it was).",
        "",
        "| run | wall s | vs fresh | device timings | vs fresh | training timings | vs fresh | profile "
        "records | loop placements measured | other timings |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        row("fresh pipeline (v1)", f),
        row(f"incremental retrain (v2, same workspace; loop on {inc['tasks_measured']} tasks)", inc),
        row("full retrain (v2, no corpus, from the packaged model)", rt),
        f"| fast path `replan` (v2): {fa['outcome']} | {fa['wall_s']} | {fa['wall_s'] / f['wall_s']:.2f} | - "
        "| - | 0 | 0.00 | 0 | 0 | "
        + (
            f"{fa['verify_and_gate_timings']}: verify {fa['verify_timings']} (of {fa['verify_most']}) + gate "
            f"{fa['verify_and_gate_timings'] - fa['verify_timings']} ({fa['gate_rounds']} rounds) |"
            if "verify_timings" in fa
            else f"up to {fa['verify_and_gate_timings'] + fa.get('anchor_timings', 0)}: verify + gate "
            f"({fa.get('gate_rounds', 5)} gate rounds) |"
        ),
        "",
        f"Plans on v2, measured interleaved ({data['rounds']} rounds, backend {data['backend']}); ratios to TorchRec's "
        f"planner and to the best heuristic:",
        "",
        "| plan | ms | x TorchRec | x best heuristic |",
        "|---|---:|---:|---:|",
    ]
    for r in sorted(rows, key=lambda r: r["overall_ms"]):
        label = data["roles"].get(r["plan_id"], r["sharder"])
        lines.append(
            f"| {label} | {r['overall_ms']:.3f} | {r['overall_ms'] / torchrec:.3f} | {r['overall_ms'] / best:.3f} |"
        )
    stages = list(dict.fromkeys([*f.get("stages_s", {}), *inc.get("stages_s", {}), *rt.get("stages_s", {})]))
    if stages:
        lines += [
            "",
            "Where the time went (seconds per orchestrator task, from the runs' logs):",
            "",
            "| task | fresh | incremental | full retrain |",
            "|---|---:|---:|---:|",
        ]
        lines += [
            f"| {t} | {f.get('stages_s', {}).get(t, '-')} | {inc.get('stages_s', {}).get(t, '-')} | "
            f"{rt.get('stages_s', {}).get(t, '-')} |"
            for t in stages
        ]
    if data.get("moved"):
        lines += [
            "",
            "What each v2 plan reshards against v1's published plan (tables placed differently: another device, "
            "sharding type or shards; every path searched from v1's plan, the `current` candidate: the fast path from "
            "its store, the retrains' plan stage from the workspace's incumbent):",
            "",
            "| run | tables moved | GB moved | added | removed |",
            "|---|---:|---:|---:|---:|",
        ]
        for key, label in (
            ("incremental", "incremental retrain"),
            ("fast_path", "fast path"),
            ("retrain", "full retrain"),
        ):
            if (m := data["moved"].get(key)) is not None:
                lines.append(
                    f"| {label} | {len(m['moved'])} of {len(m['moved']) + m['kept']} | {m['moved_gb']:.3f} | "
                    f"{len(m['added'])} | {len(m['removed'])} |"
                )
        if data.get("fast_chosen"):
            lines += [
                "",
                f"Fast path: verify measured {', '.join(data['fast_candidates'])}; kept {data['fast_chosen']}.",
            ]
    lines += [
        "",
        f"Fast path outcome: {fa['outcome']} — {fa['reason']}",
        "",
        "Device timings: fused operators timed on one device and recorded in the measurement corpus (profile "
        "stage, training loop, plan verify and refinement, the lower bound's singles); training timings: the "
        "profile stage's and the loop's only (what the change made necessary; the plan stage refines for a "
        "fixed budget whatever changed). The evaluate stage's and the gate's interleaved timings are not "
        "counted (every path runs them alike).",
    ]
    if data.get("note"):
        lines += ["", f"Note: {data['note']}."]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--render", action="store_true")
    ap.add_argument("--work", type=Path, help="keep the workspaces here (default: a temporary directory)")
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    if not args.render:
        if args.work is not None:
            args.work.mkdir(parents=True, exist_ok=False)
            data = bench(args.work, args.rounds)
        else:
            with tempfile.TemporaryDirectory(prefix="dreamshard-loop-bench-") as tmp:
                data = bench(Path(tmp), args.rounds)
        (OUT / "production_loop.json").write_text(json.dumps(data, indent=2) + "\n")
    data = json.loads((OUT / "production_loop.json").read_text())
    (OUT / "production_loop.md").write_text(render(data))
    print((OUT / "production_loop.md").read_text())


if __name__ == "__main__":
    main()
