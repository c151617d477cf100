"""The release bench: each held-out task (config.release.ReleaseTask) planned by the candidate model, the shipped
model (search only: the model out of the box, no hardware) and the heuristics, then every plan measured
interleaved on the oracle's backend. A task's result keeps every contender's per-round samples, paired by round.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from dreamshard.config.release import ReleaseConfig, ReleaseTask
from dreamshard.errors import ConfigError
from dreamshard.evaluation.compare import compare_sharders
from dreamshard.inventory.heldout import heldout_inventory
from dreamshard.profiling.oracle import Oracle
from dreamshard.sharders import get_sharder
from dreamshard.values import Inventory, Plan, Topology

#: the heuristics the candidate must beat (the best of them per task)
RELEASE_HEURISTICS = ("dim_greedy", "size_greedy", "lookup_greedy", "size_lookup_greedy")
CANDIDATE, SHIPPED = "candidate", "shipped"


class TaskResult(BaseModel):
    """One task's measurements: per contender its per-round overall costs (ms), paired by round."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    label: str
    tables: int
    devices: int
    histograms: int  # tables that declare an access histogram
    samples_ms: dict[str, list[float]]
    best_heuristic: str
    plan_ids: dict[str, str]

    def median(self, contender: str) -> float:
        xs = sorted(self.samples_ms[contender])
        mid = len(xs) // 2
        return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2


def _model_plan(model_dir: Path, label: str, inventory: Inventory, topology: Topology) -> Plan:
    plan = get_sharder("dreamshard", model_dir=model_dir).shard(inventory, topology)
    return plan.model_copy(update={"sharder": label})


def run_task(
    task: ReleaseTask, cfg: ReleaseConfig, oracle: Oracle, candidate: Path, shipped: Path | None, batch_size: int
) -> TaskResult:
    """Plan `task` with both models and the heuristics; measure every distinct plan interleaved."""
    inv = heldout_inventory(task.family, task.tables, task.seed, histograms=task.histograms)
    topo = Topology(num_devices=task.devices, memory_per_device_gb=cfg.memory_per_device_gb, batch_size=batch_size)
    mine = _model_plan(candidate, CANDIDATE, inv, topo)
    theirs = _model_plan(shipped, SHIPPED, inv, topo) if shipped is not None else None
    extra = [mine] if theirs is None else [mine, theirs]  # the same placement twice is simply measured twice
    cmp = compare_sharders(
        inv, topo, list(RELEASE_HEURISTICS), oracle, rounds=cfg.rounds, extra_plans=extra, seed=cfg.seed + task.seed,
        with_lower_bound=False,
    )  # fmt: skip
    samples = {r.sharder: list(r.samples_ms) for r in cmp.results}
    heuristics = [h for h in RELEASE_HEURISTICS if h in samples]
    if not heuristics:
        raise ConfigError(f"release task {task.label}: no heuristic could place it; choose another task")
    best = min(heuristics, key=lambda h: sorted(samples[h])[len(samples[h]) // 2])
    ids = {r.sharder: r.plan.plan_id for r in cmp.results}
    return TaskResult(
        label=task.label,
        tables=inv.num_tables,
        devices=task.devices,
        histograms=sum(t.access_histogram is not None for t in inv.tables),
        samples_ms=samples,
        best_heuristic=best,
        plan_ids=ids,
    )


def run_bench(
    cfg: ReleaseConfig,
    oracle: Oracle,
    candidate: Path,
    shipped: Path | None,
    batch_size: int,
    done: Callable[[TaskResult], None] = lambda _r: None,
) -> list[TaskResult]:
    """Every task of `cfg`, in order (`done` is told each task's result as it finishes)."""
    out = []
    for task in cfg.tasks:
        out.append(run_task(task, cfg, oracle, candidate, shipped, batch_size))
        done(out[-1])
    return out
