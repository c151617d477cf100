"""End-to-end benchmark: real TorchRec training steps with each contender's plan. Not part of `make test`.

    python bench/dmp_step.py [--inventories SPEC,...] [--rounds N] [--steps N] [--out DIR] [...]

Every plan runs in TorchRec's DistributedModelParallel (tests/dmp_support.py): 2 CPU ranks (one thread
each) over gloo on loopback, an EmbeddingBagCollection of the inventory's tables, fused exact-SGD kernel, one
step = embedding forward + all-to-all + loss + backward (with the fused update). The global batch is params
`topology.batch_size` (each rank gets half), lookups synthesised per table to its pooling factor and reuse
histogram, as the profiler does.

Protocol, per inventory:
- contenders: every heuristic, `torchrec` (TorchRec's own planner, table-wise) and `dreamshard` (the learned
  sharder, model `--model`, default the packaged one), planned for `--world-size` devices with params
  `topology` memory (raised, and reported, where an inventory does not fit table-wise: every device then gets
  1.25x an even share and at least 1.05x the largest table);
- identical placements are trained once and reported under every sharder that produced them; the dreamshard
  plan is trained a second time as its own contender ("same plan twice": the noise floor of the run);
- interleaved: `--rounds` rounds, each runs `--steps` timed steps of every contender in a rotated order
  (after `--warmup` untimed steps each); a contender's figure is the median over rounds of the per-round
  median step time of the slowest rank;
- tables larger than 16 MB are scaled down to 16 MB for the CPU run (dreamshard.profiling.scaling, rule 1:
  the same tables in every plan, the access pattern kept), like the cost oracle does;
- beside the DMP figure, each plan's per-device cost-model figures: the oracle's MEASURED overall cost (params
  `profile` backend, compare_sharders interleaved, `--oracle-rounds`) and the cost network's PREDICTED overall
  cost, so the report says where the end-to-end ranking agrees with the per-device model and where not;
- ratios to TorchRec's plan (a fixed baseline) and to the best contender of the inventory (biased low by noise);
  geomeans over inventories.

Inventory specs: synth:N[:SEED] (dreamshard inventory synth), criteo-kaggle[:DIM], criteo-terabyte[:DIM]
(dreamshard inventory preset), or a path to an inventory file.
Outputs: <out>/dmp_step.json and <out>/dmp_step.md (default --out bench/results).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from dreamshard.config.settings import resolve
from dreamshard.documents import atomic_write_text, load_inventory
from dreamshard.errors import DreamshardError
from dreamshard.evaluation.compare import compare_sharders
from dreamshard.integrations.torchrec_file import torchrec_document
from dreamshard.inventory.presets import preset_inventory
from dreamshard.inventory.synth import synth_inventory
from dreamshard.learning.metrics import spearman
from dreamshard.learning.model_store import load_model
from dreamshard.learning.planning_cost import predict_plan
from dreamshard.profiling.scaling import CPU_RULE
from dreamshard.sharders import HEURISTICS, get_sharder, learned_options
from dreamshard.values import GB, Inventory, Plan, Topology

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the DMP harness lives with the tests: tests/dmp_support.py

from dmp_support import DmpSettings, run_dmp  # noqa: E402  (needs tests/ on sys.path, set just above)

DEFAULT_INVENTORIES = "synth:60:1,criteo-kaggle,criteo-terabyte:16"
CONTENDERS = [*HEURISTICS, "torchrec", "dreamshard"]
NOISE = "dreamshard (same plan again)"


def load_spec(spec: str) -> Inventory:
    """An inventory from a spec (module docstring)."""
    kind, _, rest = spec.partition(":")
    if kind == "synth":
        n, _, seed = rest.partition(":")
        return synth_inventory(int(n), int(seed or 0))
    if kind in ("criteo-kaggle", "criteo-terabyte"):
        return preset_inventory(kind, dim=int(rest) if rest else None, name=f"{kind}-d{rest}" if rest else None)
    return load_inventory(spec)


def fitting_topology(inv: Inventory, base: Topology) -> Topology:
    """`base`, with memory raised where the inventory does not fit table-wise (module docstring)."""
    total = sum(t.size_gb for t in inv.tables)
    largest = max(t.size_gb for t in inv.tables)
    if total <= 0.8 * base.num_devices * base.memory_per_device_gb and largest <= base.memory_per_device_gb:
        return base
    need = max(base.memory_per_device_gb, 1.25 * total / base.num_devices, 1.05 * largest)
    return base.model_copy(update={"memory_per_device_gb": round(need + 0.05, 2)})


def _gmean(xs: list[float]) -> float | None:
    return round(statistics.geometric_mean(xs), 4) if xs else None


def _spearman(a: list[float], b: list[float]) -> float | None:
    if len(a) < 3:
        return None
    rho = spearman(np.asarray(a), np.asarray(b))
    return None if rho != rho else round(rho, 3)  # nan: a constant column


@functools.cache
def _model(model_dir: Path | None) -> Any:
    return load_model(model_dir, require_policy=False)


def _predicted(model_dir: Path | None, inv: Inventory, plan: Plan) -> float | None:
    """The learned cost model's predicted overall cost (ms) of a plan (ensemble mean, column shards included)."""
    return round(predict_plan(_model(model_dir), inv, plan).overall_ms, 4)


def bench_inventory(spec: str, args: argparse.Namespace, base: Topology, oracle: Any) -> dict[str, Any]:
    inv = load_spec(spec)
    topo = fitting_topology(inv, base)
    options = {**learned_options(model_dir=args.model, seed=0), "random": {"seed": 0}}
    ok, failed = [], {}
    for name in CONTENDERS:
        try:
            get_sharder(name, **options.get(name, {})).shard(inv, topo)
            ok.append(name)
        except DreamshardError as e:
            failed[name] = str(e)
    t0 = time.perf_counter()
    cmp = compare_sharders(inv, topo, ok, oracle, rounds=args.oracle_rounds, sharder_options=options)
    oracle_s = time.perf_counter() - t0
    plans = {r.sharder: r.plan for r in cmp.results}
    # one DMP contender per distinct placement, plus the dreamshard plan again (noise)
    trained: dict[str, str] = {}
    docs = {}
    for name, plan in plans.items():
        key = json.dumps(plan.units(), sort_keys=True)
        same = next((k for k, v in trained.items() if v == key), None)
        if same is None:
            trained[name] = key
            docs[name] = torchrec_document(plan, inv)
    runs_as = {
        name: next(k for k, v in trained.items() if v == json.dumps(p.units(), sort_keys=True))
        for name, p in plans.items()
    }
    if "dreamshard" in plans:
        docs[NOISE] = docs[runs_as["dreamshard"]]
    rows = {t.name: CPU_RULE.table_rows(t) for t in inv.tables}
    settings = DmpSettings(
        world_size=topo.num_devices,
        batch_size=topo.batch_size,
        warmup=args.warmup,
        steps=args.steps,
        rounds=args.rounds,
        timeout_s=args.timeout,
    )
    t0 = time.perf_counter()
    result = run_dmp(inv, docs, settings, rows=rows)
    dmp_s = time.perf_counter() - t0
    dmp = {name: result.step_ms(name) for name in docs}
    contenders = {**{name: runs_as[name] for name in plans}, **({NOISE: NOISE} if NOISE in docs else {})}
    best_dmp = min(dmp.values())
    ref_dmp = dmp.get(runs_as.get("torchrec", ""), None)
    ref_oracle = cmp.result("torchrec").overall_ms if "torchrec" in plans else None
    best_oracle = min(r.overall_ms for r in cmp.results)
    table = []
    for name, run in contenders.items():
        source = "dreamshard" if name == NOISE else name
        ms = dmp[run]
        oracle_ms = cmp.result(source).overall_ms
        table.append(
            {
                "sharder": name,
                "trained_as": run,
                "dmp_ms": round(ms, 3),
                "dmp_round_ms": [round(x, 3) for x in result.round_ms(run)],
                "dmp_ratio_to_torchrec": round(ms / ref_dmp, 4) if ref_dmp else None,
                "dmp_ratio_to_best": round(ms / best_dmp, 4),
                "oracle_ms": round(oracle_ms, 4),
                "oracle_ratio_to_torchrec": round(oracle_ms / ref_oracle, 4) if ref_oracle else None,
                "oracle_ratio_to_best": round(oracle_ms / best_oracle, 4),
                "predicted_ms": _predicted(args.model, inv, plans[source]),
                "output_error": result.output_error(run),
                "loss_finite": result.losses_finite(run),
            }
        )
    heur = [r for r in table if r["sharder"] in HEURISTICS]
    best_heur_dmp = min(heur, key=lambda r: r["dmp_ms"])["sharder"] if heur else None
    best_heur_oracle = min(heur, key=lambda r: r["oracle_ms"])["sharder"] if heur else None
    real = [r for r in table if r["sharder"] != NOISE and r["trained_as"] == r["sharder"]]
    noise = None
    if NOISE in dmp:
        a, b = dmp[runs_as["dreamshard"]], dmp[NOISE]
        noise = round(abs(a - b) / min(a, b), 4)
    row = {
        "spec": spec,
        "inventory": inv.name,
        "tables": inv.num_tables,
        "total_gb": round(sum(t.size_gb for t in inv.tables), 3),
        "scaled_gb": round(sum(rows[t.name] * t.embedding_dim * t.bytes_per_element for t in inv.tables) / GB, 3),
        "topology": topo.model_dump(mode="json"),
        "failed": failed,
        "contenders": table,
        "best_heuristic_dmp": best_heur_dmp,
        "best_heuristic_oracle": best_heur_oracle,
        "same_plan_spread": noise,
        "spearman_dmp_vs_oracle": _spearman([r["dmp_ms"] for r in real], [r["oracle_ms"] for r in real]),
        "spearman_dmp_vs_predicted": _spearman(
            [r["dmp_ms"] for r in real if r["predicted_ms"] is not None],
            [r["predicted_ms"] for r in real if r["predicted_ms"] is not None],
        ),
        "winner_dmp": min(real, key=lambda r: r["dmp_ms"])["sharder"],
        "winner_oracle": min(real, key=lambda r: r["oracle_ms"])["sharder"],
        "oracle_seconds": round(oracle_s, 1),
        "dmp_seconds": round(dmp_s, 1),
    }
    for r in table:
        if r["sharder"] == "dreamshard" and best_heur_dmp:
            bh = next(x for x in table if x["sharder"] == best_heur_dmp)
            bo = next(x for x in table if x["sharder"] == best_heur_oracle)
            row["dreamshard_vs_best_heuristic_dmp"] = round(r["dmp_ms"] / bh["dmp_ms"], 4)
            row["dreamshard_vs_best_heuristic_oracle"] = round(r["oracle_ms"] / bo["oracle_ms"], 4)
    return row


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def pick(field: str) -> list[float]:
        return [x for r in rows for c in r["contenders"] if c["sharder"] == "dreamshard" and (x := c.get(field))]

    return {
        "dreamshard_vs_torchrec_dmp_geomean": _gmean(pick("dmp_ratio_to_torchrec")),
        "dreamshard_vs_torchrec_oracle_geomean": _gmean(pick("oracle_ratio_to_torchrec")),
        "dreamshard_vs_best_heuristic_dmp_geomean": _gmean(
            [r["dreamshard_vs_best_heuristic_dmp"] for r in rows if "dreamshard_vs_best_heuristic_dmp" in r]
        ),
        "dreamshard_vs_best_heuristic_oracle_geomean": _gmean(
            [r["dreamshard_vs_best_heuristic_oracle"] for r in rows if "dreamshard_vs_best_heuristic_oracle" in r]
        ),
        "same_plan_spread_max": max(
            (r["same_plan_spread"] for r in rows if r["same_plan_spread"] is not None), default=None
        ),
        "winners_agree": sum(r["winner_dmp"] == r["winner_oracle"] for r in rows),
        "inventories": len(rows),
    }


def _fmt(x: Any, digits: int = 3) -> str:
    return "-" if x is None else (f"{x:.{digits}f}" if isinstance(x, float) else str(x))


def markdown(res: dict[str, Any]) -> str:
    s = res["summary"]
    lines = [
        "# End-to-end: TorchRec DistributedModelParallel training steps per plan",
        "",
        f"{res['date']}, {res['machine']}; {res['settings']['world_size']} CPU ranks (gloo, 1 thread each), "
        "global batch "
        f"{res['settings']['batch_size']}, fused exact SGD; {res['settings']['rounds']} interleaved rounds x "
        f"{res['settings']['steps']} steps (warm-up {res['settings']['warmup']}). Oracle: {res['oracle']} "
        f"({res['oracle_rounds']} round(s)). Tables scaled to at most 16 MB for the CPU run.",
        "",
        "DMP = median step time (forward + backward + fused update, slowest rank). Oracle = the per-device cost "
        "model's MEASURED overall cost (max over devices of fwd/bwd compute + comm). Predicted = the cost network's "
        "estimate. Ratios < 1 are faster than the reference.",
        "",
        f"- dreamshard / TorchRec, geomean: DMP {_fmt(s['dreamshard_vs_torchrec_dmp_geomean'], 4)}, oracle "
        f"{_fmt(s['dreamshard_vs_torchrec_oracle_geomean'], 4)}",
        f"- dreamshard / best heuristic (each under its own measure), geomean: DMP "
        f"{_fmt(s['dreamshard_vs_best_heuristic_dmp_geomean'], 4)}, oracle "
        f"{_fmt(s['dreamshard_vs_best_heuristic_oracle_geomean'], 4)}",
        f"- same plan twice (noise): largest spread {_fmt(s['same_plan_spread_max'], 4)}; DMP and oracle pick the same "
        f"winner in {s['winners_agree']} of {s['inventories']} inventories",
        "",
    ]
    for r in res["inventories"]:
        topo = r["topology"]
        lines += [
            f"## {r['inventory']} ({r['tables']} tables, {r['total_gb']} GB; {r['scaled_gb']} GB as run; "
            f"{topo['num_devices']} x {topo['memory_per_device_gb']} GB)",
            "",
            "| sharder | DMP ms | DMP per round | x TorchRec | x best | oracle ms | x TorchRec | x best | "
            "predicted ms |",
            "|---|---:|---|---:|---:|---:|---:|---:|---:|",
        ]
        for c in sorted(r["contenders"], key=lambda c: c["dmp_ms"]):
            name = c["sharder"] if c["trained_as"] == c["sharder"] else f"{c['sharder']} (= {c['trained_as']})"
            lines.append(
                f"| {name} | {_fmt(c['dmp_ms'])} | {' '.join(_fmt(x, 1) for x in c['dmp_round_ms'])} | "
                f"{_fmt(c['dmp_ratio_to_torchrec'])} | {_fmt(c['dmp_ratio_to_best'])} | {_fmt(c['oracle_ms'])} | "
                f"{_fmt(c['oracle_ratio_to_torchrec'])} | {_fmt(c['oracle_ratio_to_best'])} | "
                f"{_fmt(c['predicted_ms'])} |"
            )
        lines += [
            "",
            f"Best heuristic: {r['best_heuristic_dmp']} (DMP), {r['best_heuristic_oracle']} (oracle). Winner: "
            f"{r['winner_dmp']} (DMP), {r['winner_oracle']} (oracle). Spearman over distinct plans: DMP vs oracle "
            f"{_fmt(r['spearman_dmp_vs_oracle'])}, DMP vs predicted {_fmt(r['spearman_dmp_vs_predicted'])}. "
            f"Same plan twice: {_fmt(r['same_plan_spread'], 4)}."
            + (f" Could not plan: {', '.join(r['failed'])}." if r["failed"] else ""),
            "",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--inventories",
        default=DEFAULT_INVENTORIES,
        help="comma-separated specs: synth:N[:SEED], criteo-kaggle[:DIM], criteo-terabyte[:DIM], or a file "
        f"(default {DEFAULT_INVENTORIES})",
    )
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (>= 5 for a report; default 5)")
    ap.add_argument("--steps", type=int, default=5, help="timed DMP steps per contender per round (default 5)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed DMP steps per contender first (default 2)")
    ap.add_argument("--world-size", type=int, default=2, help="CPU ranks = devices planned for (default 2)")
    ap.add_argument("--batch-size", type=int, default=None, help="global batch (default params topology.batch_size)")
    ap.add_argument("--params", type=Path, default=ROOT / "params.yaml", help="params file (topology, profile)")
    ap.add_argument(
        "--model",
        type=Path,
        default=ROOT / "dreamshard" / "pretrained",
        help="dreamshard model dir (default: the packaged model)",
    )
    ap.add_argument("--oracle-rounds", type=int, default=3, help="interleaved oracle rounds per plan (default 3)")
    ap.add_argument(
        "--oracle-backend",
        default=None,
        help="oracle backend (default params profile.backend; 'simulator' only for smoke runs)",
    )
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds allowed for one inventory's DMP run")
    ap.add_argument(
        "--out", type=Path, default=ROOT / "bench" / "results", help="directory for dmp_step.json / dmp_step.md"
    )
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.steps < 1 or args.warmup < 0 or args.oracle_rounds < 1:
        ap.error("--rounds, --steps and --oracle-rounds must be >= 1, --warmup >= 0")
    cfg = resolve(args.params, {"profile.backend": args.oracle_backend})
    base = cfg.topology.topology(args.world_size)
    if args.batch_size is not None:
        base = base.model_copy(update={"batch_size": args.batch_size})
    oracle = cfg.profile.oracle()
    rows = []
    try:
        for spec in [s.strip() for s in args.inventories.split(",") if s.strip()]:
            t0 = time.perf_counter()
            rows.append(bench_inventory(spec, args, base, oracle))
            ds = next((c for c in rows[-1]["contenders"] if c["sharder"] == "dreamshard"), {})
            print(
                f"{spec}: {time.perf_counter() - t0:.0f} s; dreamshard DMP x torchrec "
                f"{ds.get('dmp_ratio_to_torchrec')}, "
                f"oracle x torchrec {ds.get('oracle_ratio_to_torchrec')}; same-plan spread "
                f"{rows[-1]['same_plan_spread']}",
                flush=True,
            )
    except DreamshardError as e:
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    finally:
        oracle.close()
    info = oracle.info
    res = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": " ".join(x for x in (platform.machine(), platform.processor(), f"{os.cpu_count()} cpus") if x),
        "oracle": f"{info.name} ({info.operator})"
        + (" [SIMULATED: analytic model, not a measurement]" if info.is_simulated else ""),
        "oracle_rounds": args.oracle_rounds,
        "model": str(args.model),
        "settings": {
            "world_size": args.world_size,
            "batch_size": base.batch_size,
            "rounds": args.rounds,
            "steps": args.steps,
            "warmup": args.warmup,
        },
        "inventories": rows,
        "summary": summary(rows),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "dmp_step.json", json.dumps(res, indent=2) + "\n")
    atomic_write_text(args.out / "dmp_step.md", markdown(res))
    print(json.dumps(res["summary"], indent=1))


if __name__ == "__main__":
    main()
