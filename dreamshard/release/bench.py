"""The release bench: each held-out task (config.release.ReleaseTask) planned by the candidate model, the shipped
model (search only: the model out of the box, no hardware) and the heuristics, then every plan measured
interleaved on the oracle's backend. A task's result keeps every contender's per-round samples, paired by round.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from dreamshard.config.release import ReleaseConfig, ReleaseTask
from dreamshard.errors import ConfigError
from dreamshard.evaluation.compare import compare_sharders
from dreamshard.inventory.heldout import heldout_inventory
from dreamshard.profiling.oracle import Oracle
from dreamshard.sharders import get_sharder
from dreamshard.sharders.base import Sharder
from dreamshard.values import Topology

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
        return statistics.median(self.samples_ms[contender])


def run_task(
    task: ReleaseTask, cfg: ReleaseConfig, oracle: Oracle, models: Mapping[str, Sharder], batch_size: int
) -> TaskResult:
    """Plan `task` with each of `models` ({label: its learned sharder}) and the heuristics; measure every plan
    interleaved (the same placement from both models is simply measured twice)."""
    inv = heldout_inventory(task.family, task.tables, task.seed, histograms=task.histograms)
    topo = Topology(num_devices=task.devices, memory_per_device_gb=cfg.memory_per_device_gb, batch_size=batch_size)
    extra = [s.shard(inv, topo).model_copy(update={"sharder": label}) for label, s in models.items()]
    cmp = compare_sharders(
        inv, topo, list(RELEASE_HEURISTICS), oracle, rounds=cfg.rounds, extra_plans=extra, seed=cfg.seed + task.seed,
        with_lower_bound=False,
    )  # fmt: skip
    samples = {r.sharder: list(r.samples_ms) for r in cmp.results}
    medians = {r.sharder: r.overall_ms for r in cmp.results}  # the median over rounds
    heuristics = [h for h in RELEASE_HEURISTICS if h in medians]
    if not heuristics:
        raise ConfigError(f"release task {task.label}: no heuristic could place it; choose another task")
    best = min(heuristics, key=lambda h: medians[h])
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
    """Every task of `cfg`, in order (`done` is told each task's result as it finishes). Each model is loaded once
    (a sharder keeps nothing of a call)."""
    models = {CANDIDATE: get_sharder("dreamshard", model_dir=candidate)}
    if shipped is not None:
        models[SHIPPED] = get_sharder("dreamshard", model_dir=shipped)
    out = []
    for task in cfg.tasks:
        out.append(run_task(task, cfg, oracle, models, batch_size))
        done(out[-1])
    return out
