"""`make run`: the main job end to end on the embedded defaults (CPU profiling, local everything).

Synthesises a 50-table inventory, profiles it on the CPU backend, compares every heuristic (and TorchRec's
planner) on 4 devices with all contenders measured interleaved, and writes runs/latest/.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from rich.console import Console

from dreamshard.errors import DreamshardError
from dreamshard.evaluation import compare_sharders, comparison_markdown, comparison_table, plot_comparison
from dreamshard.inventory.synth import synth_inventory
from dreamshard.io import atomic_write_text, save_inventory, save_plan
from dreamshard.profiling import make_oracle, profile_inventory
from dreamshard.sharders import HEURISTICS
from dreamshard.types import GB, Topology

console = Console()


def auto_memory_gb(total_bytes: int, largest_bytes: int, devices: int, slack: float = 1.5) -> float:
    """A per-device cap that makes memory a real constraint but leaves every heuristic feasible."""
    need = max(largest_bytes * 1.05, slack * total_bytes / devices)
    return round(need / GB + 0.005, 2)


def run(out_dir: Path = Path("runs/latest"), num_tables: int = 50, devices: int = 4, seed: int = 0,
        num_placements: int = 8, rounds: int = 3) -> Path:
    tmp = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    inv = synth_inventory(num_tables=num_tables, seed=seed, name=f"synth{num_tables}")
    save_inventory(inv, tmp / "inventory.yaml")
    mem = auto_memory_gb(sum(t.size_bytes for t in inv.tables), max(t.size_bytes for t in inv.tables), devices)
    topo = Topology(num_devices=devices, memory_per_device_gb=mem, batch_size=2048)
    console.print(f"[bold]inventory[/] {inv.name}: {inv.num_tables} tables, "
                  f"{sum(t.size_gb for t in inv.tables):.2f} GB; {devices} devices x {mem} GB")
    oracle = make_oracle("cpu", warmup=3, repeats=7, num_threads=1, seed=seed)
    summary = profile_inventory(inv, topo, num_placements, tmp / "measurements.jsonl", oracle, seed=seed)
    console.print(f"[bold]profiled[/] {summary.measured} measured, {summary.skipped} resumed, {summary.wall_s:.1f} s")
    contenders = [*HEURISTICS, "torchrec"]
    with console.status("comparing sharders (interleaved measurement)") as status:
        cmp = compare_sharders(inv, topo, contenders, oracle, rounds=rounds, seed=seed,
                               progress=lambda m: status.update(m))
    for r in cmp.results:
        save_plan(r.plan, tmp / "plans" / f"{r.sharder}.json")
    atomic_write_text(tmp / "comparison.json", cmp.model_dump_json(indent=2) + "\n")
    atomic_write_text(tmp / "comparison.md", comparison_markdown(cmp) + "\n")
    plot_comparison(cmp, tmp / "comparison.png")
    shutil.rmtree(out_dir, ignore_errors=True)
    tmp.rename(out_dir)
    console.print(comparison_table(cmp))
    console.print(f"wrote {out_dir}/ (plans/, comparison.json, comparison.md, comparison.png)")
    return out_dir


def main() -> None:
    try:
        run()
    except DreamshardError as e:
        Console(stderr=True).print(f"error: {type(e).__name__}: {e}", markup=False)
        sys.exit(e.exit_code)


if __name__ == "__main__":
    main()
