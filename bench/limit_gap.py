"""Where `make run`'s remaining gap goes: its inventory (inputs/inventory.yaml, the 120-table pool) on its topology (4
devices, params.yaml), every contender of its evaluate stage measured interleaved on the CPU oracle, each one's
cost against the reference LB and against the limit (dreamshard.evaluation.limit), and its distance to the limit's
even share split into imbalance, fusion and exchange; the limit itself split into the fixed cost, the fused compute
and the exchange.

    python bench/limit_gap.py                       # writes bench/results/limit_gap.{json,md}; ~5-10 min
    python bench/limit_gap.py --plan runs/pipeline/data/plan.json   # make run's own plan among the contenders
    python bench/limit_gap.py --tables 24 --rounds 2 --sharders dim_greedy,size_greedy,dreamshard --out /tmp/lg
                                                    # a smoke run (under a minute)
    python bench/limit_gap.py --render              # the markdown again from the JSON

`dreamshard` is the search on the packaged learned cost (plan.verify and plan.refine_seconds off: the plan stage's
measured steps are not what this page is about); `--plan` adds a plan file as it is (make run's data/plan.json,
planned for the same inventory and topology). The settings are params.yaml's (profile, evaluate.rounds unless
`--rounds`), each device timed as the publish gate times it (publish.timing_passes on publish.timing_clock: the
timing thread's CPU time, so another process on the cores adds no waiting). Run on a quiet machine all the same.
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path
from typing import Any

from results_files import write_results

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results"


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The comparison of make run's contenders on its inventory, with the limit and each contender's gap."""
    from dreamshard.config.settings import resolve
    from dreamshard.documents import load_inventory, load_plan
    from dreamshard.evaluation import compare_sharders
    from dreamshard.usecases.evaluate import contenders
    from dreamshard.usecases.plan import sharder_options
    from dreamshard.usecases.sharders import expand

    inv = load_inventory(ROOT / "inputs" / "inventory.yaml")
    if args.tables:
        inv = inv.model_copy(update={"tables": inv.tables[: args.tables]})
    settings = resolve(ROOT / "params.yaml", {"plan.verify": 0, "plan.refine_seconds": 0.0})
    plans = [load_plan(args.plan)] if args.plan else []
    names = expand(args.sharders) if args.sharders else contenders(settings, plans)
    seed = settings.profile.seed
    topo = plans[0].topology if plans else settings.topology_for_job(inv.job)
    passes = args.passes or settings.publish.timing_passes
    clock = args.clock or settings.publish.timing_clock
    oracle = settings.oracle()
    t0 = time.perf_counter()
    try:
        cmp = compare_sharders(
            inv,
            topo,
            names,
            oracle,
            rounds=args.rounds or settings.evaluate.rounds,
            sharder_options={n: sharder_options(n, settings, None, seed) for n in names},
            progress=(lambda msg: print(msg, flush=True)) if args.verbose else None,
            seed=seed,
            extra_plans=plans,
            timing_passes=passes,
            timing_clock=clock,
        )
    finally:
        oracle.close()
    lim = cmp.limit
    assert lim is not None, "a comparison with its lower bound measured has a limit"
    return {
        "inventory": inv.name,
        "tables": len(inv.tables),
        "devices": cmp.topology.num_devices,
        "batch_size": cmp.topology.batch_size,
        "backend": cmp.backend.model_dump(mode="json"),
        "rounds": cmp.rounds,
        "timing": f"{cmp.timing_passes} pass(es) a round, {cmp.timing_clock} clock",
        "wall_s": round(time.perf_counter() - t0, 1),
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "created": time.strftime("%Y-%m-%d %H:%M"),
        "lower_bound": {"total_ms": cmp.lower_bound_ms, "compute_ms": cmp.lb_compute_ms, "comm_ms": cmp.lb_comm_ms},
        "limit": lim.model_dump(),
        "contenders": [
            {
                "sharder": cmp.label(r, short=True),
                "overall_ms": r.overall_ms,
                "spread": r.spread,
                "ratio_to_best": r.ratio_to_best,
                "ratio_to_lower_bound": r.ratio_to_lower_bound,
                "ratio_to_limit": r.ratio_to_limit,
                "fused_compute_ms": r.fused_compute_ms,
                "used_devices": r.used_devices,
                "gap": gap.model_dump() if (gap := cmp.gap(r)) is not None else None,
            }
            for r in sorted(cmp.results, key=lambda r: r.overall_ms)
        ],
    }


def markdown(res: dict[str, Any]) -> str:
    lim, lb = res["limit"], res["lower_bound"]
    even = lim["compute_ms"] + lim["comm_ms"]
    b = res["backend"]
    lines = [
        "# Where make run's gap goes",
        "",
        f"`bench/limit_gap.py`, {res['created']}: inventory `{res['inventory']}` ({res['tables']} tables) on "
        f"{res['devices']} devices, batch {res['batch_size']}; backend `{b['name']}` (`{b['operator']}`, "
        f"{b['num_threads']} thread(s), warm-up {b['warmup']}, repeats {b['repeats']}, statistic {b['statistic']}); "
        f"{res['rounds']} interleaved rounds, each device timed {res['timing']}; {res['wall_s']} s on "
        f"{res['machine']}.",
        "",
        f"LB {lb['total_ms']:.3f} ms (compute {lb['compute_ms']:.3f} + exchange {lb['comm_ms']:.3f}: the tables' "
        f"compute alone added up). Limit {lim['total_ms']:.3f} ms = max(costliest share alone "
        f"{lim['max_single_ms']:.3f}, even share {even:.3f}: fixed {lim['fixed_ms']:.3f} + fused compute "
        f"{lim['compute_ms'] - lim['fixed_ms']:.3f} (as `{lim['fused_by']}` fused, x{lim['fusion_ratio']:.2f} the "
        f"tables alone above the fixed cost) + exchange {lim['comm_ms']:.3f}).",
        "",
        "| contender | overall ms | spread | x best | x LB | x limit | noise ms | imbalance ms | fusion ms "
        "| exchange ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in res["contenders"]:
        g = c["gap"] or {"noise_ms": 0.0, "imbalance_ms": 0.0, "fusion_ms": 0.0, "exchange_ms": 0.0}
        lines.append(
            f"| {c['sharder']} | {c['overall_ms']:.3f} | {100 * c['spread']:.1f}% | {c['ratio_to_best']:.3f} | "
            f"{c['ratio_to_lower_bound']:.3f} | {c['ratio_to_limit']:.3f} | {g['noise_ms']:.3f} | "
            f"{g['imbalance_ms']:.3f} | {g['fusion_ms']:.3f} | {g['exchange_ms']:.3f} |"
        )
    lines += [
        "",
        "Noise: the overall (the median round's slowest device) above the slowest device's median; imbalance: the "
        "slowest device above the mean device; fusion: the mean device's compute above the limit's; exchange: the mean "
        "device's exchange above the least any plan pays. overall = even share + the four.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tables", type=int, default=0, help="The inventory's first N tables only (0: all).")
    ap.add_argument("--rounds", type=int, default=0, help="Interleaved rounds (0: params.yaml's evaluate.rounds).")
    ap.add_argument("--sharders", default=None, help="Contenders (default: params.yaml's evaluate.sharders).")
    ap.add_argument("--passes", type=int, default=0, help="Timings a device a round (0: publish.timing_passes).")
    ap.add_argument("--clock", choices=("wall", "thread"), default=None, help="CPU clock (publish.timing_clock).")
    ap.add_argument("--plan", type=Path, default=None, help="A plan file measured among them (make run's).")
    ap.add_argument("--out", type=Path, default=OUT, help="Directory of limit_gap.{json,md}.")
    ap.add_argument("--render", action="store_true", help="Write the markdown again from the JSON.")
    ap.add_argument("--verbose", action="store_true", help="A line per measurement.")
    args = ap.parse_args()
    write_results(args.out, "limit_gap", args.render, lambda: run(args), markdown)


if __name__ == "__main__":
    main()
