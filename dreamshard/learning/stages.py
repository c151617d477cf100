"""The learning stages as plain functions over files: the CLI commands (and DVC stages) call these.

Each reads its params.yaml section(s), runs the library function and writes its outputs atomically.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dreamshard.config import load_section
from dreamshard.io import atomic_write_text, dump_model, load_inventory, load_measurements
from dreamshard.learning.configs import CostTrainConfig, LoopConfig, PolicyTrainConfig, TasksConfig, TopologyConfig
from dreamshard.learning.model_store import ModelCard, load_model, save_model
from dreamshard.learning.tasks import load_taskset, make_taskset
from dreamshard.types import TaskSet


def _write_json(path: Path | None, data: Any) -> None:
    if path is not None:
        atomic_write_text(path, json.dumps(data, indent=2) + "\n")


def make_tasks_file(inventory: Path, out: Path, params: Path | None = None) -> TaskSet:
    pool = load_inventory(inventory)
    taskset = make_taskset(pool, load_section(params, "tasks", TasksConfig))
    dump_model(taskset, out)
    return taskset


def train_cost_stage(
    inventory: Path, measurements: Path, model_dir: Path, params: Path | None = None,
    metrics_out: Path | None = None, progress: bool = True,
) -> ModelCard:
    """Fit the cost net on a profile file and save it (cost net only) in model_dir."""
    from dreamshard.learning.train_cost import train_cost_model

    pool = load_inventory(inventory)
    cfg = load_section(params, "train_cost", CostTrainConfig)
    records = load_measurements(measurements)
    net, metrics = train_cost_model(pool, records, cfg, progress=progress)
    backend = records[-1].backend.name if records else ""
    card = save_model(
        model_dir, net, None,
        configs={"train_cost": cfg.model_dump(mode="json")},
        inventory_name=pool.name, inventory_fingerprint=pool.fingerprint(), backend=backend,
        cost_metrics=metrics.model_dump(mode="json"),
        provenance={"command": "train-cost", "measurements": str(measurements), "n_records": len(records)},
    )
    _write_json(metrics_out, metrics.model_dump(mode="json"))
    return card


def train_policy_stage(
    inventory: Path, tasks: Path, model_dir: Path, params: Path | None = None,
    metrics_out: Path | None = None, progress: bool = True,
) -> ModelCard:
    """Train the policy on the cost net already in model_dir and save both there."""
    from dreamshard.learning.train_policy import train_policy

    pool = load_inventory(inventory)
    taskset = load_taskset(tasks)
    cfg = load_section(params, "train_policy", PolicyTrainConfig)
    topo = load_section(params, "topology", TopologyConfig)
    loaded = load_model(model_dir, require_policy=False)
    policy, metrics = train_policy(pool, list(taskset.train), loaded.cost_net, cfg, progress=progress, topology=topo)
    summary = {
        "episodes": metrics.episodes, "updates": len(metrics.updates), "mean_cost_ms": metrics.mean_cost_ms,
        "entropy": metrics.entropy, "first_mean_cost_ms": metrics.updates[0].mean_cost_ms if metrics.updates else None,
        "greedy_cost_ms": dict(metrics.greedy_cost_ms),
    }
    card = loaded.card
    new = save_model(
        model_dir, loaded.cost_net, policy,
        configs={**card.configs, "train_policy": cfg.model_dump(mode="json"), "topology": topo.model_dump(mode="json")},
        inventory_name=card.inventory_name, inventory_fingerprint=card.inventory_fingerprint, backend=card.backend,
        cost_metrics=card.cost_metrics, policy_metrics=summary,
        provenance={**card.provenance, "policy_command": "train-policy", "tasks": str(tasks)},
    )
    _write_json(metrics_out, summary)
    return new


def loop_config(params: Path | None) -> LoopConfig:
    base = load_section(params, "train", LoopConfig)
    update: dict[str, Any] = {}
    if params is not None:
        from dreamshard.io import read_structured

        raw = (read_structured(params) or {}).get("train") or {}
        if "cost" not in raw:
            update["cost"] = load_section(params, "train_cost", CostTrainConfig)
        if "policy" not in raw:
            update["policy"] = load_section(params, "train_policy", PolicyTrainConfig)
    return base.model_copy(update=update)


def train_loop_stage(
    inventory: Path, tasks: Path, model_dir: Path, params: Path | None = None, backend: str | None = None,
    memory_gb: float | None = None, measurements: Path | None = None, resume: bool = True, progress: bool = True,
) -> list[Any]:
    """The outer loop on a real (or simulator) backend; see dreamshard.learning.loop.train."""
    from dreamshard.learning.loop import train
    from dreamshard.profiling import ProfileConfig

    pool = load_inventory(inventory)
    taskset = load_taskset(tasks)
    prof = load_section(params, "profile", ProfileConfig)
    if backend:
        prof = ProfileConfig.model_validate({**prof.model_dump(), "backend": backend})
    topo_cfg = load_section(params, "topology", TopologyConfig)
    if memory_gb is not None:
        topo_cfg = TopologyConfig.model_validate({**topo_cfg.model_dump(), "memory_per_device_gb": memory_gb})
    if prof.backend == "cuda":
        topo_cfg = topo_cfg.model_copy(update={"device_type": "cuda"})
    cfg = loop_config(params)
    oracle = prof.oracle()
    try:
        return train(pool, taskset, topo_cfg.topology(max(1, taskset.train[0].num_devices if taskset.train else 1)),
                     oracle, cfg, model_dir, resume=resume, progress=progress, measurements=measurements,
                     backend_name=prof.backend)
    finally:
        oracle.close()
