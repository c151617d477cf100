"""Measured refinement on the production path: the pipeline's plan (search + verify 3 on the backend)
refined for a short budget, against the same start refined for a long one ("a 20-minute measured search"), every
heuristic and TorchRec's planner, measured interleaved. Run it on a quiet machine (about 30 minutes on 2 cores):

    python bench/refinement.py                         # 120 s vs 1200 s of refinement, 5 rounds
    python bench/refinement.py --short 60 --long 600   # other budgets
    python bench/refinement.py --render                # rebuild bench/results/refinement.md from the JSON

1. the 120-table pool (`inventory synth --params params.yaml`) on params.yaml's plan devices and topology;
2. the start: `dreamshard` with params.yaml's search and `--verify` (what the plan stage does before refining);
3. the start refined for `--short` and, separately, for `--long` seconds (same seed: the long run begins with the
   short one's proposals, so its lead is what the extra time found);
4. start, short, long, short again (the noise row), every heuristic and TorchRec's planner, measured interleaved
   (>= 5 rounds, shuffled each round); ratios to the per-task best heuristic and to TorchRec.

Refinement figures: proposals tried and kept, proposals per second, device timings per proposal (each measures two
devices, never the plan), the measured gain on the bottleneck.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results"
HEURISTICS = ("dim_greedy", "size_greedy", "lookup_greedy", "size_lookup_greedy")


def bench(args: argparse.Namespace) -> dict[str, Any]:
    from dreamshard.config.settings import resolve
    from dreamshard.evaluation import compare_sharders
    from dreamshard.measured.refine import refine_plan
    from dreamshard.sharders import get_sharder
    from dreamshard.usecases.plan import sharder_options

    s = resolve(ROOT / "params.yaml")
    inv = s.inventory.synthesize()  # the pipeline's pool (`inventory synth --params params.yaml`)
    topo = s.topology_for()
    oracle = s.oracle()
    try:
        t0 = time.perf_counter()  # the plan stage's sharder (usecases.plan), refinement apart
        sharder = get_sharder(
            "dreamshard",
            **sharder_options("dreamshard", s, args.model, 0),
            verify=s.plan.verify,
            verify_rounds=s.plan.verify_rounds,
            oracle=oracle,
        )
        start = sharder.shard(inv, topo)
        plan_s = time.perf_counter() - t0
        cost = sharder.planning_cost(topo)
        runs: dict[str, Any] = {}
        plans = {"start": start.model_copy(update={"sharder": "start"})}
        for label, seconds in (("short", args.short), ("long", args.long)):
            refined = refine_plan(
                inv, start, cost, oracle, seconds, s.plan.refine_rounds, seed=0, confirm=s.plan.refine_confirm_rounds
            )
            trace = refined.refinement
            assert trace is not None
            runs[label] = {
                "budget_s": seconds,
                **trace.model_dump(mode="json", exclude={"steps"}),
                "proposals_per_s": trace.tried / trace.seconds if trace.seconds else 0.0,
                "timings_per_proposal": (
                    (trace.device_timings - topo.num_devices) / trace.tried if trace.tried else 0.0
                ),
                "rounds_per_proposal": ([st.rounds for st in trace.steps]),
                "kept_steps": [st.model_dump(mode="json") for st in trace.steps if st.kept],
            }
            plans[label] = refined.model_copy(update={"sharder": label, "plan_id": f"{start.plan_id}-{label}"})
            print(
                f"{label}: {trace.tried} proposals in {trace.seconds:.0f} s, {trace.kept} kept, "
                f"{trace.initial_ms:.2f} -> {trace.final_ms:.2f} ms measured",
                flush=True,
            )
        plans["short (again)"] = plans["short"].model_copy(
            update={"sharder": "short (again)", "plan_id": f"{start.plan_id}-short-again"}
        )
        cmp = compare_sharders(
            inv,
            topo,
            [*HEURISTICS, "torchrec"],
            oracle,
            rounds=args.rounds,
            extra_plans=list(plans.values()),
            seed=s.profile.seed,
            with_lower_bound=False,
        )
    finally:
        oracle.close()
    ms = {r.sharder: r.overall_ms for r in cmp.results}
    return {
        "inventory": f"{inv.name}: {inv.num_tables} tables",
        "devices": topo.num_devices,
        "backend": s.profile.backend,
        "rounds": args.rounds,
        "plan_s": round(plan_s, 1),
        "runs": runs,
        "ms": ms,
        "samples": {r.sharder: r.samples_ms for r in cmp.results},
        "model": str(args.model) if args.model else "packaged",
    }


def render(d: dict[str, Any]) -> str:
    ms = d["ms"]
    best = min(HEURISTICS, key=lambda h: ms[h])
    lines = [
        "# Measured refinement on the production path",
        "",
        f"{d['inventory']} on {d['devices']} devices, backend {d['backend']}, model {d['model']}; the start is the "
        f"search's plan with params.yaml's `--verify` ({d['plan_s']} s). Generated by `bench/refinement.py` on a quiet "
        f"2-core machine; plans measured interleaved over {d['rounds']} rounds.",
        "",
        "| refinement | budget s | proposals | kept | proposals/s | device timings / proposal | rounds / proposal "
        "| bottleneck measured (ms) |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for label, r in d["runs"].items():
        rounds = r["rounds_per_proposal"]
        lines.append(
            f"| {label} | {r['budget_s']:g} | {r['tried']} | {r['kept']} | {r['proposals_per_s']:.2f} | "
            f"{r['timings_per_proposal']:.1f} | {sum(rounds) / len(rounds) if rounds else 0:.2f} | "
            f"{r['initial_ms']:.2f} -> {r['final_ms']:.2f} ({r['measured_gain']:+.1%}) |"
        )
    lines += ["", f"| plan | ms | x best heuristic ({best}) | x TorchRec |", "|---|---:|---:|---:|"]
    for name in sorted(ms, key=ms.__getitem__):
        lines.append(f"| {name} | {ms[name]:.3f} | {ms[name] / ms[best]:.3f} | {ms[name] / ms['torchrec']:.3f} |")
    samples = d.get("samples", {})
    if "start" in samples:  # paired by round: the plans of a round were measured side by side
        lines += [
            "",
            "Per round, each plan / the start measured in the same round, and the median of those ratios:",
            "",
            "| plan | per-round ratios to the start | median |",
            "|---|---|---:|",
        ]
        for name in ("short", "short (again)", "long", best, "torchrec"):
            r = [x / y for x, y in zip(samples[name], samples["start"], strict=True)]
            lines.append(f"| {name} | {' '.join(f'{x:.3f}' for x in r)} | {statistics.median(r):.3f} |")
    gap = ms["short"] / ms["long"] - 1
    noise = abs(ms["short (again)"] - ms["short"]) / ms["short"]
    lines += [
        "",
        f"Short vs long refinement: {gap:+.1%} (short / long - 1); the same plan measured twice: {noise:.1%} apart.",
        "",
        "Kept proposals (short run): "
        + (
            "; ".join(
                f"{s['proposal']} ({s['incumbent_ms']:.2f} -> {s['measured_ms']:.2f} ms)"
                for s in d["runs"]["short"]["kept_steps"]
            )
            or "none"
        ),
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--short", type=float, default=120.0)
    ap.add_argument("--long", type=float, default=1200.0)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--model", type=Path, default=None, help="model directory (default: the packaged model)")
    ap.add_argument("--render", action="store_true")
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    if not args.render:
        (OUT / "refinement.json").write_text(json.dumps(bench(args), indent=2) + "\n")
    data = json.loads((OUT / "refinement.json").read_text())
    (OUT / "refinement.md").write_text(render(data))
    print((OUT / "refinement.md").read_text())


if __name__ == "__main__":
    main()
