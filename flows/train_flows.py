"""train_cost_flow and train_policy_flow, plus the typed view of params.yaml every flow reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from dreamshard.io import load_inventory
from dreamshard.pipeline_config import PipelineConfig, load_pipeline_config
from flows.artifacts import metrics_artifact
from flows.requests import StageRequest, TrainRequest


def load_configs(request: StageRequest) -> PipelineConfig:
    """Typed, validated params.yaml of a request (a bad key fails here, naming the section)."""
    return load_pipeline_config(request.params_path, backend=getattr(request, "backend", None))


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
