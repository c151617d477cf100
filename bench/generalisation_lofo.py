"""Leave-one-family-out generalisation (`python bench/generalisation.py --part lofo`; quiet machine, about 40 min).

The packaged model is pre-trained on the `wide` generator alone. Here every other family is held out in turn:

1. **Corpora.** Each family gets its own measured corpus, as pre-training measures its tasks: `CORPUS_TASKS` tasks
   (8-120 tables on 2-8 devices, seeded), each measured as one random placement and the plans of the pre-training
   kinds (dim_greedy, lookup_greedy, size_lookup_greedy, crowded) on the `cpu` backend at batch 2048.
2. **Models without a family.** For each held-out family F, the packaged model is trained further (one outer-loop
   iteration with pre-training's settings, the production loop's functions) on the corpora of every *other*
   family: a model that has seen `wide` and three families, never F.
3. **Cost-net error per family**: held-out device-compute MAPE of the packaged model and of the model without F on
   F's corpus, with the tables' access histograms declared and with every histogram removed (the planner then
   assumes no reuse; the timings are the same, since the data did not change, only what the inventory says).
4. **Plans**: `EVAL_TASKS` tasks per family (new seeds), every baseline and TorchRec's planner, and the learned
   planner from the packaged model and from the model without F, each planned once with histograms and once from the
   same inventory with the histograms removed; all measured interleaved (>= 5 rounds) with a same-plan-twice row.

Families (the last two exist only here, so neither the pre-training generator nor any tuning has seen them):

- `mixed`, `dlrm`: dreamshard.inventory.families (written beside `wide`, inside its ranges);
- `ctr`: Criteo-like one-hot features: cardinalities from the public Criteo Kaggle and Terabyte lists jittered by
  x0.5-2 (capped at 20M rows, so that heuristics without column splits can place every table), dims 16/32/64/128,
  pooling exactly 1 (80%) or 2-5 (20%), Zipf 0.8-1.3;
- `seq`: sequence (history) features: pooling 10-120, dims 32-256, rows 1e4-1e7, Zipf 0.4-1.2, 30% fp16.
"""

from __future__ import annotations

import json
import math
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np

CORPUS_TASKS = 12
EVAL_TASKS: tuple[tuple[int, int], ...] = ((16, 2), (48, 4), (96, 8))  # (tables, devices)
LOFO_FAMILIES: tuple[str, ...] = ("mixed", "dlrm", "ctr", "seq")
MEMORY_GB = 16.0
BATCH = 2048


def _ctr_table(name: str, rng: np.random.Generator) -> Any:
    from dreamshard.inventory.presets import CARDINALITIES
    from dreamshard.inventory.synth import zipf_histogram
    from dreamshard.values import Table

    cards = [*CARDINALITIES["criteo-kaggle"], *CARDINALITIES["criteo-terabyte"]]
    rows = max(3, int(round(float(rng.choice(cards)) * math.exp(rng.uniform(math.log(0.5), math.log(2.0))))))
    rows = min(rows, 20_000_000)  # <= 10 GB at dim 128: every planner can place it on a 16 GB device
    dim = int(rng.choice((16, 32, 64, 128)))
    pooling = 1.0 if rng.random() < 0.8 else float(rng.integers(2, 6))
    hist = zipf_histogram(rows, pooling, float(rng.uniform(0.8, 1.3)), rng)
    return Table(name=name, num_embeddings=rows, embedding_dim=dim, pooling_factor=pooling, access_histogram=hist)


def _seq_table(name: str, rng: np.random.Generator) -> Any:
    from dreamshard.inventory.synth import zipf_histogram
    from dreamshard.values import Table

    rows = int(round(math.exp(rng.uniform(math.log(1e4), math.log(1e7)))))
    dim = int(rng.choice((32, 48, 64, 96, 128, 192, 256)))
    pooling = round(math.exp(rng.uniform(math.log(10.0), math.log(120.0))), 2)
    hist = zipf_histogram(rows, pooling, float(rng.uniform(0.4, 1.2)), rng)
    return Table(
        name=name,
        num_embeddings=rows,
        embedding_dim=dim,
        pooling_factor=pooling,
        access_histogram=hist,
        dtype="fp16" if rng.random() < 0.3 else "fp32",
    )


def family_tables(family: str, n: int, seed: int, prefix: str) -> list[Any]:
    """`n` tables of `family`, named `<prefix>_t<i>` (deterministic)."""
    from dreamshard.inventory.families import family_inventory

    if family in ("ctr", "seq"):
        make = _ctr_table if family == "ctr" else _seq_table
        children = np.random.SeedSequence([seed, 0x10F0]).spawn(n)
        return [make(f"{prefix}_t{i:03d}", np.random.default_rng(c)) for i, c in enumerate(children)]
    inv = family_inventory(family, n, seed)
    return [t.model_copy(update={"name": f"{prefix}_t{i:03d}"}) for i, t in enumerate(inv.tables)]


def family_corpus_tasks(family: str, seed: int = 0) -> tuple[Any, Any]:
    """The pool and task set of `family`'s corpus: CORPUS_TASKS tasks, 8-120 tables log-uniform, 2-8 devices."""
    from dreamshard.values import Inventory, Task, TaskSet

    rng = np.random.default_rng([seed, zlib.crc32(family.encode())])
    tables, tasks = [], []
    for i in range(CORPUS_TASKS):
        n = int(round(math.exp(rng.uniform(math.log(8), math.log(120)))))
        d = int(rng.integers(2, 9))
        d = min(d, n)
        ts = family_tables(family, n, 1000 + i, f"{family}{i:02d}")
        tables += ts
        tasks.append(Task(name=f"{family}-{i:02d}", tables=tuple(t.name for t in ts), num_devices=d))
    pool = Inventory(name=f"lofo-{family}", tables=tuple(tables))
    return pool, TaskSet(
        pool_name=pool.name,
        pool_fingerprint=pool.fingerprint(),
        train_tables=pool.table_names,
        test_tables=(),
        train=tuple(tasks),
        test=(),
    )


def measure_corpus(family: str, work: Path, oracle: Any) -> tuple[Any, Any, list[Any], float]:
    """Measure (or reuse) `family`'s corpus; (pool, taskset, records, seconds)."""
    from dreamshard.documents import load_measurements
    from dreamshard.profiling.runner import profile_inventory
    from dreamshard.values import Topology

    pool, taskset = family_corpus_tasks(family)
    path = work / "corpora" / f"{family}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    topo = Topology(num_devices=1, memory_per_device_gb=1024.0, batch_size=BATCH)
    profile_inventory(
        pool,
        topo,
        1,
        path,
        oracle,
        seed=0,
        tasks=taskset,
        progress=False,
        kinds=("dim_greedy", "lookup_greedy", "size_lookup_greedy", "crowded"),
        singles=False,
    )
    return pool, taskset, load_measurements(path), time.perf_counter() - t0


def without_histograms(inv: Any) -> Any:
    """The same inventory as a team without access statistics would declare it."""
    return inv.model_copy(update={"tables": tuple(t.model_copy(update={"access_histogram": None}) for t in inv.tables)})


def union(parts: list[tuple[Any, Any, list[Any]]], name: str) -> tuple[Any, Any, list[Any]]:
    from dreamshard.values import Inventory, TaskSet

    pool = Inventory(name=name, tables=tuple(t for p, _, _ in parts for t in p.tables))
    tasks = tuple(t for _, ts, _ in parts for t in ts.train)
    taskset = TaskSet(
        pool_name=pool.name,
        pool_fingerprint=pool.fingerprint(),
        train_tables=pool.table_names,
        test_tables=(),
        train=tasks,
        test=(),
    )
    # the records' inventory is the union (it holds each family's tables unchanged)
    fp = pool.fingerprint()
    records = [
        m.model_copy(update={"inventory_fingerprint": fp, "inventory_name": pool.name})
        for _, _, rs in parts
        for m in rs
    ]
    return pool, taskset, records


def pretrain_loop() -> Any:
    """The pre-training loop's settings (params.yaml `pretrain.loop`: its cost and policy training), one iteration
    (placements measured where the planners go), warm-started from the packaged model."""
    from dreamshard.config.settings import resolve

    loop = resolve(Path(__file__).resolve().parents[1] / "params.yaml").pretrain.loop
    return loop.model_copy(update={"iterations": 1, "init": "pretrained"})


def train_without(
    held_out: str, corpora: dict[str, tuple[Any, Any, list[Any]]], work: Path, oracle: Any
) -> tuple[Path, float]:
    """The packaged model trained one outer-loop iteration further on every corpus but `held_out`'s."""
    from dreamshard.config.learning import TopologyConfig
    from dreamshard.learning.loop import train
    from dreamshard.learning.model_store import load_model
    from dreamshard.search.candidates import best_placement

    pool, taskset, records = union([c for f, c in corpora.items() if f != held_out], f"lofo-without-{held_out}")
    out = work / "models" / f"without-{held_out}"
    cfg = pretrain_loop()
    t0 = time.perf_counter()
    train(
        pool,
        taskset,
        TopologyConfig(memory_per_device_gb=1024.0, batch_size=BATCH),
        oracle,
        cfg,
        out,
        state_dir=work / "state" / f"without-{held_out}",
        progress=False,
        measurements=records,
        init=load_model(None, require_policy=True),
        backend_name="cpu",
        searcher=best_placement,
    )
    return out, time.perf_counter() - t0


def cost_errors(model_dir: Path | None, pool: Any, records: list[Any]) -> dict[str, float | None]:
    """Device-compute and device-total MAPE of a model on `records`, with and without declared histograms."""
    from dreamshard.learning.cost_eval import evaluate_cost_net
    from dreamshard.learning.model_store import load_model

    ens = load_model(model_dir, require_policy=False).cost_net
    out: dict[str, float | None] = {}
    for tag, inv in (("hist", pool), ("no_hist", without_histograms(pool))):
        ev = evaluate_cost_net(ens, inv, [m for m in records if m.kind == "placement"])
        out[f"compute_{tag}"] = ev.get("mape_device_compute")  # type: ignore[assignment]
        out[f"total_{tag}"] = ev.get("mape_device_total_planning")  # type: ignore[assignment]
    return out


def packaged_errors(work: Path) -> dict[str, dict[str, float | None]]:
    """The packaged model's cost-net errors on every family's corpus (measured earlier, read back), as this
    dreamshard computes features: `--part lofo --errors-only` refreshes them after a feature change (the
    no-histogram columns: what the planner assumes for a table that declares none)."""
    from dreamshard.documents import load_measurements

    out = {}
    for fam in LOFO_FAMILIES:
        pool, _ = family_corpus_tasks(fam)
        out[fam] = cost_errors(None, pool, load_measurements(work / "lofo" / "corpora" / f"{fam}.jsonl"))
    return out


def eval_inventory(family: str, tables: int, seed: int) -> Any:
    from dreamshard.values import Inventory

    return Inventory(name=f"{family}-{tables}-e{seed}", tables=tuple(family_tables(family, tables, seed, "e")))


def learned(
    inv: Any, topo: Any, models: dict[str, Path | None], oracle: Any = None, refine_s: float = 0.0
) -> list[Any]:
    """`dreamshard[<model>]` and `dreamshard[<model>,no-hist]` plans (the latter planned without histograms and
    relabelled to the measured inventory, whose statistics the planner did not see). With `refine_s` > 0, also
    the plan the pipeline's plan stage makes on the target hardware: `--verify 3` (anchors included) and then
    `refine_s` seconds of measured refinement, `dreamshard[<model>,prod]` (and `,no-hist,prod`): measured on the
    inventory as the planner sees it, i.e. with the assumed histograms when none are declared, as in production."""
    from dreamshard.measured.refine import refine_plan
    from dreamshard.sharders import get_sharder

    plans = []
    for tag, model_dir in models.items():
        for hist in (True, False):
            src = inv if hist else without_histograms(inv)
            p = get_sharder("dreamshard", model_dir=model_dir).shard(src, topo)
            label = f"dreamshard[{tag}]" if hist else f"dreamshard[{tag},no-hist]"
            variants = [(label, p)]
            if refine_s > 0 and oracle is not None:
                sharder = get_sharder("dreamshard", model_dir=model_dir, verify=3, oracle=oracle)
                verified = sharder.shard(src, topo)
                prod = refine_plan(src, verified, sharder.planning_cost(topo), oracle, refine_s)
                variants.append((label.removesuffix("]") + ",prod]", prod))
            plans += [
                v.model_copy(
                    update={
                        "sharder": name,
                        "inventory_fingerprint": inv.fingerprint(),
                        "inventory_name": inv.name,
                        "plan_id": f"{v.plan_id}-{i}",
                    }
                )
                for i, (name, v) in enumerate(variants)
            ]
    return plans


def run_lofo(args: Any, baselines: tuple[str, ...], noise_label: str, with_lofo: bool = True) -> dict[str, Any]:
    """The whole protocol (module docstring); returns the JSON-ready result. `with_lofo=False`: the packaged model
    only (no model is trained; its errors and plans, with and without histograms, against the baselines)."""
    from dreamshard.evaluation import compare_sharders
    from dreamshard.profiling import make_oracle
    from dreamshard.sharders import get_sharder
    from dreamshard.values import Topology

    work: Path = args.work / "lofo"
    oracle = make_oracle("cpu", warmup=args.warmup, repeats=args.repeats)
    t_all = time.perf_counter()
    corpora, corpus_s = {}, {}
    for fam in LOFO_FAMILIES:
        pool, taskset, records, secs = measure_corpus(fam, work, oracle)
        corpora[fam] = (pool, taskset, records)
        corpus_s[fam] = round(secs, 1)
        print(f"corpus {fam}: {len(records)} records, {secs:.0f} s", flush=True)
    refine_s = getattr(args, "refine_seconds", 0.0)
    partial = work / (
        "partial.json" if with_lofo else f"partial-packaged{f'-prod{refine_s:g}' if refine_s else ''}.json"
    )
    done = json.loads(partial.read_text()) if partial.is_file() else {"families": {}, "rows": []}
    families: dict[str, Any] = done["families"]
    rows: list[dict[str, Any]] = done["rows"]
    for fam in LOFO_FAMILIES:
        if fam in families:  # a rerun after a crash: this family's result is kept
            continue
        model_dir, train_s = train_without(fam, corpora, work, oracle) if with_lofo else (None, 0.0)
        pool, _, records = corpora[fam]
        errors = {"packaged": cost_errors(None, pool, records)}
        if model_dir is not None:
            errors["without"] = cost_errors(model_dir, pool, records)
        info = {"train_s": round(train_s, 1), "records": len(records), "corpus_s": corpus_s[fam], "errors": errors}
        print(f"{fam}: model without it in {train_s:.0f} s; errors {errors}", flush=True)
        fam_rows = []
        for k, (tables, devices) in enumerate(EVAL_TASKS):
            inv = eval_inventory(fam, tables, 500 + k)
            topo = Topology(num_devices=devices, memory_per_device_gb=MEMORY_GB, batch_size=BATCH)
            plans = learned(
                inv,
                topo,
                {"packaged": None, "lofo": model_dir} if model_dir is not None else {"packaged": None},
                oracle,
                getattr(args, "refine_seconds", 0.0),
            )
            noise = get_sharder("dim_greedy").shard(inv, topo).model_copy(update={"sharder": noise_label})
            cmp = compare_sharders(
                inv,
                topo,
                list(baselines),
                oracle,
                rounds=args.rounds,
                extra_plans=[*plans, noise],
                seed=k,
                with_lower_bound=False,
            )
            ms = {r.sharder: r.overall_ms for r in cmp.results}
            best = min((b for b in baselines if b in ms), key=lambda b: ms[b])  # a planner that cannot place it is out
            row = {
                "task": f"{fam}-{tables}/{devices}",
                "family": fam,
                "ms": ms,
                "best_baseline": best,
                "vs_best": {n: v / ms[best] for n, v in ms.items()},
                "vs_torchrec": {n: v / ms["torchrec"] for n, v in ms.items()} if "torchrec" in ms else {},
                "noise": abs(ms[noise_label] - ms["dim_greedy"]) / ms["dim_greedy"],
            }
            fam_rows.append(row)
            print(
                f"  {row['task']}: best {best} {ms[best]:.2f} ms; "
                + ", ".join(f"{p.sharder} {row['vs_best'][p.sharder]:.3f}" for p in plans)
                + f"; noise {row['noise']:.1%}",
                flush=True,
            )
        families[fam] = info
        rows += fam_rows
        partial.write_text(json.dumps({"families": families, "rows": rows}))  # a family is kept whole or not at all
    oracle.close()
    return {
        "families": families,
        "rows": rows,
        "meta": (
            f"{len(rows)} tasks ({len(LOFO_FAMILIES)} held-out families x {len(EVAL_TASKS)}), {args.rounds} "
            "interleaved "
            f"rounds, warm-up {args.warmup}, repeats {args.repeats}, batch {BATCH}, {MEMORY_GB:g} GB per "
            "device, measured "
            f"interconnect; corpora of {CORPUS_TASKS} tasks per family"
            + (
                f"; `,prod`: --verify 3 then {refine_s:g} s of measured refinement, as the plan stage plans"
                if refine_s
                else ""
            )
            + f"; wall {time.perf_counter() - t_all:.0f} s (this run)"
        ),
    }


def render_lofo(
    run: dict[str, Any], geomean: Any, ratio_table: Any, title: str = "leave-one-family-out (part lofo)"
) -> list[str]:
    """The LOFO section; `geomean` and `ratio_table` are generalisation.py's (one table layout for every part)."""
    rows = run["rows"]
    learned_names = [n for n in rows[0]["ms"] if n.startswith("dreamshard[")]
    names = [*learned_names, "dim_greedy", "lookup_greedy", "size_lookup_greedy", "torchrec", "torchrec_tw_cw"]
    names = [n for n in names if all(n in r["ms"] for r in rows)]
    out = [
        f"## {title}",
        "",
        run["meta"],
        "",
        "Cost-net error on each held-out family's corpus (device compute / device total with the comm model, MAPE):",
        "",
        "| family | records | packaged, hist | packaged, no hist | without family, hist | without family, no "
        "hist | retrain s |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for fam, f in run["families"].items():
        e = f["errors"]

        def pct(d: dict[str, Any], k: str) -> str:
            return "n/a" if d.get(k) is None else f"{d[k]:.1%}"

        out.append(
            f"| {fam} | {f['records']} | "
            + " | ".join(
                f"{pct(e.get(m, {}), 'compute_' + h)} / {pct(e.get(m, {}), 'total_' + h)}"
                for m in ("packaged", "without")
                for h in ("hist", "no_hist")
            )
            + f" | {f['train_s']:.0f} |"
        )
    if run.get("errors_now"):
        now = run["errors_now"]
        out += [
            "",
            f"The packaged model's errors as the features are now computed ({now['note']}):",
            "",
            "| family | packaged, hist | packaged, no hist |",
            "|---|---:|---:|",
        ]
        for fam, e in now["families"].items():
            out.append(
                f"| {fam} | {e['compute_hist']:.1%} / {e['total_hist']:.1%} | "
                f"{e['compute_no_hist']:.1%} / {e['total_no_hist']:.1%} |"
            )
    out += [
        "",
        "Plans (ratio to the per-task best baseline; `[lofo]` = the model trained without the task's family):",
        "",
        *ratio_table(rows, names),
    ]
    out += ["", "Per family (geomean vs best baseline):", ""]
    for fam in run["families"]:
        sel = [r for r in rows if r["family"] == fam]
        out.append(
            f"- {fam}: " + ", ".join(f"{n} {geomean([r['vs_best'][n] for r in sel]):.3f}" for n in learned_names)
        )
    worst = {n: max(rows, key=lambda r: r["vs_best"][n]) for n in learned_names}
    out += ["", "Worst task: " + "; ".join(f"{n} {w['task']} {w['vs_best'][n]:.3f}" for n, w in worst.items()), ""]
    return out
