"""The drift monitor on a busy host: absolute milliseconds against the paired ratio, on the real CPU backend.

A plan and its reference (dim_greedy vs round_robin, a synthetic inventory on 2 devices) are "published" on the
host as it is: the plan's median ms measured alone on the wall clock (as the monitor measured before: 3 rounds),
and their paired ratio over `--rounds` rounds timed as the gate times (3 passes, the thread clock). Then `--checks`
checks each run quiet and with a busy loop on every core (`--hogs` processes started by the script and killed by
their pids), both ways: the absolute change against the published ms (drifted past 20%) and the paired drift with
its 95% interval (drifted when the whole interval lies beyond 20%).

    python bench/drift_busy_host.py            # about 3 minutes on 2 cores
    python bench/drift_busy_host.py --render   # rebuild bench/results/drift_busy_host.md from the JSON
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results"
THRESHOLD, CONFIDENCE = 0.2, 0.95


@contextlib.contextmanager
def hogs(n: int) -> Iterator[None]:
    """`n` busy-loop processes, ended by their pids."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def run(checks: int, rounds: int, n_hogs: int, tables: int) -> dict[str, Any]:
    from dreamshard.evaluation import evaluate_plan
    from dreamshard.evaluation.drift import DriftReference, judge_drift, measure_paired
    from dreamshard.gate.bounds import ratio_bound
    from dreamshard.inventory.synth import synth_inventory
    from dreamshard.profiling import ProfileConfig
    from dreamshard.sharders import get_sharder
    from dreamshard.values import Topology

    inv = synth_inventory(tables, seed=5, name="busy")
    topo = Topology(num_devices=2, memory_per_device_gb=4.0, batch_size=512, interconnect="fast")
    plan, ref = get_sharder("dim_greedy").shard(inv, topo), get_sharder("round_robin").shard(inv, topo)
    cpu = ProfileConfig(backend="cpu", warmup=1, repeats=3, statistic="median").oracle()
    rows: list[dict[str, Any]] = []

    def alone() -> float:  # the monitor before: the plan alone, wall clock, median of 3 rounds
        measured = evaluate_plan(inv, plan, cpu, rounds=3).measured
        assert measured is not None
        return measured.overall_ms

    def paired(seed: int) -> Any:
        with cpu.timing_as(3, "thread"):
            return measure_paired(inv, plan, ref, cpu, rounds, seed=seed)

    try:
        published_ms = alone()
        before = paired(0)
        published = ratio_bound(before.plan_ms, before.reference_ms, CONFIDENCE).ratio
        reference = DriftReference(ref, "baseline", published, "gate")
        for i in range(2 * checks):
            busy = i % 2 == 1
            with hogs(n_hogs) if busy else contextlib.nullcontext():
                absolute = alone() / published_ms - 1
                now = paired(i + 1)
            bound = ratio_bound(now.plan_ms, now.reference_ms, CONFIDENCE)
            check = judge_drift(plan, reference, now, bound, CONFIDENCE, THRESHOLD, cpu.info)
            rows.append(
                {
                    "host": "busy" if busy else "quiet",
                    "absolute": absolute,
                    "absolute_drifted": abs(absolute) > THRESHOLD,
                    "drift": check.drift,
                    "low": check.drift_low,
                    "high": check.drift_high,
                    "drifted": check.drifted,
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    finally:
        cpu.close()
    return {"tables": tables, "rounds": rounds, "hogs": n_hogs, "published_ms": published_ms, "rows": rows}


def render(data: dict[str, Any]) -> str:
    lines = [
        "# Drift on a busy host: absolute ms vs the paired ratio",
        "",
        f"`python bench/drift_busy_host.py`: {data['tables']} tables on 2 devices, the CPU backend; absolute: the plan "
        f"alone on the wall clock, median of 3 rounds, against {data['published_ms']:.4g} ms published (the monitor "
        f"before); paired: plan and round_robin in {data['rounds']} interleaved rounds timed as the gate times, "
        f"against the ratio published. Busy = {data['hogs']} busy-loop processes on the 2 cores (a shared machine: "
        "quiet is the host as it was). Threshold 20% for both rules.",
        "",
        "| host | absolute change | drifted (ms) | paired drift [95% interval] | drifted (paired) |",
        "|---|---|---|---|---|",
    ]
    for r in data["rows"]:
        lines.append(
            f"| {r['host']} | {r['absolute']:+.1%} | {'yes' if r['absolute_drifted'] else 'no'} | "
            f"{r['drift']:+.1%} [{r['low']:+.1%}, {r['high']:+.1%}] | {'yes' if r['drifted'] else 'no'} |"
        )
    for host in ("quiet", "busy"):
        got = [r for r in data["rows"] if r["host"] == host]
        lines.append("")
        lines.append(
            f"{host}: {sum(r['absolute_drifted'] for r in got)}/{len(got)} checks drifted by absolute ms, "
            f"{sum(r['drifted'] for r in got)}/{len(got)} by the paired ratio; median absolute change "
            f"{statistics.median(r['absolute'] for r in got):+.1%}, median paired drift "
            f"{statistics.median(r['drift'] for r in got):+.1%}."
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checks", type=int, default=5, help="checks per host state")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--hogs", type=int, default=2)
    ap.add_argument("--tables", type=int, default=12)
    ap.add_argument("--render", action="store_true")
    args = ap.parse_args()
    out = OUT / "drift_busy_host.json"
    if not args.render:
        out.write_text(json.dumps(run(args.checks, args.rounds, args.hogs, args.tables), indent=1) + "\n")
    (OUT / "drift_busy_host.md").write_text(render(json.loads(out.read_text())))


if __name__ == "__main__":
    main()
