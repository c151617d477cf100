"""Does the cost model learn row-wise and data-parallel from measurements? (quiet machine, about 12 min)

`python bench/typed_units.py [--work DIR]` writes bench/results/typed_units.{json,md}.

1. **Training corpus**: `TRAIN_TASKS` tasks of the `mixed` family (8-60 tables, 2-8 devices, batch 2048, cpu
   backend), each measured as one random placement, the table-wise pre-training kinds (dim_greedy, lookup_greedy,
   size_lookup_greedy, crowded) and the typed kinds (`row_wise`: one large table row-sharded over every device,
   `data_parallel`: one small table replicated on every device; dreamshard.profiling.runner).
2. **Held-out corpus**: `EVAL_TASKS` tasks of the `ctr` and `seq` families (bench-only generators nobody tuned on),
   each measured as one random placement and the two typed kinds.
3. **Models** (3 train_cost seeds each), each the packaged model warm-started with params.yaml `train_cost` on the
   training corpus:
   `table-wise records` (what training saw before the typed kinds: every record without units) and `with typed
   records` (every record); and the packaged model as it ships.
4. **Error** on the held-out corpus, per kind of record: device-compute MAPE and device-total MAPE as planning sees
   it (predicted compute + the measured collectives), over every device of the row-wise records (each holds a row
   block), of the data-parallel ones (each holds a replica) and of the table-wise ones.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from generalisation_lofo import family_tables  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TRAIN_TASKS = 16
EVAL_TASKS = 12
SEEDS = (0, 1, 2)  # train_cost seeds (bootstrap resamples, init order): the table shows their mean and range
BATCH = 2048
TABLE_WISE_KINDS = ("dim_greedy", "lookup_greedy", "size_lookup_greedy", "crowded")
TYPED_KINDS = ("row_wise", "data_parallel")


def corpus_tasks(families: tuple[str, ...], n_tasks: int, seed: int, name: str) -> tuple[Any, Any]:
    from dreamshard.values import Inventory, Task, TaskSet

    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    tables, tasks = [], []
    for i in range(n_tasks):
        family = families[i % len(families)]
        n = int(round(math.exp(rng.uniform(math.log(8), math.log(60)))))
        d = min(int(rng.integers(2, 9)), n)
        ts = family_tables(family, n, seed * 100 + i, f"{name}{i:02d}")
        tables += ts
        tasks.append(Task(name=f"{name}-{i:02d}", tables=tuple(t.name for t in ts), num_devices=d))
    pool = Inventory(name=name, tables=tuple(tables))
    return pool, TaskSet(
        pool_name=pool.name,
        pool_fingerprint=pool.fingerprint(),
        train_tables=pool.table_names,
        test_tables=(),
        train=tuple(tasks),
        test=(),
    )


def measure(pool: Any, taskset: Any, kinds: tuple[str, ...], path: Path, oracle: Any) -> tuple[list[Any], float]:
    from dreamshard.documents import load_measurements
    from dreamshard.profiling.runner import profile_inventory
    from dreamshard.values import Topology

    path.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    topo = Topology(num_devices=1, memory_per_device_gb=1024.0, batch_size=BATCH)
    profile_inventory(pool, topo, 1, path, oracle, seed=0, tasks=taskset, progress=False, kinds=kinds, singles=False)
    return load_measurements(path), time.perf_counter() - t0


def record_kind(m: Any) -> str:
    from dreamshard.values import parse_unit

    kinds = {parse_unit(u).kind for u in m.placement}
    return "row_wise" if "row" in kinds else "data_parallel" if "replica" in kinds else "table_wise"


def fit(pool: Any, records: list[Any], seed: int) -> tuple[Any, float]:
    from dreamshard.config.settings import resolve
    from dreamshard.learning.model_store import load_model
    from dreamshard.learning.train_cost import train_cost_model

    cfg = resolve(ROOT / "params.yaml").train_cost.model_copy(update={"test_fraction": 0.0, "seed": seed})
    t0 = time.perf_counter()
    ens, _ = train_cost_model(pool, records, cfg, init=load_model(None, require_policy=False).cost_net, progress=False)
    return ens, time.perf_counter() - t0


def errors(ens: Any, pool: Any, records: list[Any]) -> dict[str, dict[str, float | None]]:
    from dreamshard.learning.cost_eval import evaluate_cost_net

    out: dict[str, dict[str, float | None]] = {}
    for kind in ("row_wise", "data_parallel", "table_wise"):
        recs = [m for m in records if record_kind(m) == kind]
        ev = evaluate_cost_net(ens, pool, recs) if recs else {}
        out[kind] = {
            "records": len(recs),
            "compute": ev.get("mape_device_compute"),  # type: ignore[dict-item]
            "total": ev.get("mape_device_total_planning"),
        }  # type: ignore[dict-item]
    return out


def render(run: dict[str, Any]) -> str:
    def pct(x: float | None) -> str:
        return "-" if x is None else f"{100 * x:.1f}%"

    lines = [
        "# Row-wise and data-parallel learned from measurements",
        "",
        f"Generated by `bench/typed_units.py` on {run['date']} ({run['backend']} backend, batch {BATCH}; "
        f"training corpus {run['train_records']} records ({run['train_typed']} of units) in "
        f"{run['train_s']:.0f} s, held-out {run['eval_records']} in {run['eval_s']:.0f} s).",
        "",
        "Held-out device MAPE (ctr + seq families), compute / total as planning sees it "
        "(predicted compute + measured collectives); trained models: the mean over train_cost seeds "
        f"{list(SEEDS)} (range in brackets):",
        "",
        "| model | row-wise devices | data-parallel devices | table-wise devices |",
        "|---|---|---|---|",
    ]

    def cell(e: dict[str, Any], f: str) -> str:
        runs = e.get(f"{f}_runs")
        return pct(e[f]) + (f" ({pct(min(runs))}-{pct(max(runs))})" if runs else "")

    for name, errs in run["models"].items():
        cells = [
            f"{cell(errs[k], 'compute')} / {cell(errs[k], 'total')}"
            for k in ("row_wise", "data_parallel", "table_wise")
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Records per held-out kind: "
        + ", ".join(f"{k} {v['records']}" for k, v in next(iter(run["models"].values())).items())
        + ".",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    from dreamshard.learning.model_store import load_model
    from dreamshard.profiling.oracle import make_oracle

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/dreamshard-typed-units"))
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    ap.add_argument("--backend", default="cpu", help="simulator: a smoke run of the script, no figures")
    args = ap.parse_args(argv)
    oracle = make_oracle(args.backend, warmup=2, repeats=5)
    train_pool, train_tasks = corpus_tasks(("mixed",), TRAIN_TASKS, 1, "typed-train")
    eval_pool, eval_tasks = corpus_tasks(("ctr", "seq"), EVAL_TASKS, 2, "typed-eval")
    train_recs, train_s = measure(
        train_pool, train_tasks, TABLE_WISE_KINDS + TYPED_KINDS, args.work / "train.jsonl", oracle
    )
    print(f"training corpus: {len(train_recs)} records in {train_s:.0f} s", flush=True)
    eval_recs, eval_s = measure(eval_pool, eval_tasks, TYPED_KINDS, args.work / "eval.jsonl", oracle)
    print(f"held-out corpus: {len(eval_recs)} records in {eval_s:.0f} s", flush=True)
    table_wise = [m for m in train_recs if record_kind(m) == "table_wise"]
    models: dict[str, dict[str, dict[str, float | None]]] = {
        "packaged (no training here)": errors(load_model(None, require_policy=False).cost_net, eval_pool, eval_recs)
    }
    fits: dict[str, list[float]] = {}
    for name, recs in (("table-wise records", table_wise), ("with typed records", train_recs)):
        runs = []
        for seed in SEEDS:
            ens, secs = fit(train_pool, recs, seed)
            fits.setdefault(name, []).append(round(secs, 1))
            runs.append(errors(ens, eval_pool, eval_recs))
            print(name, seed, json.dumps(runs[-1]), flush=True)
        models[name] = {
            k: {
                "records": runs[0][k]["records"],
                **{f: float(np.mean([r[k][f] for r in runs])) for f in ("compute", "total")},
                **{f"{f}_runs": [r[k][f] for r in runs] for f in ("compute", "total")},
            }
            for k in runs[0]
        }
    run = {
        "date": time.strftime("%Y-%m-%d"),
        "backend": args.backend,
        "train_records": len(train_recs),
        "train_typed": len(train_recs) - len(table_wise),
        "train_s": train_s,
        "eval_records": len(eval_recs),
        "eval_s": eval_s,
        "fit_s": fits,
        "models": models,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "typed_units.json").write_text(json.dumps(run, indent=2) + "\n")
    (args.out / "typed_units.md").write_text(render(run))
    print(render(run))


if __name__ == "__main__":
    main()
