"""The learning stages as plain functions over files: the CLI commands (and DVC stages) call these.

Each reads its params.yaml section(s), runs the library function and writes its outputs atomically.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from dreamshard.config import load_section
from dreamshard.io import atomic_write_text, dump_model, load_inventory, load_measurements
from dreamshard.learning.configs import CostTrainConfig, LoopConfig, PolicyTrainConfig, TasksConfig, TopologyConfig
from dreamshard.learning.model_store import LoadedModel, ModelCard, load_model, save_model
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
    """Fit the cost ensemble on a profile file and save it (no policy) in model_dir."""
    from dreamshard.learning.planning_cost import comm_models_of
    from dreamshard.learning.ranges import ranges_from
    from dreamshard.learning.train_cost import train_cost_model

    pool = load_inventory(inventory)
    cfg = load_section(params, "train_cost", CostTrainConfig)
    records = load_measurements(measurements)
    net, metrics = train_cost_model(pool, records, cfg, progress=progress)
    card = save_model(
        model_dir, net, None,
        configs={"train_cost": cfg.model_dump(mode="json")},
        inventory_name=pool.name, inventory_fingerprint=pool.fingerprint(), backend=_backend_of(records),
        comm_models=comm_models_of(records), feature_ranges=ranges_from(records, pool.by_name()),
        cost_metrics=metrics.model_dump(mode="json"),
        provenance={"command": "train-cost", "n_records": len(records)},
    )
    _write_json(metrics_out, metrics.model_dump(mode="json"))
    return card


def _backend_of(records: list[Any]) -> str:
    return records[-1].backend.name if records else ""


def train_policy_stage(
    inventory: Path, tasks: Path, model_dir: Path, params: Path | None = None,
    metrics_out: Path | None = None, progress: bool = True,
) -> ModelCard:
    """Train the policy on the cost ensemble already in model_dir and save both there."""
    from dreamshard.learning.planning_cost import cost_factory
    from dreamshard.learning.train_policy import train_policy

    pool = load_inventory(inventory)
    taskset = load_taskset(tasks)
    cfg = load_section(params, "train_policy", PolicyTrainConfig)
    topo = load_section(params, "topology", TopologyConfig)
    loaded = load_model(model_dir, require_policy=False)
    costs = cost_factory(loaded.cost_net, loaded.card.comm_models, cfg.risk)
    policy, metrics = train_policy(pool, list(taskset.train), costs, cfg, progress=progress, topology=topo)
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
        comm_models=card.comm_models, feature_ranges=card.feature_ranges,
        cost_metrics=card.cost_metrics, policy_metrics=summary,
        provenance={**card.provenance, "policy_command": "train-policy"},
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


def initial_model(cfg: LoopConfig) -> LoadedModel | None:
    """The model the loop warm-starts from: the packaged pretrained one (train.init: pretrained), checked to
    have the architecture the params ask for; None for train.init: none."""
    from dreamshard.errors import ConfigError
    from dreamshard.learning.cost_model import CostNetSpec

    if cfg.init == "none":
        return None
    model = load_model(None, require_policy=True)
    want = CostNetSpec(hidden=cfg.cost.hidden, latent=cfg.cost.latent, head_hidden=cfg.cost.head_hidden)
    if model.cost_net.spec != want or model.cost_net.size != cfg.cost.ensemble_size:
        raise ConfigError(
            f"train.init is 'pretrained' but the packaged model ({model.card.version}: {model.cost_net.size} x "
            f"{model.cost_net.spec.hidden}/{model.cost_net.spec.latent}/{model.cost_net.spec.head_hidden}) differs from "
            f"train_cost (ensemble_size {cfg.cost.ensemble_size}, hidden {cfg.cost.hidden}, latent {cfg.cost.latent}, "
            f"head_hidden {cfg.cost.head_hidden}); match it or set train.init: none"
        )
    assert model.policy is not None
    pspec = model.policy.spec
    if (pspec.hidden, pspec.latent, pspec.head_hidden) != (cfg.policy.hidden, cfg.policy.latent, cfg.policy.head_hidden):
        raise ConfigError(
            f"train.init is 'pretrained' but the packaged policy ({pspec.hidden}/{pspec.latent}/{pspec.head_hidden}) "
            f"differs from train_policy; match it or set train.init: none"
        )
    return model


class TrainSummary(BaseModel):
    """What `dreamshard train` reports (and writes with --metrics-out)."""

    model_config = ConfigDict(extra="forbid")
    model_version: str
    init: str | None
    iterations_run: list[int]
    measured_now: int
    from_cache: int
    n_measurements: int
    cost: dict[str, Any]
    policy_mean_cost_ms: float | None


def train_loop_stage(
    inventory: Path, tasks: Path, model_dir: Path, params: Path | None = None, backend: str | None = None,
    memory_gb: float | None = None, measurements: Path | None = None, resume: bool = True, progress: bool = True,
    state_dir: Path | None = None, metrics_out: Path | None = None,
) -> tuple[list[Any], TrainSummary]:
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
    init = initial_model(cfg)
    seed = load_measurements(measurements) if measurements is not None else []
    oracle = prof.oracle()
    try:
        results = train(pool, taskset, topo_cfg, oracle, cfg, model_dir, state_dir=state_dir, resume=resume,
                        progress=progress, measurements=seed, init=init, backend_name=prof.backend)
    finally:
        oracle.close()
    card = load_model(model_dir, require_policy=True).card
    summary = TrainSummary(
        model_version=card.version, init=init.card.version if init is not None else None,
        iterations_run=[r.iteration for r in results], measured_now=sum(r.n_measured for r in results),
        from_cache=sum(r.n_new - r.n_measured for r in results),
        n_measurements=int(card.provenance.get("n_measurements", 0)), cost=dict(card.cost_metrics),
        policy_mean_cost_ms=card.policy_metrics.get("mean_cost_ms"),
    )
    _write_json(metrics_out, summary.model_dump(mode="json"))
    return results, summary
