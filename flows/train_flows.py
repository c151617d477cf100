"""train_cost_flow and train_policy_flow, plus the typed view of params.yaml every flow reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from dreamshard.io import load_inventory
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
def train_cost_task(inventory_path: str, measurements_path: str, model_dir: str, params_path: str,
                    metrics_out: str) -> dict[str, Any]:
    """Fit the cost network and save it in model_dir (dreamshard.learning.stages.train_cost_stage,
    the function behind `dreamshard train-cost` and the DVC stage)."""
    from dreamshard.learning.stages import train_cost_stage

    card = train_cost_stage(Path(inventory_path), Path(measurements_path), Path(model_dir), Path(params_path),
                            Path(metrics_out), progress=False)
    return dict(card.cost_metrics)


@task(name="train-policy", cache_policy=NO_CACHE)
def train_policy_task(inventory_path: str, tasks_path: str, model_dir: str, params_path: str,
                      metrics_out: str) -> dict[str, Any]:
    """REINFORCE on the estimated MDP with the cost net in model_dir
    (dreamshard.learning.stages.train_policy_stage, behind `dreamshard train-policy`)."""
    from dreamshard.learning.stages import train_policy_stage

    card = train_policy_stage(Path(inventory_path), Path(tasks_path), Path(model_dir), Path(params_path),
                              Path(metrics_out), progress=False)
    return dict(card.policy_metrics)


@flow(name="train-cost", log_prints=True)
def train_cost_flow(request: TrainRequest) -> dict[str, Any]:
    ws = request.workspace
    load_configs(request)  # validate every section before spending time
    metrics = train_cost_task(str(ws.inventory), str(ws.measurements), str(ws.model_dir), request.params_path,
                              str(ws.cost_metrics))
    metrics_artifact("cost-model-metrics", metrics, load_inventory(ws.inventory).name)
    get_run_logger().info("cost model: %s", metrics)
    return metrics


@flow(name="train-policy", log_prints=True)
def train_policy_flow(request: TrainRequest) -> dict[str, Any]:
    ws = request.workspace
    load_configs(request)
    metrics = train_policy_task(str(ws.inventory), str(ws.tasks), str(ws.model_dir), request.params_path,
                                str(ws.policy_metrics))
    metrics_artifact("policy-metrics", metrics, load_inventory(ws.inventory).name)
    get_run_logger().info("policy: %s", metrics)
    return metrics


@flow(name="dvc-repro", log_prints=True)
def dvc_repro_flow(repo: str = ".", targets: list[str] | None = None) -> str:
    """Reproduce the DVC pipeline (or some stages) from Prefect, serialised per workspace."""
    from flows.tasks import dvc_repro_task

    return dvc_repro_task(repo, targets)
