"""Planning at scale: 10,000 synthetic tables on 1,024 devices with the search only (`dreamshard`, the packaged
model, nothing measured), timed end to end and by phase.

    python bench/scale.py                    # writes bench/results/scale.{json,md}; about a minute on 2 cores
    python bench/scale.py --tables 1000 --devices 64 --out /tmp/scale     # a smoke run (seconds)
    python bench/scale.py --profile          # also a cProfile of the planning, top functions in the JSON
    python bench/scale.py --render           # the markdown again from the JSON

The inventory is `dreamshard inventory synth --num-tables N --seed 0` (dreamshard.inventory.synth), drawn once and
kept under `--cache` (drawing is not planning: 10,000 tables take 20-80 s). Planning is `dreamshard plan
--sharder dreamshard -d 1024`'s library call (dreamshard.usecases.plan), the search's candidate sources, local
search and the plan's assembly each timed (a wrapper around each: nothing in the library knows). Default
topology: `dreamshard plan`'s (4 GB a device, batch 2048, the all-to-all from the model card's fits, derived for
1,024 devices). Wall clock: on a shared machine the figures move with the load; compare phases within one run.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import functools
import io
import json
import os
import platform
import pstats
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from results_files import write_results

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results"


class Phases:
    """Seconds per named phase, accumulated over calls (a phase may run several times, e.g. a heuristic inside
    the layout's packing and again as a candidate)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0
                self.calls[name] = self.calls.get(name, 0) + 1

        return timed


@contextlib.contextmanager
def timed_phases(phases: Phases) -> Iterator[None]:
    """Wrap the search's parts for the block: the layout, every candidate source, the scorer's encoding, local
    search, the sharding-type pass and the plan's assembly."""
    from dreamshard.search import candidates, model_sharder, proposers, sharders

    patches: list[tuple[Any, str, Any]] = [
        (model_sharder.ModelSharder, "layout", "layout (splits)"),
        (candidates._Scorer, "__init__", "encode units"),
        (candidates, "_refined", "local search"),
        (candidates, "_distinct", "rank candidates"),
        (model_sharder.ModelSharder, "plan_from", "assemble plan"),
        (model_sharder, "choose_types", "sharding types"),
        (sharders, "search", "search (all)"),
    ]
    saved = [(owner, attr, getattr(owner, attr)) for owner, attr, _ in patches]
    saved_proposers = dict(proposers.PROPOSERS)
    try:
        for owner, attr, label in patches:
            setattr(owner, attr, phases.wrap(label, getattr(owner, attr)))
        for source, fn in saved_proposers.items():
            proposers.PROPOSERS[source] = phases.wrap(f"candidate {source}", fn)
        yield
    finally:
        for owner, attr, fn in saved:
            setattr(owner, attr, fn)
        proposers.PROPOSERS.update(saved_proposers)


def inventory(tables: int, cache: Path) -> tuple[Any, float]:
    """The synthetic inventory of `tables` tables (seed 0), drawn once into `cache`; (inventory, load seconds)."""
    from dreamshard.documents import load_inventory, save_inventory
    from dreamshard.inventory.synth import synth_inventory

    path = cache / f"synth-{tables}-seed0.json"
    if not path.exists():
        cache.mkdir(parents=True, exist_ok=True)
        save_inventory(synth_inventory(tables, 0), path)
    t0 = time.perf_counter()
    inv = load_inventory(path)
    return inv, time.perf_counter() - t0


def plan_once(inv: Any, devices: int, memory_gb: float, world: str, phases: Phases) -> tuple[Any, float]:
    """The search-only plan of `inv` (the use case `dreamshard plan` calls); (plan, seconds)."""
    from dreamshard.config.settings import resolve
    from dreamshard.usecases.plan import PlanRequest
    from dreamshard.usecases.plan import run as plan

    settings = resolve(
        None,
        {
            "plan.num_devices": devices,
            "topology.memory_per_device_gb": memory_gb,
            "world.name": world,
        },
    )
    request = PlanRequest(settings=settings, inventory=inv, sharder="dreamshard")
    t0 = time.perf_counter()
    with timed_phases(phases):
        result = plan(request)
    return result.plan, time.perf_counter() - t0


def run(args: argparse.Namespace) -> dict[str, Any]:
    inv, load_s = inventory(args.tables, args.cache)
    phases = Phases()
    profiler = cProfile.Profile() if args.profile else None
    if profiler is not None:
        profiler.enable()
    plan, plan_s = plan_once(inv, args.devices, args.memory_gb, args.world, phases)
    top: list[dict[str, Any]] = []
    if profiler is not None:
        profiler.disable()
        buf = io.StringIO()
        stats = pstats.Stats(profiler, stream=buf).sort_stats("tottime")
        for (file, line, fn), (_, calls, tottime, _cum, _) in sorted(
            stats.stats.items(),  # type: ignore[attr-defined]
            key=lambda kv: -kv[1][2],
        )[:25]:
            top.append({"function": f"{Path(file).name}:{line}({fn})", "calls": calls, "tottime_s": tottime})
    costs = plan.predicted
    return {
        "tables": len(inv.tables),
        "devices": args.devices,
        "memory_gb": args.memory_gb,
        "world": args.world,
        "created": time.strftime("%Y-%m-%d %H:%M"),
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "cpus": os.cpu_count(),
        "load_average": list(os.getloadavg()),
        "profiled": bool(profiler),
        "load_inventory_s": round(load_s, 2),
        "plan_s": round(plan_s, 2),
        "phases": {k: {"seconds": round(v, 2), "calls": phases.calls[k]} for k, v in phases.seconds.items()},
        "predicted_overall_ms": costs.overall_ms if costs is not None else None,
        "plan_sha": _placement_digest(plan),
        "top_functions": top,
    }


def _placement_digest(plan: Any) -> str:
    """sha256 of the plan's placement and shards: equal digests, identical plans."""
    import hashlib

    doc = {k: plan.model_dump(mode="json")[k] for k in ("placement", "column_shards", "row_shards", "data_parallel")}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


def markdown(res: dict[str, Any]) -> str:
    lines = [
        "# Planning at scale: 10,000 tables on 1,024 devices",
        "",
        f"`bench/scale.py`, {res['created']}: {res['tables']} synthetic tables on {res['devices']} devices "
        f"({res['memory_gb']:g} GB each, world `{res.get('world', res.get('interconnect'))}`), `dreamshard` search "
        f"only on the "
        f"packaged model; {res['machine']}, {res['cpus']} cores, load average at the end "
        f"{', '.join(f'{x:.1f}' for x in res['load_average'])}"
        + (" (under cProfile)" if res["profiled"] else "")
        + ".",
        "",
        f"Planning: **{res['plan_s']:.1f} s** (loading the inventory file: {res['load_inventory_s']:.1f} s more). "
        f"Predicted overall {res['predicted_overall_ms']:.3f} ms; placement digest `{res['plan_sha']}`.",
        "",
        "| phase | s | calls |",
        "|---|---:|---:|",
    ]
    for name, p in sorted(res["phases"].items(), key=lambda kv: -kv[1]["seconds"]):
        lines.append(f"| {name} | {p['seconds']:.2f} | {p['calls']} |")
    lines += [
        "",
        "Phases nest: `search (all)` holds the candidates, the encoding, local search and the ranking; the layout's "
        "packing runs a heuristic too.",
    ]
    if res["top_functions"]:
        lines += ["", "| function (cProfile, own time) | calls | s |", "|---|---:|---:|"]
        lines += [f"| `{f['function']}` | {f['calls']} | {f['tottime_s']:.2f} |" for f in res["top_functions"][:15]]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tables", type=int, default=10_000)
    ap.add_argument("--devices", type=int, default=1024)
    ap.add_argument("--memory-gb", type=float, default=4.0)
    ap.add_argument("--world", default="host", help="world.name planned for (default: host, this machine's fits).")
    ap.add_argument("--cache", type=Path, default=ROOT / "runs" / "bench-cache", help="Where the inventory is kept.")
    ap.add_argument("--profile", action="store_true", help="Plan under cProfile (slower); top functions kept.")
    ap.add_argument("--out", type=Path, default=OUT, help="Directory of scale.{json,md}.")
    ap.add_argument("--render", action="store_true", help="Write the markdown again from the JSON.")
    args = ap.parse_args()
    write_results(args.out, "scale", args.render, lambda: run(args), markdown)


if __name__ == "__main__":
    main()
