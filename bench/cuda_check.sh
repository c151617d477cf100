#!/usr/bin/env bash
# GPU check of the profiling oracle (short: about a minute). On a GPU box with this repo and a CUDA-enabled
# .venv (torch with CUDA; fbgemm-gpu CUDA build for the TBE operator, else the embedding_bag fallback runs):
#     bash bench/cuda_check.sh
# Prints the device, the operator that ran, per-device costs of a few placements of a small synthetic
# inventory, the fused/sum-of-singles ratio, the comm model used, then runs tests/test_cuda_profiling.py.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-.venv/bin/python}"
export DREAMSHARD_CACHE_DIR="${DREAMSHARD_CACHE_DIR:-$(mktemp -d)}"
export DO_NOT_TRACK=1 PREFECT_SERVER_ANALYTICS_ENABLED=false DVC_NO_ANALYTICS=1

"$PY" - <<'PYEOF'
import statistics, sys, time
import torch
if not torch.cuda.is_available():
    sys.exit("cuda_check: torch sees no CUDA GPU (torch %s); install a CUDA build of torch in .venv" % torch.__version__)
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.device_count()} GPU(s): {torch.cuda.get_device_name(0)}")
from dreamshard.inventory.synth import synth_inventory
from dreamshard.profiling import make_oracle
from dreamshard.profiling.fbgemm_backend import fbgemm_available
from dreamshard.sharders import get_sharder
from dreamshard.values import Topology

print(f"fbgemm TBE on cuda: {fbgemm_available(cuda=True)}")
t0 = time.time()
oracle = make_oracle("cuda", warmup=5, repeats=20)
print("oracle:", oracle.describe())
inv = synth_inventory(24, 0)
print(f"inventory: {inv.num_tables} tables, {sum(t.size_gb for t in inv.tables):.2f} GB")
for batch in (2048, 65536):
    topo = Topology(num_devices=4, device_type="cuda", memory_per_device_gb=40, batch_size=batch)
    comm = oracle.comm_model(topo)
    print(f"\nbatch {batch}: comm {comm.backend} alpha {comm.alpha_ms:.3f} ms beta {comm.beta_ms_per_mb:.3f} ms/MB (world {comm.world_size})")
    for seed in range(3):
        p = get_sharder("random", seed=seed).place(inv, topo)
        m = oracle.measure(inv, p, topo)
        devs = "  ".join(f"d{d}: " + "/".join(f"{x:.3f}" for x in c.as_list()) for d, c in enumerate(m.costs.per_device))
        print(f"  random#{seed}: overall {m.overall_ms:.3f} ms  spread {max(m.spread):.3f}  [{devs}]")
    one = Topology(num_devices=1, device_type="cuda", memory_per_device_gb=40, batch_size=batch)
    singles = {n: oracle.measure_single(inv, n, one).overall_ms for n in inv.table_names}
    for k in (2, 10, 20):
        ratios = []
        for s in range(3):
            names = inv.table_names[s * 2 : s * 2 + k] if k == 2 else inv.table_names[s : s + k]
            fused = oracle.measure(inv, {n: 0 for n in names}, one, task="fusion").overall_ms
            ratios.append(fused / sum(singles[n] for n in names))
        print(f"  fused/sum-of-singles k={k}: " + ", ".join(f"{r:.2f}" for r in ratios) + f" (median {statistics.median(ratios):.2f})")
print(f"\ncuda_check figures done in {time.time() - t0:.1f} s")
PYEOF

"$PY" -m pytest -q tests/test_cuda_profiling.py
