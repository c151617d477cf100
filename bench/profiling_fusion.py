"""Fusion on the CPU oracle: fused cost of k tables on one device / sum of their single-table costs.

    .venv/bin/python bench/profiling_fusion.py [--backend cpu] [--trials 4] [--batch-size 2048] [--threads 1]

Synthetic DLRM-like tables (dreamshard.inventory.synth), one device (no communication): compute only.
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np

from dreamshard.inventory.synth import synth_inventory
from dreamshard.profiling import make_oracle
from dreamshard.values import Topology


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--trials", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=2048)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--ks", default="2,10,15,20")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    pool = synth_inventory(200, args.seed)
    oracle = make_oracle(args.backend, warmup=3, repeats=7, num_threads=args.threads, seed=args.seed)
    topo = Topology(num_devices=1, memory_per_device_gb=1e6, batch_size=args.batch_size)
    rng = np.random.default_rng(args.seed)
    single: dict[str, float] = {}
    print(f"{oracle.describe()}, batch {args.batch_size}")
    for k in (int(x) for x in args.ks.split(",")):
        ratios = []
        for _ in range(args.trials):
            names = [str(n) for n in rng.choice(pool.table_names, size=k, replace=False)]
            for n in names:
                if n not in single:
                    single[n] = oracle.measure_single(pool, n, topo).overall_ms
            fused = oracle.measure(
                pool, {n: 0 for n in names}, topo, kind="single" if k == 1 else "placement", task="fusion-bench"
            ).overall_ms
            ratios.append(fused / sum(single[n] for n in names))
        print(
            f"k={k:3d}  fused/sum-of-singles: median {statistics.median(ratios):.2f}  "
            f"range {min(ratios):.2f}-{max(ratios):.2f}  ({args.trials} random sets)"
        )


if __name__ == "__main__":
    main()
