"""Tables larger than a device: the inventories of the huge-tables work, planned by every sharder and TorchRec's
planner, with the sharding types and kernels each chose, its planning time, its cost graded by the judge
(bench/judge.py: code the planner never uses; its ratios to the best heuristic and to TorchRec's cpu plan are the
headline), its cost under the packaged learned model (predicted) and measured by the CPU oracle (labelled "oracle";
rows scaled as profiling scales them: no table is allocated at its size; memory is arithmetic), and the oracle's
error against the judge.

    python bench/huge_tables.py            # writes bench/results/huge_tables.{json,md}; ~2-3 min
    python bench/huge_tables.py --quick    # the smallest case, 2 rounds: a check that it runs (to /tmp)

Cases:
  skewed-8x16        one 2e9 x 4 id table (29.8 GB) among 12 tiny and 10 mid tables (56 GB) on 8 x 16 GB
  skewed-2x4x16      the same on 2 hosts x 4 devices of 16 GB (table_row_wise is one host's devices)
  must-split-4x0.15  12 tables on 4 x 0.15 GB: two 0.2 GB tables, one of which must be cut four ways
  huge64-16x16       one 1e9 x 64 table (238 GB) among 12 tiny and 4 mid tables (243 GB) on 16 x 16 GB

Contenders: the heuristics, `dreamshard` (search on the packaged learned cost), `dreamshard_lpt`, `dreamshard_rl`,
`dreamshard (cuda)` (planned for cuda devices: a forced table's layout is TorchRec's choice, the labelled prior of
dreamshard.search.layout_prior, since the model learned on cpu), and TorchRec's unrestricted planner asked for cpu
and for cuda devices (its pooled sharder has no row-wise on cpu: where only its cuda answer places the inventory,
that answer is the labelled reference, measured by the same oracle on the cpu topology). Every plan of a case is
measured interleaved, `ROUNDS` rounds, by the oracle (shuffled each round) and by the judge (rotated each round).
The judge times a topology with hosts as one flat host.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results"
ROUNDS = 5
GB = 1024**3
FIXED = "torchrec (cpu)"


def _table(name: str, rows: int, dim: int, pooling: float) -> Any:
    from dreamshard.values import Table

    return Table(name=name, num_embeddings=rows, embedding_dim=dim, pooling_factor=pooling)


def skewed() -> Any:
    """One 2e9 x 4 id table, 12 tiny (1e3-1.2e4 rows, dim 16) and 10 mid (2e6-2e7 rows, dim 64) tables."""
    from dreamshard.values import Inventory

    tiny = [_table(f"tiny{i}", 1_000 * (i + 1), 16, 1.0 + i % 4) for i in range(12)]
    mid = [_table(f"mid{i}", 2_000_000 * (i + 1), 64, 2.0 + i) for i in range(10)]
    return Inventory(name="skewed", tables=(_table("ids", 2_000_000_000, 4, 1.0), *tiny, *mid))


def must_split() -> Any:
    """12 tables on 4 x 0.15 GB: two 0.2 GB tables (dim 64) and ten of 0.018 GB; two shards each (0.1 GB) leave
    room for only 8 of the ten, one of them cut four ways (0.05 GB) packs."""
    from dreamshard.values import Inventory

    big = [_table(f"big{i}", int(0.2 * GB) // (64 * 4), 64, 4.0) for i in range(2)]
    small = [_table(f"t{i}", int(0.018 * GB) // (16 * 4), 16, 4.0) for i in range(10)]
    return Inventory(name="must-split", tables=(*big, *small))


def huge64() -> Any:
    """One 1e9 x 64 table (238 GB: no column shard of 128 columns or wider exists, so row-wise or nothing) among the
    skewed case's 12 tiny and its 4 smallest mid tables (243 GB of 256)."""
    from dreamshard.values import Inventory

    rest = [t for t in skewed().tables if t.name.startswith("tiny") or t.name in ("mid0", "mid1", "mid2", "mid3")]
    return Inventory(name="huge64", tables=(_table("huge", 1_000_000_000, 64, 4.0), *rest))


def cases() -> list[tuple[str, Any, Any]]:
    from dreamshard.values import Topology

    flat = Topology(num_devices=8, memory_per_device_gb=16.0)
    return [
        ("skewed-8x16", skewed(), flat),
        ("skewed-2x4x16", skewed(), flat.model_copy(update={"devices_per_host": 4})),
        ("must-split-4x0.15", must_split(), Topology(num_devices=4, memory_per_device_gb=0.15)),
        ("huge64-16x16", huge64(), Topology(num_devices=16, memory_per_device_gb=16.0)),
    ]


def contenders() -> list[tuple[str, str, str]]:
    """(label, sharder, device type it plans for)."""
    from dreamshard.sharders import HEURISTICS

    ours = [(n, n, "cpu") for n in (*HEURISTICS, "dreamshard", "dreamshard_lpt", "dreamshard_rl")]
    return [
        *ours,
        ("dreamshard (cuda)", "dreamshard", "cuda"),
        ("torchrec (cpu)", "torchrec", "cpu"),
        ("torchrec (cuda, reference)", "torchrec", "cuda"),
    ]


def _plan(name: str, inventory: Any, topology: Any, device_type: str) -> tuple[Any, float]:
    """The sharder's plan for `topology` with `device_type`, and its planning seconds."""
    from dreamshard.sharders import get_sharder

    asked = topology.model_copy(update={"device_type": device_type})
    t0 = time.perf_counter()
    plan = get_sharder(name).shard(inventory, asked)
    return plan, time.perf_counter() - t0


def _on_cpu(plan: Any, inventory: Any, topology: Any) -> Any:
    """`plan` rebuilt on `topology` (the cpu one the oracle measures) when it was made for cuda: its memory
    recomputed there and checked (a PlanError or InfeasiblePlacementError when it does not fit)."""
    from dreamshard.sharders.base import make_plan

    if plan.topology.device_type == topology.device_type:
        return plan
    return make_plan(
        inventory,
        topology,
        plan.placement,
        plan.sharder,
        column_shards=plan.column_shards,
        row_shards=plan.row_shards,
        data_parallel=plan.data_parallel,
        kernels=plan.kernels,
        cache_load_factors=plan.cache_load_factors,
    )


def _short(e: Exception) -> str:
    text = " ".join(str(e).split())
    return text if len(text) <= 160 else text[:157] + "..."


def _types(plan: Any) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(plan.sharding_types().items()))


def _kernels(plan: Any) -> str:
    counts: dict[str, int] = {}
    for t in plan.table_names:
        counts[plan.kernel(t)] = counts.get(plan.kernel(t), 0) + 1
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))


def _split(plan: Any, table: str) -> str:
    """How `table` is cut: its type and unit count."""
    units = len(plan.column_shards.get(table, ())) or len(plan.row_shards.get(table, ())) or 1
    return f"{plan.sharding_type(table)} x{units}"


def judged(judge: Any, inventory: Any, plans: list[tuple[dict[str, Any], Any]]) -> dict[str, Any]:
    """The judge's figures for the case's measured plans, written into their rows (judge ms, x best heuristic,
    x TorchRec's cpu plan); the whole judgement returned for the oracle-vs-judge table."""
    from judge_report import judge_contenders

    from dreamshard.sharders import HEURISTICS

    out = judge_contenders(judge, inventory, {r["planner"]: p for r, p in plans}, list(HEURISTICS), FIXED)
    for row, _ in plans:
        name = row["planner"]
        row["judge_ms"] = round(out["ms"][name], 3)
        row["judge_spread"] = round(out["spread"][name], 3)
        for key, view in (("judge_x_best", "vs_best"), ("judge_x_torchrec", "vs_fixed")):
            if name in out[view]:
                row[key] = round(out[view][name], 3)
    return out


def run_case(label: str, inventory: Any, topology: Any, oracle: Any, judge: Any, rounds: int) -> dict[str, Any]:
    from dreamshard.evaluation.compare import measure_interleaved, median_costs
    from dreamshard.explain.report import planning_cost_for
    from dreamshard.placement.expand import expand_plan

    cost = planning_cost_for(None, topology)
    biggest = max(inventory.tables, key=lambda t: t.size_bytes).name
    rows: list[dict[str, Any]] = []
    plans = []
    for name, sharder, device_type in contenders():
        try:
            plan, secs = _plan(sharder, inventory, topology, device_type)
        except Exception as e:  # a planner that finds no plan is a result here
            rows.append({"planner": name, "fits": False, "error": _short(e)})
            continue
        units, placed = expand_plan(inventory, plan)
        row = {
            "planner": name,
            "fits": True,
            "plan_s": round(secs, 3),
            "types": _types(plan),
            "kernels": _kernels(plan),
            "largest_table": _split(plan, biggest),
            "max_device_gb": round(max(plan.memory_per_device_gb), 3),
            "predicted_ms": round(cost.predict(list(units.tables), placed).overall_ms, 3),
            "layout_reason": plan.layouts.get(biggest, ""),  # the learned sharders' reason (Plan.layouts)
        }
        rows.append(row)
        try:
            plans.append((row, _on_cpu(plan, inventory, topology)))
        except Exception as e:  # the cuda answer does not fit the cpu devices: planned, not measured
            row["not_measured"] = _short(e)
    samples = measure_interleaved(inventory, [p for _, p in plans], oracle, rounds, seed=0)
    measured = []
    for (row, plan), ms in zip(plans, samples, strict=True):
        row["measured_ms"] = round(statistics.median(m.overall_ms for m in ms), 3)
        costs = median_costs(ms)
        measured.append((row, plan.model_copy(update={"measured": costs})))
    judgement = judged(judge, inventory, measured)
    best = min((r["measured_ms"] for r in rows if "measured_ms" in r), default=0.0)
    for r in rows:
        if "measured_ms" in r and best > 0:
            r["x_best"] = round(r["measured_ms"] / best, 3)
    total_gb = sum(t.size_bytes for t in inventory.tables) / GB
    return {
        "case": label,
        "tables": len(inventory.tables),
        "total_gb": round(total_gb, 2),
        "largest_table": biggest,
        "largest_gb": round(max(t.size_bytes for t in inventory.tables) / GB, 2),
        "devices": topology.num_devices,
        "devices_per_host": topology.devices_per_host,
        "memory_per_device_gb": topology.memory_per_device_gb,
        "rows": rows,
        "judge": {k: judgement[k] for k in ("oracle_error", "seconds", "best_heuristic")},
    }


def _cells(r: dict[str, Any]) -> str:
    """A measured plan's judge ms, x best heuristic, x TorchRec (judge) and oracle ms, x best (oracle)."""
    if "measured_ms" not in r:
        return f"not on cpu: {r['not_measured']} | - | - | - | -"
    ratios = " | ".join(f"{r[k]:.3f}" if k in r else "-" for k in ("judge_x_best", "judge_x_torchrec"))
    return f"{r['judge_ms']:.3f} | {ratios} | {r['measured_ms']:.3f} | {r['x_best']:.3f}"


def case_lines(case: dict[str, Any]) -> list[str]:
    from judge_report import error_lines

    hosts = f", {case['devices_per_host']} devices per host" if case["devices_per_host"] else ""
    lines = [
        "",
        f"## {case['case']}: {case['tables']} tables ({case['total_gb']} GB) on {case['devices']} x "
        f"{case['memory_per_device_gb']:g} GB{hosts}; largest `{case['largest_table']}` {case['largest_gb']} GB",
        "",
        "| planner | sharding types (tables) | largest table | kernels | max device GB | plan s | predicted ms | "
        "judge ms | x best heuristic (judge) | x torchrec (judge) | oracle ms | x best (oracle) |",
        "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in case["rows"]:
        if not r["fits"]:
            lines.append(f"| {r['planner']} | no plan: {r['error']} | | | | | | | | | | |")
            continue
        lines.append(
            f"| {r['planner']} | {r['types']} | {r['largest_table']} | {r['kernels']} | {r['max_device_gb']:.3f} "
            f"| {r['plan_s']:.2f} | {r['predicted_ms']:.3f} | {_cells(r)} |"
        )
    names = [r["planner"] for r in case["rows"] if "measured_ms" in r]
    why = [
        f"- {r['planner']}: `{case['largest_table']}` {r['layout_reason']}"
        for r in case["rows"]
        if r.get("layout_reason") and r["planner"] in ("dreamshard", "dreamshard (cuda)")
    ]
    title = "Why the largest table got its layout (the plan's own reason, `Plan.layouts`):"
    reasons = ["", title, "", *why] if why else []
    return [*lines, *reasons, "", *error_lines([case["judge"]], names)]


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "# Tables larger than a device",
        "",
        f"Generated by `bench/huge_tables.py` in {result['wall_s']:.0f} s. Judge: bench/judge.py (code the planner "
        "never uses; docs/benchmarks/judge.md), the headline; x best heuristic and x torchrec: to the case's fastest "
        "heuristic and to TorchRec's cpu plan, by the judge. Predicted: the packaged learned cost model; oracle: the "
        f"{result['backend']} oracle ({result['threads']} thread(s), batch {result['batch']}), rows scaled as "
        "profiling scales them (no table is allocated at its size; memory is arithmetic); x best (oracle): to the "
        f"fastest plan the oracle measured. Medians of {result['rounds']} interleaved rounds each. TorchRec's cuda "
        "answer is planned for cuda devices (row-wise is on offer there) and measured on the same cpu topology.",
    ]
    for case in result["cases"]:
        lines += case_lines(case)
    return "\n".join(lines) + "\n"


def main() -> None:
    from judge import Judge

    from dreamshard.config.settings import resolve

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=ROUNDS, help="Interleaved rounds of the oracle and of the judge.")
    ap.add_argument("--quick", action="store_true", help="The smallest case, 2 rounds, results to /tmp.")
    args = ap.parse_args()
    rounds, out = (min(args.rounds, 2), Path("/tmp")) if args.quick else (args.rounds, OUT)
    chosen = [c for c in cases() if not args.quick or c[0] == "must-split-4x0.15"]
    t0 = time.perf_counter()
    settings = resolve(None, {})
    oracle = settings.oracle()
    try:
        with Judge(rounds=rounds) as judge:
            results = [run_case(label, inv, topo, oracle, judge, rounds) for label, inv, topo in chosen]
    finally:
        oracle.close()
    info = oracle.info
    result = {
        "wall_s": round(time.perf_counter() - t0, 1),
        "backend": info.name,
        "threads": info.num_threads,
        "batch": settings.topology.batch_size,
        "rounds": rounds,
        "judge": judge.settings.model_dump(),
        "cases": results,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "huge_tables.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / "huge_tables.md").write_text(markdown(result))
    sys.stdout.write(markdown(result))


if __name__ == "__main__":
    main()
