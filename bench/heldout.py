"""The shipped model on held-out generator families (dreamshard.inventory.heldout: public CTR cardinalities and a
lognormal/heavy-tailed family; half or all of the tables without access histograms), beside the heuristics and
TorchRec's planner, measured interleaved on this machine's `cpu` backend (FBGEMM TBE, gloo collectives).

    python bench/heldout.py                     # writes bench/results/heldout.{json,md}; ~15 min on 2 cores

Contenders per task: the heuristics, `torchrec` (the fixed baseline), and the learned planner (search only, no
hardware) in variants that isolate what it optimises:
- `dreamshard`: as `dreamshard plan` plans today;
- `dreamshard[card comm]`: all-to-all costed by the model card's comm fits (the pretraining machine's);
- `dreamshard[backend comm]`: all-to-all costed by the measuring backend's own fit (what verification, the gate
  and the oracle use: one objective);
- `dreamshard+calibrate`: calibrated for the inventory first (`plan --calibrate-seconds 20`), then searched;
- `dim_greedy (again)`: the dim_greedy plan measured a second time (the noise row).
For each learned plan the prediction's error per component (forward compute, forward all-to-all; max device) is
reported against the oracle's own measurement of that plan.
Run it on a quiet machine (no test suite, no second benchmark).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results"
#: (label, family, tables, seed, devices, histograms declared)
TASKS: tuple[tuple[str, str, int, int, int, bool], ...] = (
    ("ctr-26/2", "ctr", 26, 1, 2, True),
    ("ctr-60/4 nohist", "ctr", 60, 2, 4, False),
    ("ctr-120/8", "ctr", 120, 3, 8, True),
    ("lognormal-30/3 nohist", "lognormal", 30, 4, 3, False),
    ("lognormal-80/6", "lognormal", 80, 5, 6, True),
    ("lognormal-120/8 nohist", "lognormal", 120, 6, 8, False),
)
MEMORY_GB = 16.0
BASELINES = ("dim_greedy", "size_greedy", "lookup_greedy", "size_lookup_greedy", "torchrec")
NOISE = "dim_greedy (again)"
CARD, BACKEND = "dreamshard[card comm]", "dreamshard[backend comm]"
CALIBRATED = "dreamshard+calibrate"
LEARNED = ("dreamshard", CARD, BACKEND, CALIBRATED)
#: plan.calibrate_seconds of the calibrated variant
CALIBRATE_SECONDS = 20.0


def learned_plans(inv: Any, topo: Any, oracle: Any, model: Path | None) -> tuple[list[Any], dict[str, float]]:
    """The learned planner's plans: as shipped, and with its all-to-all from the card vs from the backend."""
    from dreamshard.learning.planning_cost import PlanningCost, comm_for
    from dreamshard.search.sharders import ModelSharder
    from dreamshard.sharders import get_sharder

    plans, secs = [], {}
    for label in LEARNED:
        options = {"oracle": oracle, "calibrate_seconds": CALIBRATE_SECONDS} if label == CALIBRATED else {}
        sharder = get_sharder("dreamshard", model_dir=model, **options)
        assert isinstance(sharder, ModelSharder)
        if label == CARD:
            card = sharder.model.card.comm_models
            sharder.planning_cost = lambda t, s=sharder, c=card: PlanningCost(  # type: ignore[method-assign]
                s.model.cost_net, t, comm_for(t, c), s.config.risk
            )
        elif label == BACKEND:
            sharder.planning_cost = lambda t, s=sharder: PlanningCost(  # type: ignore[method-assign]
                s.model.cost_net, t, oracle.comm_model(t), s.config.risk
            )
        t0 = time.perf_counter()
        plan = sharder.shard(inv, topo)
        secs[label] = time.perf_counter() - t0
        plans.append(plan.model_copy(update={"sharder": label}))
    return plans, secs


def component_errors(inv: Any, plan: Any, oracle: Any) -> dict[str, float]:
    """The plan's predicted vs measured bottleneck figures: forward compute and forward all-to-all of the device
    with the largest measured total (relative error, signed)."""
    from dreamshard.placement.expand import expand_plan

    units, placement = expand_plan(inv, plan)
    measured = oracle.measure(units, placement, plan.topology).costs
    predicted = plan.predicted
    d = max(range(len(measured.per_device)), key=lambda i: measured.per_device[i].total)
    m, p = measured.per_device[d], predicted.per_device[d]
    return {
        "fwd_compute": (p.fwd_compute - m.fwd_compute) / max(m.fwd_compute, 1e-9),
        "fwd_comm": (p.fwd_comm - m.fwd_comm) / max(m.fwd_comm, 1e-9),
        "overall": (predicted.overall_ms - measured.overall_ms) / measured.overall_ms,
    }


def run_task(task: tuple[str, str, int, int, int, bool], oracle: Any, rounds: int, model: Path | None) -> dict:
    from dreamshard.evaluation import compare_sharders
    from dreamshard.inventory.heldout import heldout_inventory
    from dreamshard.sharders import get_sharder
    from dreamshard.values import Topology

    label, family, tables, seed, devices, hist = task
    inv = heldout_inventory(family, tables, seed, histograms=hist)
    topo = Topology(num_devices=devices, memory_per_device_gb=MEMORY_GB)
    plans, plan_s = learned_plans(inv, topo, oracle, model)
    errors = {p.sharder: component_errors(inv, p, oracle) for p in plans}
    noise = get_sharder("dim_greedy").shard(inv, topo).model_copy(update={"sharder": NOISE})
    cmp = compare_sharders(inv, topo, list(BASELINES), oracle, rounds=rounds, extra_plans=[*plans, noise], seed=seed)
    ms = {r.sharder: r.overall_ms for r in cmp.results}
    heuristics = [b for b in BASELINES if b in ms and b != "torchrec"]
    best = min(heuristics, key=lambda b: ms[b])
    row = {
        "task": label,
        "tables": inv.num_tables,
        "devices": devices,
        "histograms": sum(t.access_histogram is not None for t in inv.tables),
        "ms": ms,
        "best_heuristic": best,
        "vs_best": {k: v / ms[best] for k, v in ms.items()},
        "vs_torchrec": {k: v / ms["torchrec"] for k, v in ms.items()} if "torchrec" in ms else {},
        "noise": abs(ms[NOISE] - ms["dim_greedy"]) / ms["dim_greedy"],
        "plan_s": plan_s,
        "prediction_error": errors,
        "calibration": next((p.calibration.model_dump() for p in plans if p.calibration), None),
        "infeasible": dict(cmp.infeasible),
    }
    print(
        f"{label}: best {best} {ms[best]:.2f} ms; "
        + ", ".join(f"{k} {row['vs_best'][k]:.3f}" for k in (*LEARNED, NOISE))
        + f"; noise {row['noise']:.1%}",
        flush=True,
    )
    return row


def geomean(xs: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(x) for x in xs)) if xs else float("nan")


def render(res: dict[str, Any]) -> str:
    rows = res["rows"]
    names = [*LEARNED, *BASELINES, NOISE]
    lines = [
        "# Held-out generator families",
        "",
        f"Generated by `bench/heldout.py` on {res['date']} ({res['machine']}), model {res['model']}; "
        f"{res['rounds']} interleaved rounds, {MEMORY_GB:g} GB per device, batch {res['batch']}. Ratios to the "
        "per-task best heuristic (< 1: better), and geomeans to it and to TorchRec's planner.",
        "",
        "| task | best heuristic | " + " | ".join(names) + " | noise |",
        "|---|---|" + "---:|" * (len(names) + 1),
    ]
    for r in rows:
        cells = " | ".join(f"{r['vs_best'][n]:.3f}" if n in r["vs_best"] else "-" for n in names)
        lines.append(f"| {r['task']} | {r['best_heuristic']} {r['ms'][r['best_heuristic']]:.1f} ms | {cells} | "
                     f"{r['noise']:.1%} |")  # fmt: skip
    for label, key in (("best heuristic", "vs_best"), ("torchrec", "vs_torchrec")):
        cells = " | ".join(f"**{geomean([r[key][n] for r in rows if n in r[key]]):.3f}**" for n in names)
        lines.append(f"| **geomean vs {label}** | | {cells} | |")
    lines += [
        "",
        "Prediction error of the learned plans (predicted / measured - 1, the measured bottleneck device; median "
        "over tasks):",
        "",
        "| variant | fwd compute | fwd all-to-all | overall |",
        "|---|---:|---:|---:|",
    ]
    for n in LEARNED:
        e = [r["prediction_error"][n] for r in rows]
        lines.append(
            f"| {n} | "
            + " | ".join(f"{statistics.median(x[k] for x in e):+.0%}" for k in ("fwd_compute", "fwd_comm", "overall"))
            + " |"
        )
    cal = [(r, r["calibration"]) for r in rows if r.get("calibration")]
    if cal:
        lines += [
            "",
            "Calibration (held-out probe partition, MAPE of device compute before -> after; probes; seconds): "
            + "; ".join(
                f"{r['task']} {c['mape_before']:.0%} -> {c['mape_after']:.0%}, {c['probes']}, {c['seconds']:.0f} s"
                for r, c in cal
            ),
        ]
    lines += ["", f"Same plan measured twice: median {statistics.median(r['noise'] for r in rows):.1%}, max "
              f"{max(r['noise'] for r in rows):.1%}."]  # fmt: skip
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tasks", default="", help="Comma-separated task labels (default: all).")
    ap.add_argument("--model", type=Path, default=None, help="Model directory (default: the packaged model).")
    ap.add_argument("--out", type=Path, default=OUT / "heldout.json")
    args = ap.parse_args()
    from dreamshard.config.settings import resolve
    from dreamshard.learning.model_store import load_model

    settings = resolve(ROOT / "params.yaml", {"profile.backend": "cpu"})
    oracle = settings.oracle()
    chosen = [t for t in TASKS if not args.tasks or t[0] in args.tasks.split(",")]
    t0 = time.perf_counter()
    rows = [run_task(t, oracle, args.rounds, args.model) for t in chosen]
    res = {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {platform.processor() or 'cpu'}",
        "model": load_model(args.model, require_policy=False).card.version,
        "rounds": args.rounds,
        "batch": settings.topology.batch_size,
        "seconds": round(time.perf_counter() - t0),
        "rows": rows,
    }
    args.out.write_text(json.dumps(res, indent=1))
    args.out.with_suffix(".md").write_text(render(res))
    print(render(res))


if __name__ == "__main__":
    main()
