"""Generalisation benchmark: the learned planner on inventories from generators it never trained on.

    python bench/generalisation.py --part a            # the shipped (pre-trained) model, no retraining
    python bench/generalisation.py --part b            # after the production pipeline retrained on each inventory
    python bench/generalisation.py --part a --interconnect fast   # the fast-interconnect regime
    python bench/generalisation.py --part lofo         # leave-one-family-out (bench/generalisation_lofo.py)
    python bench/generalisation.py --render            # rebuild bench/results/generalisation.md from the JSON

Inventories (>= 8, 3 generator families, none of them the pre-training generator `wide`): `mixed`
(dreamshard.inventory.families: Pareto pooling, Zipf-Mandelbrot popularity, dims 8-128), `dlrm` (the DLRM-like
pool of dreamshard.inventory.synth) and Criteo Kaggle's 26 public cardinalities at dim 64 and 128, pooling 1
(dreamshard.inventory.presets); 12-200 tables on 2-16 devices.

Contenders, all measured interleaved in one run per task (>= 5 rounds, shuffled order each round): every
heuristic, TorchRec's planner, `dreamshard` (search on the learned cost, no hardware), `dreamshard+verify3` (the
same, then the race of its 3 best candidates with every heuristic's and TorchRec's own plan, the best measured
kept: what the publish flow does), `dreamshard_lpt`,
`dreamshard+types` (the search may also convert tables to row-wise, table-row-wise or data-parallel where the
learned cost says it pays), `dreamshard_rl` (the policy alone), and `dim_greedy (again)`: the dim_greedy plan
measured a second time, the
noise row. `torchrec` is TorchRec's own planner unrestricted (every sharding type it offers on the device type:
data-parallel, table-wise, column-wise on cpu), `torchrec_tw_cw` the same planner restricted to table- and
column-wise (what earlier runs called `torchrec`). Ratios: to the per-task best baseline (heuristics +
both TorchRec planners; biased low by noise) and to TorchRec (one fixed baseline); geomeans over tasks; and which
sharding types each contender's plans used. Run it on a quiet machine.

Part (b) retrains per inventory with the production stage functions (tasks -> profile -> outer loop warm-started
from the shipped model, params.yaml), then plans with the retrained model; its wall time is reported.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results"

#: (label, family, tables, seed or dim, devices)
TASKS: tuple[tuple[str, str, int, int, int], ...] = (
    ("mixed-12/2", "mixed", 12, 1, 2),
    ("mixed-40/5", "mixed", 40, 2, 5),
    ("mixed-120/8", "mixed", 120, 3, 8),
    ("mixed-200/16", "mixed", 200, 4, 16),
    ("dlrm-30/4", "dlrm", 30, 11, 4),
    ("dlrm-80/8", "dlrm", 80, 12, 8),
    ("kaggle-d64/4", "criteo-kaggle", 26, 64, 4),
    ("kaggle-d128/8", "criteo-kaggle", 26, 128, 8),
)
MEMORY_GB = 16.0
BASELINES = (
    "random",
    "round_robin",
    "dim_greedy",
    "size_greedy",
    "lookup_greedy",
    "size_lookup_greedy",
    "torchrec",
    "torchrec_tw_cw",
)
LEARNED = ("dreamshard", "dreamshard+verify3", "dreamshard+types", "dreamshard_lpt", "dreamshard_rl")
#: --refine-seconds S: the plan stage's plan on the target hardware (--verify 3, then S s of measured refinement)
PROD = "dreamshard+prod"
#: `dreamshard+types`: the search may also make tables row-wise, table-row-wise or data-parallel (plan.types)
ALL_TYPES = ("row_wise", "table_row_wise", "data_parallel")
NOISE = "dim_greedy (again)"
LOFO_KEY = "part lofo (leave one family out)"
LOFO_PACKAGED_KEY = "part lofo (packaged model only, histograms as assumed now)"
#: --part lofo --packaged-only --refine-seconds S: the packaged model's plans as the plan stage makes them on the target
#: hardware (verify 3 + S seconds of measured refinement) beside its plain search
LOFO_PRODUCTION_KEY = "part lofo (packaged model, production plans: verify 3 + measured refinement)"


def inventory(family: str, tables: int, seed: int) -> Any:
    from dreamshard.inventory.families import family_inventory
    from dreamshard.inventory.presets import preset_inventory

    if family.startswith("criteo"):
        return preset_inventory(family, dim=seed)  # type: ignore[arg-type]
    return family_inventory(family, tables, seed, name=f"{family}-{tables}-s{seed}")


def learned_plans(
    inv: Any, topo: Any, model_dir: Path | None, oracle: Any, refine_s: float = 0.0
) -> tuple[list[Any], dict[str, float]]:
    from dreamshard.config.learning import SearchConfig
    from dreamshard.measured.refine import refine_plan
    from dreamshard.sharders import get_sharder

    plans, secs = [], {}
    if refine_s > 0:  # `dreamshard+prod`: the plan stage on the target hardware (verify 3, then measured refinement)
        t0 = time.perf_counter()
        sharder = get_sharder("dreamshard", model_dir=model_dir, verify=3, oracle=oracle)
        p = refine_plan(inv, sharder.shard(inv, topo), sharder.planning_cost(topo), oracle, refine_s)
        secs[PROD] = time.perf_counter() - t0
        plans.append(p.model_copy(update={"sharder": PROD}))
    for label in LEARNED:
        name, _, verify = label.removesuffix("+types").partition("+verify")
        opts: dict[str, Any] = {"model_dir": model_dir}
        if verify:  # the race: the K best, every heuristic's and TorchRec's own plan (what the publish flow does)
            opts.update(verify=int(verify), oracle=oracle)
        if label.endswith("+types"):
            opts["search"] = SearchConfig(types=ALL_TYPES)
        t0 = time.perf_counter()
        p = get_sharder(name, **opts).shard(inv, topo)
        secs[label] = time.perf_counter() - t0
        plans.append(p.model_copy(update={"sharder": label}))
    return plans, secs


def retrain(inv: Any, work: Path, params: Path, oracle: Any) -> tuple[Path, float]:
    """The production pipeline's training stages on `inv` (same functions as the DVC stages)."""
    from dreamshard.config.settings import resolve
    from dreamshard.documents import load_measurements
    from dreamshard.learning.loop import train
    from dreamshard.learning.taskset import make_taskset
    from dreamshard.profiling.runner import profile_inventory
    from dreamshard.search.candidates import best_placement
    from dreamshard.usecases.train import initial_model

    cfg = resolve(params)
    t0 = time.perf_counter()
    taskset = make_taskset(inv, cfg.tasks)
    meas = work / "measurements.jsonl"
    profile_inventory(
        inv,
        cfg.topology.topology(cfg.tasks.train_devices),
        cfg.profile.num_placements,
        meas,
        oracle,
        seed=cfg.profile.seed,
        tasks=taskset,
        progress=False,
        kinds=cfg.profile.kinds,
    )
    loop = cfg.train
    train(
        inv,
        taskset,
        cfg.topology,
        oracle,
        loop,
        work / "model",
        state_dir=work / "state",
        progress=False,
        measurements=load_measurements(meas),
        init=initial_model(loop),
        backend_name=cfg.profile.backend,
        searcher=best_placement,
    )
    return work / "model", time.perf_counter() - t0


def run_task(
    label: str, family: str, tables: int, seed: int, devices: int, args: argparse.Namespace, oracle: Any
) -> dict[str, Any]:
    from dreamshard.evaluation import compare_sharders
    from dreamshard.sharders import get_sharder
    from dreamshard.values import Topology

    inv = inventory(family, tables, seed)
    topo = Topology(num_devices=devices, memory_per_device_gb=MEMORY_GB, interconnect=args.interconnect)
    model_dir: Path | None = args.model
    train_s = None
    if args.part == "b":
        model_dir, train_s = retrain(inv, args.work / label.replace("/", "-"), args.params, oracle)
    plans, plan_s = learned_plans(inv, topo, model_dir, oracle, args.refine_seconds)
    noise = get_sharder("dim_greedy").shard(inv, topo).model_copy(update={"sharder": NOISE})
    cmp = compare_sharders(
        inv, topo, list(BASELINES), oracle, rounds=args.rounds, extra_plans=[*plans, noise], seed=seed
    )
    ms = {r.sharder: r.overall_ms for r in cmp.results}
    spread = {r.sharder: r.spread for r in cmp.results}
    for r in cmp.results:
        plan_s.setdefault(r.sharder, r.plan_seconds)
    best_base = min(BASELINES, key=lambda b: ms[b])
    ood = next((p.out_of_range for p in plans if p.sharder == "dreamshard"), ())
    row = {
        "task": label,
        "family": family,
        "tables": inv.num_tables,
        "devices": devices,
        "interconnect": args.interconnect,
        "ms": ms,
        "spread": spread,
        "plan_s": plan_s,
        "best_baseline": best_base,
        "vs_best": {k: v / ms[best_base] for k, v in ms.items()},
        "vs_torchrec": {k: v / ms["torchrec"] for k, v in ms.items()},
        "noise": abs(ms[NOISE] - ms["dim_greedy"]) / ms["dim_greedy"],
        "out_of_range": list(ood),
        "retrain_s": train_s,
        "predicted_ms": {p.sharder: p.predicted.overall_ms for p in plans if p.predicted},
        "verification": next((p.verification.model_dump(mode="json") for p in plans if p.verification), None),
        "refinement": next(
            (
                {"tried": p.refinement.tried, "kept": p.refinement.kept, "seconds": p.refinement.seconds}
                for p in plans
                if p.sharder == PROD and p.refinement
            ),
            None,
        ),
        "types": {r.sharder: r.plan.sharding_types() for r in cmp.results},
    }
    print(
        f"{label}: best baseline {best_base} {ms[best_base]:.2f} ms; "
        + ", ".join(f"{k} {row['vs_best'][k]:.3f}" for k in (*LEARNED, NOISE, PROD) if k in row["vs_best"])
        + f"; noise {row['noise']:.1%}",
        flush=True,
    )
    return row


def geomean(xs: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(x) for x in xs)) if xs else float("nan")


def ratio_table(rows: list[dict[str, Any]], names: list[str]) -> list[str]:
    """Per task, each contender's measured cost over the task's best baseline, then the geomeans (over the best
    baseline and over TorchRec)."""
    lines = ["| task | best baseline | " + " | ".join(names) + " | noise |", "|---|---|" + "---:|" * (len(names) + 1)]
    for r in rows:
        lines.append(
            f"| {r['task']} | {r['best_baseline']} {r['ms'][r['best_baseline']]:.1f} ms | "
            + " | ".join(f"{r['vs_best'][n]:.3f}" for n in names)
            + f" | {r['noise']:.1%} |"
        )
    for label, key in (("best baseline", "vs_best"), ("torchrec", "vs_torchrec")):
        lines.append(
            f"| **geomean vs {label}** | | "
            + " | ".join(f"**{geomean([r[key][n] for r in rows]):.3f}**" for n in names)
            + " | |"
        )
    return lines


def render(results: dict[str, Any]) -> str:
    lines = [
        "# Generalisation benchmark",
        "",
        "Generated by `bench/generalisation.py` (see its docstring for the protocol). Every contender measured "
        "interleaved on the `cpu` backend (FBGEMM TBE), ratios < 1 are better than the baseline.",
        "",
    ]
    for key, run in sorted(results.items()):
        if key in (LOFO_KEY, LOFO_PACKAGED_KEY, LOFO_PRODUCTION_KEY):
            from generalisation_lofo import render_lofo

            lines += render_lofo(run, geomean, ratio_table, key)
            continue
        rows = run["rows"]
        lines += [f"## {key}", "", f"{run['meta']}", ""]
        names = [n for n in (PROD, *LEARNED, *BASELINES, NOISE) if all(n in r["ms"] for r in rows)]
        lines += ratio_table(rows, names)
        if all("types" in r for r in rows):
            lines += [
                "",
                "Sharding types used (tables, summed over tasks; contenders with table-wise only left out):",
                "",
            ]
            for n in names:
                used: dict[str, int] = {}
                for r in rows:
                    for kind, k in r["types"].get(n, {}).items():
                        used[kind] = used.get(kind, 0) + k
                if set(used) - {"table_wise"}:
                    lines.append(f"- `{n}`: " + ", ".join(f"{kind} {k}" for kind, k in sorted(used.items())))
        worst = max(rows, key=lambda r: r["vs_best"]["dreamshard"])
        lines += [
            "",
            f"- worst task for `dreamshard`: {worst['task']} at {worst['vs_best']['dreamshard']:.3f} x the best "
            f"baseline; same plan measured twice differed by {statistics.median([r['noise'] for r in rows]):.1%} "
            f"(median), {max(r['noise'] for r in rows):.1%} (max)",
            "- planning wall time (s, median over tasks): "
            + ", ".join(
                f"{n} {statistics.median([r['plan_s'].get(n, 0.0) for r in rows]):.2f}"
                for n in (PROD, *LEARNED)
                if all(n in r["plan_s"] for r in rows)
            ),
        ]
        if all(r.get("refinement") for r in rows):
            lines.append(
                f"- `{PROD}` measured refinement (proposals kept / tried, seconds): "
                + ", ".join(
                    f"{r['task']} {r['refinement']['kept']}/{r['refinement']['tried']} in "
                    f"{r['refinement']['seconds']:.0f} s"
                    for r in rows
                )
            )
        if any(r.get("retrain_s") for r in rows):
            lines.append(
                "- retrain wall time per inventory (s): "
                + ", ".join(f"{r['task']} {r['retrain_s']:.0f}" for r in rows if r.get("retrain_s"))
            )
        oor = [r["task"] for r in rows if r["out_of_range"]]
        lines.append(
            "- inventories outside the model's training ranges (warned, recorded in the plan): "
            f"{', '.join(oor) or 'none'}"
        )
        lines.append("")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", choices=("a", "b", "lofo"), default="a")
    ap.add_argument("--interconnect", choices=("measured", "fast"), default="measured")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--tasks", default="", help="Comma-separated task labels (default: all).")
    ap.add_argument("--model", type=Path, default=None, help="Model for part a (default: the packaged one).")
    ap.add_argument("--params", type=Path, default=ROOT / "params.yaml", help="Pipeline params for part b.")
    ap.add_argument("--work", type=Path, default=ROOT / "runs" / "bench-generalisation")
    ap.add_argument("--out", type=Path, default=OUT / "generalisation.json")
    ap.add_argument("--render", action="store_true", help="Only rebuild the markdown from the JSON.")
    ap.add_argument("--packaged-only", action="store_true", help="--part lofo: the packaged model only (no training).")
    ap.add_argument(
        "--refine-seconds",
        type=float,
        default=0.0,
        help="Also the production plans (verify 3, then this much measured refinement): `dreamshard+prod` "
        "in parts a/b, `,prod` in --part lofo --packaged-only.",
    )
    ap.add_argument(
        "--errors-only",
        default="",
        metavar="NOTE",
        help="--part lofo: only recompute the packaged model's cost errors on the stored corpora (NOTE: why).",
    )
    args = ap.parse_args(argv)
    results: dict[str, Any] = json.loads(args.out.read_text()) if args.out.exists() else {}
    if not args.render and args.part == "lofo":
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from generalisation_lofo import packaged_errors, run_lofo

        if args.errors_only:  # no measuring: the packaged model's errors on the stored corpora, features as now
            results[LOFO_KEY]["errors_now"] = {"note": args.errors_only, "families": packaged_errors(args.work)}
        elif args.packaged_only:  # the packaged model's errors and plans on the same corpora and tasks, no training
            key = LOFO_PRODUCTION_KEY if args.refine_seconds else LOFO_PACKAGED_KEY
            results[key] = run_lofo(args, BASELINES, NOISE, with_lofo=False)
        else:
            results[LOFO_KEY] = run_lofo(args, BASELINES, NOISE)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1) + "\n")
    elif not args.render:
        from dreamshard.profiling import make_oracle

        oracle = make_oracle("cpu", warmup=args.warmup, repeats=args.repeats)
        chosen = [t for t in TASKS if not args.tasks or t[0] in args.tasks.split(",")]
        t0 = time.perf_counter()
        rows = [run_task(*t, args=args, oracle=oracle) for t in chosen]
        kind = "no retraining" if args.part == "a" else "retrained per inventory"
        key = f"part {args.part} ({kind}), interconnect {args.interconnect}"
        prod = (
            (
                f"; `{PROD}`: --verify 3 then {args.refine_seconds:g} s of measured refinement (the plan stage on "
                f"the target hardware)"
            )
            if args.refine_seconds
            else ""
        )
        key += ", with production plans" if args.refine_seconds else ""
        results[key] = {
            "rows": rows,
            "meta": f"{len(rows)} tasks, {args.rounds} interleaved rounds, warm-up "
            f"{args.warmup}, repeats {args.repeats}, {MEMORY_GB:g} GB per device; wall "
            f"{time.perf_counter() - t0:.0f} s; model: {args.model or 'packaged'}{prod}",
        }
        oracle.close()
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1) + "\n")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    args.out.with_suffix(".md").write_text(render(results))
    print(f"wrote {args.out} and {args.out.with_suffix('.md')}", file=sys.stderr)


if __name__ == "__main__":
    main()
