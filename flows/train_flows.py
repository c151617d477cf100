"""train_cost_flow and train_policy_flow, plus the typed view of params.yaml every flow reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from dreamshard.io import atomic_write_text, load_inventory, load_measurements
from dreamshard.types import TaskSet
from flows.artifacts import metrics_artifact
from flows.requests import StageRequest, TrainRequest


def load_configs(request: StageRequest) -> dict[str, Any]:
    """Typed sections of request.params_path (validated: a bad key fails here, naming the section)."""
    from dreamshard.config import load_section
    from dreamshard.gate import PublishConfig
    from dreamshard.learning import CostTrainConfig, PolicyTrainConfig, TasksConfig, TopologyConfig
    from dreamshard.profiling import ProfileConfig

    path = request.params_path
    raw = request.params()
    profile = load_section(path, "profile", ProfileConfig)
    backend = getattr(request, "backend", None)
    if backend:
        profile = profile.model_copy(update={"backend": backend})
    tasks = load_section(path, "tasks", TasksConfig)
    plan = dict(raw.get("plan") or {})
    plan.setdefault("num_devices", tasks.train_devices)
    return {
        "tasks": tasks,
        "topology": load_section(path, "topology", TopologyConfig),
        "profile": profile,
        "train_cost": load_section(path, "train_cost", CostTrainConfig),
        "train_policy": load_section(path, "train_policy", PolicyTrainConfig),
        "plan": plan,
        "evaluate": dict(raw.get("evaluate") or {}),
        "publish": load_section(path, "publish", PublishConfig),
        "publish_extra": dict(raw.get("publish") or {}),
    }


@task(name="train-cost-model", cache_policy=NO_CACHE)
def train_cost_task(
    inventory_path: str, measurements_path: str, config: Any, model_dir: str, backend: str = ""
) -> dict[str, Any]:
    """Fit the cost network (dreamshard.learning.train_cost.train_cost_model) and save it in model_dir."""
    from dreamshard.learning.model_store import save_model
    from dreamshard.learning.train_cost import train_cost_model

    pool = load_inventory(inventory_path)
    net, metrics = train_cost_model(pool, load_measurements(measurements_path), config, progress=False)
    cost_metrics = metrics.model_dump(mode="json")
    save_model(Path(model_dir), net, None, inventory_name=pool.name, inventory_fingerprint=pool.fingerprint(),
               backend=backend, cost_metrics=cost_metrics, configs={"train_cost": config.model_dump(mode="json")},
               provenance={"command": "flows.train_cost_flow", "measurements": measurements_path})
    return cost_metrics


@task(name="train-policy", cache_policy=NO_CACHE)
def train_policy_task(inventory_path: str, tasks_path: str, config: Any, topology: Any, model_dir: str) -> dict[str, Any]:
    """REINFORCE on the estimated MDP (dreamshard.learning.train_policy.train_policy); saves the policy."""
    from dreamshard.learning.model_store import load_model, save_model
    from dreamshard.learning.train_policy import train_policy

    pool = load_inventory(inventory_path)
    taskset = TaskSet.model_validate_json(Path(tasks_path).read_text())
    loaded = load_model(Path(model_dir), require_policy=False)
    policy, metrics = train_policy(pool, taskset.train, loaded.cost_net, config, progress=False, topology=topology)
    summary = {"episodes": metrics.episodes, "updates": len(metrics.updates), "mean_cost_ms": metrics.mean_cost_ms,
               "greedy_cost_ms": dict(metrics.greedy_cost_ms)}
    card = loaded.card
    save_model(Path(model_dir), loaded.cost_net, policy, inventory_name=card.inventory_name,
               inventory_fingerprint=card.inventory_fingerprint, backend=card.backend,
               cost_metrics=card.cost_metrics, policy_metrics=summary,
               configs={**card.configs, "train_policy": config.model_dump(mode="json")},
               provenance={**card.provenance, "policy": "flows.train_policy_flow"})
    return summary


@flow(name="train-cost", log_prints=True)
def train_cost_flow(request: TrainRequest) -> dict[str, Any]:
    ws = request.workspace
    cfg = load_configs(request)
    metrics = train_cost_task(str(ws.inventory), str(ws.measurements), cfg["train_cost"], str(ws.model_dir),
                              cfg["profile"].backend)
    atomic_write_text(ws.cost_metrics, json.dumps(metrics, indent=2) + "\n")
    metrics_artifact("cost-model-metrics", metrics, load_inventory(ws.inventory).name)
    get_run_logger().info("cost model: %s", metrics)
    return metrics


@flow(name="train-policy", log_prints=True)
def train_policy_flow(request: TrainRequest) -> dict[str, Any]:
    ws = request.workspace
    cfg = load_configs(request)
    metrics = train_policy_task(str(ws.inventory), str(ws.tasks), cfg["train_policy"], cfg["topology"], str(ws.model_dir))
    atomic_write_text(ws.policy_metrics, json.dumps(metrics, indent=2) + "\n")
    metrics_artifact("policy-metrics", metrics, load_inventory(ws.inventory).name)
    get_run_logger().info("policy: %s", metrics)
    return metrics
