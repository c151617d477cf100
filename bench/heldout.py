"""The shipped model on held-out generator families (dreamshard.inventory.heldout: public CTR cardinalities and a
lognormal/heavy-tailed family; half or all of the tables without access histograms), beside the heuristics and
TorchRec's planner, graded by the judge (bench/judge.py: code the planner never uses, collectives timed on real
ranks at each plan's bytes, no fitted model), with the oracle's figures (this machine's `cpu` backend, FBGEMM TBE,
the collective fits the planner uses) and their error against the judge beside them.

    python bench/heldout.py                     # writes bench/results/heldout.{json,md}; ~20 min on 2 cores
    python bench/heldout.py --quick             # one small task, 2 rounds, 2 s of calibration and refinement

Contenders per task: the heuristics, `torchrec` (the fixed baseline), and the learned planner in the variants the
issue's table asks for:
- `dreamshard`: search only, no hardware (the model out of the box: the card's comm fits);
- `dreamshard[risk 0]`, `dreamshard[one assumption]`: ablations of search only: the ensemble's mean without its
  spread, and tables without histograms costed under Zipf(1.05) alone (`plan.unknown_skews: [1.05]`);
- `dreamshard[backend]`: search on the measuring backend's collective fits (one objective), no calibration;
- `dreamshard+calibrate`: calibrated for the inventory first (20 s of probes on the backend), then searched;
- `plan stage`: what `dreamshard plan` does with the pipeline's params: calibration, search, verification of the
  best candidates, refinement;
- `dim_greedy (again)`: the dim_greedy plan measured a second time (the noise row).
For each learned plan the prediction's error per component (forward compute, forward all-to-all; the measured
bottleneck device) is reported against the oracle's own measurement of that plan; for every contender the oracle's
measured (and predicted) figures against the judge's (compute, collectives; the judge's bottleneck device).
Tasks: the release gate's held-out tasks (dreamshard.config.release.DEFAULT_RELEASE_TASKS).
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
MEMORY_GB = 16.0
BASELINES = ("dim_greedy", "size_greedy", "lookup_greedy", "size_lookup_greedy", "torchrec")
NOISE = "dim_greedy (again)"
BACKEND, CALIBRATED, STAGE = "dreamshard[backend]", "dreamshard+calibrate", "plan stage"
RISK0, ONE = "dreamshard[risk 0]", "dreamshard[one assumption]"
LEARNED = ("dreamshard", RISK0, ONE, BACKEND, CALIBRATED, STAGE)
#: plan.calibrate_seconds of the calibrated variants and the plan stage's refinement seconds (`--quick`: 2 each)
SECONDS = {"calibrate": 20.0, "refine": 20.0}
HEURISTICS = [b for b in BASELINES if b != "torchrec"]


def _stage_plan(inv: Any, topo: Any, model: Path | None) -> Any:
    """The plan stage: `dreamshard plan` with the repository's params (verify, refine) and calibration."""
    from dreamshard.config.settings import resolve
    from dreamshard.learning.model_store import PACKAGED_DIR
    from dreamshard.usecases.plan import PlanRequest, run

    overrides = {
        "profile.backend": "cpu",
        "plan.num_devices": topo.num_devices,
        "topology.memory_per_device_gb": topo.memory_per_device_gb,
        "plan.calibrate_seconds": SECONDS["calibrate"],
        "plan.refine_seconds": SECONDS["refine"],
    }
    return run(
        PlanRequest(inventory=inv, model=model or PACKAGED_DIR, settings=resolve(ROOT / "params.yaml", overrides))
    ).plan


def learned_plans(inv: Any, topo: Any, oracle: Any, model: Path | None) -> tuple[list[Any], dict]:
    """The learned planner's plans in each variant (module docstring) and the seconds each took."""
    from dreamshard.sharders import get_sharder

    options: dict[str, dict[str, Any]] = {
        "dreamshard": {},
        RISK0: {"risk": 0.0},
        ONE: {"unknown_skews": (1.05,)},
        BACKEND: {"oracle": oracle},
        CALIBRATED: {"oracle": oracle, "calibrate_seconds": SECONDS["calibrate"]},
    }
    plans, secs = [], {}
    for label in LEARNED:
        t0 = time.perf_counter()
        if label == STAGE:
            plan = _stage_plan(inv, topo, model)
        else:
            plan = get_sharder("dreamshard", model_dir=model, **options[label]).shard(inv, topo)
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


def judge_row(judge: Any, inv: Any, cmp: Any) -> dict:
    """The judge's figures for every contender the oracle compared (judge_report.judge_contenders), with its
    same-plan-twice noise."""
    from judge_report import judge_contenders

    out = judge_contenders(judge, inv, {r.sharder: r.plan for r in cmp.results}, HEURISTICS, "torchrec")
    out["noise"] = abs(out["ms"][NOISE] - out["ms"]["dim_greedy"]) / out["ms"]["dim_greedy"]
    return out


#: The label of the session's first all-to-all fit in the error lines (`--refit-per-task`).
FIRST_FIT = "the session's first fit"


def refit(devices: int) -> dict[str, Any]:
    """The all-to-all fit measured afresh for this task (every planning process reads it from the module's memo and
    the cache), derived for its world: alpha and beta, when, and its quality."""
    from dreamshard.profiling import comm

    m = comm.comm_model_for(devices, "gloo", refit=True)
    q = m.quality
    return {
        "alpha_ms": m.alpha_ms,
        "beta_ms_per_mb": m.beta_ms_per_mb,
        "per_peer_ms": m.per_peer_ms,
        "measured_ranks": m.measured_ranks,
        "measured_at": q.measured_at.isoformat() if q is not None else None,
        "quality": q.summary() if q is not None else None,
        "fallback": m.fallback,
    }


def run_task(task: Any, settings: Any, judge: Any, rounds: int, model: Path | None, fits: dict[str, Any]) -> dict:
    from dreamshard.evaluation import compare_sharders
    from dreamshard.inventory.heldout import heldout_inventory
    from dreamshard.profiling.comm_fit import derive
    from dreamshard.sharders import get_sharder
    from dreamshard.values import CommModel, Topology

    label, seed, devices = task.label, task.seed, task.devices
    fit = refit(devices) if fits["per_task"] else None
    first = fits.setdefault("first", fit)
    oracle = settings.oracle()  # a fresh memo of fits: this task's
    inv = heldout_inventory(task.family, task.tables, seed, histograms=task.histograms)
    topo = Topology(num_devices=devices, memory_per_device_gb=MEMORY_GB)
    plans, plan_s = learned_plans(inv, topo, oracle, model)
    errors = {p.sharder: component_errors(inv, p, oracle) for p in plans}
    noise = get_sharder("dim_greedy").shard(inv, topo).model_copy(update={"sharder": NOISE})
    cmp = compare_sharders(inv, topo, list(BASELINES), oracle, rounds=rounds, extra_plans=[*plans, noise], seed=seed)
    ms = {r.sharder: r.overall_ms for r in cmp.results}
    best = min((b for b in HEURISTICS if b in ms), key=lambda b: ms[b])
    row = {
        "task": label,
        "samples": {r.sharder: list(r.samples_ms) for r in cmp.results},
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
        "judge": judge_row(judge, inv, cmp),
    }
    from fits_before import before_errors

    plans_by_label = {r.sharder: r.plan for r in cmp.results}
    others: dict[str, tuple[float, float]] = {}
    if first is not None and fit is not None and first["measured_at"] != fit["measured_at"]:
        base = CommModel(alpha_ms=first["alpha_ms"], beta_ms_per_mb=first["beta_ms_per_mb"], backend="gloo",
                         world_size=first["measured_ranks"], measured_ranks=first["measured_ranks"],
                         per_peer_ms=first["per_peer_ms"])  # fmt: skip
        d = derive(base, devices)
        others[FIRST_FIT] = (d.alpha_ms, d.beta_ms_per_mb)
    row["comm_fit"] = fit
    row["before_fit_error"] = {
        k: before_errors(inv, p, row["judge"]["per_device"][k], others)
        for k, p in plans_by_label.items()
        if p is not None
    }
    oracle.close()
    j = row["judge"]
    print(
        f"{label}: judge: best {j['best_heuristic']} {j['ms'][j['best_heuristic']]:.2f} ms; "
        + ", ".join(f"{k} {j['vs_best'][k]:.3f}" for k in (*LEARNED, NOISE))
        + f"; noise {j['noise']:.1%} | oracle: "
        + ", ".join(f"{k} {row['vs_best'][k]:.3f}" for k in (*LEARNED, NOISE)),
        flush=True,
    )
    return row


def geomean(xs: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(x) for x in xs)) if xs else float("nan")


def release_view(rows: list[dict]) -> list[str]:
    """The release gate's reading of the oracle's rounds (dreamshard.release.stats): each learned variant's geomean
    vs the per-task best heuristic with its paired bootstrap interval (95%, over tasks then rounds)."""
    from dreamshard.release.stats import geomean_interval, round_log_ratios

    out = ["Paired bootstrap on the oracle's rounds (the release gate's rule: upper end <= 0.97 to ship), geomean vs "
           "the best heuristic:", ""]  # fmt: skip
    for n in LEARNED:
        per = [round_log_ratios(r["samples"][n], r["samples"][r["best_heuristic"]]) for r in rows]
        out.append(f"- {n}: {geomean_interval(per, 0.95, 2000)}")
    return out


def ratio_table(views: list[dict], tasks: list[dict], names: list[str], fixed_key: str) -> list[str]:
    """Per task each contender's ratio to the best heuristic, then geomeans vs it and vs TorchRec; `views` are the
    judge's or the oracle's figures per task (keys ms, best_heuristic, vs_best, `fixed_key`, noise)."""
    lines = ["| task | best heuristic | " + " | ".join(names) + " | noise |", "|---|---|" + "---:|" * (len(names) + 1)]
    for t, v in zip(tasks, views, strict=True):
        cells = " | ".join(f"{v['vs_best'][n]:.3f}" if n in v["vs_best"] else "-" for n in names)
        best = v["best_heuristic"]
        lines.append(f"| {t['task']} | {best} {v['ms'][best]:.1f} ms | {cells} | {v['noise']:.1%} |")
    for label, key in (("best heuristic", "vs_best"), ("torchrec", fixed_key)):
        cells = " | ".join(f"**{geomean([v[key][n] for v in views if n in v[key]]):.3f}**" for n in names)
        lines.append(f"| **geomean vs {label}** | | {cells} | |")
    return lines


def family_lines(rows: list[dict]) -> list[str]:
    """The judge's geomean vs the best heuristic per family, with and without histograms."""
    lines = ["Judge: geomean vs the best heuristic per family, with and without histograms:", ""]
    lines += [
        "| family | histograms | tasks | " + " | ".join(LEARNED) + " |",
        "|---|---|---:|" + "---:|" * len(LEARNED),
    ]
    for family in ("ctr", "lognormal"):
        for hist in (True, False):
            group = [r["judge"] for r in rows if r["task"].startswith(family) and (r["histograms"] > 0) == hist]
            if group:
                cells = " | ".join(f"{geomean([g['vs_best'][n] for g in group]):.3f}" for n in LEARNED)
                lines.append(f"| {family} | {'declared' if hist else 'none'} | {len(group)} | {cells} |")
    return lines


def oracle_error_lines(rows: list[dict]) -> list[str]:
    """The learned plans' predicted figures against the oracle's own measurement (median over tasks)."""
    lines = [
        "Prediction error of the learned plans against the oracle (predicted / oracle-measured - 1, the oracle's "
        "bottleneck device; median over tasks):",
        "",
        "| variant | fwd compute | fwd all-to-all | overall |",
        "|---|---:|---:|---:|",
    ]
    for n in LEARNED:
        e = [r["prediction_error"][n] for r in rows]
        cells = " | ".join(f"{statistics.median(x[k] for x in e):+.0%}" for k in ("fwd_compute", "fwd_comm", "overall"))
        lines.append(f"| {n} | {cells} |")
    return lines


def before_lines(rows: list[dict], names: list[str]) -> list[str]:
    """The old fits' charge for the judge's bottleneck device's exchanges against the judge (bench/fits_before.py),
    median over tasks and contenders."""
    per: dict[str, list[float]] = {}
    for r in rows:
        for errors in r.get("before_fit_error", {}).values():
            for fit, e in errors.items():
                per.setdefault(fit, []).append(e)
    if not per:
        return []
    old = {k: v for k, v in per.items() if k != FIRST_FIT}
    cells = "; ".join(f"{fit}: median {statistics.median(v):+.0%} over {len(v)} plans" for fit, v in old.items())
    lines = [f"Before the fit fix, (old fit's comm - judge) / judge on the judge's bottleneck device: {cells}."]
    if FIRST_FIT in per:
        v = per[FIRST_FIT]
        lines += [
            "",
            f"Each task re-measures the all-to-all fit first (`--refit-per-task`); charged instead with {FIRST_FIT} "
            f"(this VM's loopback rate drifts by up to 2x over minutes: docs/benchmarks/comm-fits.md), the comm "
            f"error is: median {statistics.median(v):+.0%} over {len(v)} plans.",
        ]
    fits = [(r["task"], r["comm_fit"]) for r in rows if r.get("comm_fit")]
    if fits:
        cells = "; ".join(
            f"{task} {f['alpha_ms']:.3f} ms + {f['beta_ms_per_mb']:.3f} ms/MB ({f['measured_at'][11:16]})"
            for task, f in fits
        )
        lines += ["", f"The fits per task (2 ranks, derived for the task's world): {cells}."]
    return lines


def render(res: dict[str, Any]) -> str:
    from judge_report import error_lines

    rows = res["rows"]
    names = [*LEARNED, *BASELINES, NOISE]
    judged = [r["judge"] for r in rows]
    lines = [
        "# Held-out generator families",
        "",
        f"Generated by `bench/heldout.py` on {res['date']} ({res['machine']}), model {res['model']}; "
        f"{res['rounds']} interleaved rounds each for the judge and the oracle, {MEMORY_GB:g} GB per device, batch "
        f"{res['batch']}. Ratios to the per-task best heuristic (< 1: better), and geomeans to it and to TorchRec's "
        "planner. The judge (bench/judge.py, docs/benchmarks/judge.md) is code the planner never uses: its figures "
        "are the headline; the oracle's (the planner's own measurement and collective fits) follow, labelled.",
        "",
        "## Judge",
        "",
        *ratio_table(judged, rows, names, "vs_fixed"),
        "",
        *family_lines(rows),
        "",
        *error_lines(judged, names),
        "",
        *before_lines(rows, names),
        "",
        "## Oracle (the planner's own measurement)",
        "",
        *ratio_table(rows, rows, names, "vs_torchrec"),
        "",
        *oracle_error_lines(rows),
    ]
    cal = [(r, r["calibration"]) for r in rows if r.get("calibration")]
    if cal:
        lines += ["", "Calibration (held-out probe partition, MAPE of device compute before -> after; probes; "
                  "seconds): " + "; ".join(f"{r['task']} {c['mape_before']:.0%} -> {c['mape_after']:.0%}, "
                                          f"{c['probes']}, {c['seconds']:.0f} s" for r, c in cal)]  # fmt: skip
    if all("samples" in r for r in rows):
        lines += ["", *release_view(rows)]
    for label, views in (("judge", judged), ("oracle", rows)):
        noise = [v["noise"] for v in views]
        lines += [
            "",
            f"Same plan measured twice ({label}): median {statistics.median(noise):.1%}, max {max(noise):.1%}.",
        ]
    return "\n".join(lines) + "\n"


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5, help="Interleaved rounds of the oracle and of the judge.")
    ap.add_argument("--tasks", default="", help="Comma-separated task labels (default: all).")
    ap.add_argument(
        "--refit-per-task",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="Measure the all-to-all fit again before each task (default), so that the oracle's comm error against "
        "the judge measures the fit's method, not this VM's drift between the fit and the task; the error under "
        "the session's first fit is reported beside it.",
    )
    ap.add_argument("--model", type=Path, default=None, help="Model directory (default: the packaged model).")
    ap.add_argument("--out", type=Path, default=OUT / "heldout.json")
    quick = "The first task only, 2 rounds, 2 s of calibration and refinement: a check that the bench runs, not a "
    quick += "result (writes heldout-quick.{json,md})."
    ap.add_argument("--quick", action="store_true", help=quick)
    args = ap.parse_args()
    if args.quick:
        args.rounds = min(args.rounds, 2)
        SECONDS.update(calibrate=2.0, refine=2.0)
        if args.out == OUT / "heldout.json":
            args.out = OUT / "heldout-quick.json"
    return args


def main() -> None:
    args = parse_args()
    from judge import Judge

    from dreamshard.config.release import DEFAULT_RELEASE_TASKS
    from dreamshard.config.settings import resolve
    from dreamshard.learning.model_store import load_model

    settings = resolve(ROOT / "params.yaml", {"profile.backend": "cpu"})
    fits: dict[str, Any] = {"per_task": args.refit_per_task}
    chosen = [t for t in DEFAULT_RELEASE_TASKS if not args.tasks or t.label in args.tasks.split(",")]
    chosen = chosen[:1] if args.quick else chosen
    t0 = time.perf_counter()
    with Judge(rounds=args.rounds) as judge:
        rows = [run_task(t, settings, judge, args.rounds, args.model, fits) for t in chosen]
    res = {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {platform.processor() or 'cpu'}",
        "model": load_model(args.model, require_policy=False).card.version,
        "rounds": args.rounds,
        "batch": settings.topology.batch_size,
        "seconds": round(time.perf_counter() - t0),
        "judge": judge.settings.model_dump(),
        "rows": rows,
    }
    args.out.write_text(json.dumps(res, indent=1))
    args.out.with_suffix(".md").write_text(render(res))
    print(render(res))


if __name__ == "__main__":
    main()
