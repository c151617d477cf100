"""GPU check of plan-time measurement (short: a few minutes on one GPU): on a held-out inventory without access
histograms, `dreamshard` plans with calibration, the backend's collective fits and verification under several id
distributions, all measured on `--backend` (cuda on a GPU box; cpu runs the same code here).

    python bench/cuda_plan_check.py --backend cuda --out bench/results/cuda_plan_check.json

Prints and writes: the calibration report, the distributions the plan was verified under, the kept plan's
predicted vs measured components, and the measured ratio to dim_greedy's plan.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--tables", type=int, default=26)
    ap.add_argument("--devices", type=int, default=2)
    ap.add_argument("--batch", type=int, default=16384)
    ap.add_argument("--calibrate-seconds", type=float, default=10.0)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    import torch

    from dreamshard.inventory.heldout import heldout_inventory
    from dreamshard.placement.expand import expand_plan
    from dreamshard.profiling import make_oracle
    from dreamshard.sharders import get_sharder
    from dreamshard.values import Topology

    dev = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    inv = heldout_inventory("ctr", args.tables, 1, histograms=False)
    topo = Topology(
        num_devices=args.devices, device_type="cuda" if args.backend == "cuda" else "cpu", memory_per_device_gb=40,
        batch_size=args.batch,
    )  # fmt: skip
    oracle = make_oracle(args.backend, warmup=3, repeats=10)
    t0 = time.perf_counter()
    plan = get_sharder(
        "dreamshard", oracle=oracle, calibrate_seconds=args.calibrate_seconds, verify=2, verify_rounds=2
    ).shard(inv, topo)
    plan_s = time.perf_counter() - t0
    units, placement = expand_plan(inv, plan)
    measured = oracle.measure(units, placement, topo).costs
    base = get_sharder("dim_greedy").shard(inv, topo)
    bu, bp = expand_plan(inv, base)
    base_ms = oracle.measure(bu, bp, topo).costs.overall_ms
    d = max(range(len(measured.per_device)), key=lambda i: measured.per_device[i].total)
    res = {
        "device": dev,
        "oracle": oracle.describe(),
        "comm": oracle.comm_model(topo).model_dump(mode="json", exclude={"points"}),
        "plan_seconds": round(plan_s, 1),
        "calibration": plan.calibration.model_dump(mode="json") if plan.calibration else None,
        "assumptions": plan.assumptions.model_dump(mode="json") if plan.assumptions else None,
        "verification_chosen": plan.verification.chosen if plan.verification else None,
        "bottleneck_predicted": plan.predicted.per_device[d].model_dump(mode="json"),
        "bottleneck_measured": measured.per_device[d].model_dump(mode="json"),
        "measured_ms": measured.overall_ms,
        "dim_greedy_ms": base_ms,
        "ratio_to_dim_greedy": measured.overall_ms / base_ms,
    }
    oracle.close()
    print(json.dumps(res, indent=1))
    if args.out is not None:
        args.out.write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
