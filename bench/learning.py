"""Benchmark of the learning area: cost-model accuracy, plan quality on held-out tasks, planning latency.

    python bench/learning.py [--backend simulator|cpu|cuda] [--tables 120] [--out runs/bench-learning]

Protocol (DESIGN.md section 7): a synthetic pool is split into disjoint train / held-out table pools;
the model trains on the train tasks only (profile singles + random placements, then the outer loop);
every held-out task (unseen tables, unseen table and device counts) is planned by every heuristic and by
dreamshard, and all plans of a task are measured interleaved on the same backend; we report ratios to
the best heuristic. A task some contender cannot place is reported as infeasible for it, never dropped.
With --backend simulator every number is from the analytic simulator and labelled so.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from dreamshard.config import load_section
from dreamshard.errors import InfeasiblePlacementError
from dreamshard.evaluation.compare import compare_sharders
from dreamshard.inventory.synth import synth_inventory
from dreamshard.io import atomic_write_text, load_measurements
from dreamshard.learning.configs import LoopConfig, TasksConfig, TopologyConfig
from dreamshard.learning.loop import train
from dreamshard.learning.model_store import load_model
from dreamshard.learning.policy import plan_with_policy
from dreamshard.learning.stages import loop_config
from dreamshard.learning.train_cost import evaluate_cost_net
from dreamshard.profiling import make_oracle, profile_inventory
from dreamshard.sharders import HEURISTICS
from dreamshard.types import Topology

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="simulator")
    ap.add_argument("--tables", type=int, default=120)
    ap.add_argument("--params", type=Path, default=ROOT / "params.yaml")
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "bench-learning")
    ap.add_argument("--iterations", type=int, default=None)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--samples", type=int, default=16)
    args = ap.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    label = " [SIMULATED: analytic model, not a measurement]" if args.backend == "simulator" else ""

    pool = synth_inventory(args.tables, seed=0, name="bench-pool")
    from dreamshard.learning.tasks import make_taskset

    taskset = make_taskset(pool, load_section(args.params, "tasks", TasksConfig))
    topo_cfg = load_section(args.params, "topology", TopologyConfig)
    topo = topo_cfg.topology(taskset.train[0].num_devices)
    oracle = make_oracle(args.backend, warmup=2, repeats=5, num_threads=1, seed=0)
    t0 = time.perf_counter()
    meas = out / "profile.jsonl"
    profile_inventory(pool, topo, 4, meas, oracle, seed=0, tasks=taskset, progress=False)
    cfg: LoopConfig = loop_config(args.params)
    if args.iterations:
        cfg = cfg.model_copy(update={"iterations": args.iterations})
    model_dir = out / "model"
    train(pool, taskset, topo, oracle, cfg, model_dir, resume=False, progress=False, measurements=meas,
          backend_name=args.backend)
    train_s = time.perf_counter() - t0
    model = load_model(model_dir)

    # cost-model accuracy on placements of HELD-OUT tasks (never seen in training)
    from dreamshard.sharders import get_sharder

    held = []
    for i, task in enumerate(taskset.test):
        sub = pool.subset(list(task.tables), name=task.name)
        t = topo_cfg.topology(task.num_devices)
        for s in range(3):
            try:
                pl = get_sharder("random", seed=100 * i + s).place(sub, t)
            except InfeasiblePlacementError:
                continue
            held.append(oracle.measure(sub, pl, t, task=task.name))
    acc = evaluate_cost_net(model.cost_net, pool, held)

    rows = []
    for task in taskset.test:
        sub = pool.subset(list(task.tables), name=task.name)
        t = topo_cfg.topology(task.num_devices)
        ok = []
        for name in [*HEURISTICS, "dreamshard"]:
            try:
                get_sharder(name, model_dir=model_dir, seed=0).place(sub, t)
                ok.append(name)
            except InfeasiblePlacementError:
                pass
        extra = []
        if "dreamshard" in ok and args.samples:
            from dreamshard.sharders.base import make_plan

            ep = plan_with_policy(model.policy, model.cost_net, sub.tables, t, samples=args.samples, seed=0)
            extra.append(make_plan(sub, t, ep.placement, f"dreamshard@{args.samples}", predicted=ep.costs))
        cmp = compare_sharders(sub, t, ok, oracle, rounds=args.rounds,
                               sharder_options={"dreamshard": {"model_dir": model_dir}}, extra_plans=extra)
        heur = [r for r in cmp.results if r.sharder in HEURISTICS]
        best_h = min(heur, key=lambda r: r.overall_ms)
        row = {"task": task.name, "tables": len(task.tables), "devices": task.num_devices,
               "best_heuristic": best_h.sharder,
               "infeasible": [n for n in [*HEURISTICS, "dreamshard"] if n not in ok]}
        for r in cmp.results:
            row[r.sharder] = round(r.overall_ms / best_h.overall_ms, 4)
        rows.append(row)

    # planning latency: 1,000 tables on 64 devices
    big = synth_inventory(1000, seed=7, name="latency")
    bt = Topology(num_devices=64, memory_per_device_gb=64.0)
    lat = []
    for _ in range(3):
        s = time.perf_counter()
        plan_with_policy(model.policy, model.cost_net, big.tables, bt)
        lat.append(time.perf_counter() - s)

    result = {
        "backend": args.backend + label,
        "pool_tables": args.tables,
        "train_seconds": round(train_s, 1),
        "n_measurements": len(load_measurements(model_dir / "measurements.jsonl")),
        "cost_model_heldout_tasks": acc,
        "cost_model_train_split": model.card.cost_metrics,
        "plan_quality_ratio_to_best_heuristic": rows,
        "geomean_ratio": {
            k: round(statistics.geometric_mean([r[k] for r in rows if k in r]), 4)
            for k in ["dreamshard", f"dreamshard@{args.samples}", *HEURISTICS] if any(k in r for r in rows)
        },
        "latency_1000x64_s": {"median": round(statistics.median(lat), 3), "all": [round(x, 3) for x in lat]},
    }
    atomic_write_text(out / "result.json", json.dumps(result, indent=2, default=str) + "\n")
    print(json.dumps(result, indent=2, default=str))


if __name__ == "__main__":
    main()
