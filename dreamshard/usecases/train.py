"""Training: the cost ensemble alone (`train-cost`), the policy on it (`train-policy`), the outer loop (`train`,
the DVC stage) and pre-training (`pretrain`). Sections: train_cost, train_policy, train (its cost/policy filled in
by dreamshard.config.settings), topology, profile, pretrain."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from dreamshard.config.learning import LoopConfig
from dreamshard.documents import atomic_write_text, load_measurements
from dreamshard.errors import ConfigError
from dreamshard.learning.cost_model import CostNetSpec
from dreamshard.learning.incremental import WarmStart, previous_model
from dreamshard.learning.loop import DEFAULT_STATE_DIR, IterationMetrics, train
from dreamshard.learning.model_store import LoadedModel, ModelCard, check_model_dir, load_card, load_model, save_model
from dreamshard.learning.planning_cost import comm_models_of, cost_factory
from dreamshard.learning.pretrain import pretrain
from dreamshard.learning.ranges import ranges_from
from dreamshard.learning.records import check_training_records
from dreamshard.learning.taskset import load_taskset
from dreamshard.learning.train_cost import train_cost_model
from dreamshard.learning.train_policy import train_policy
from dreamshard.profiling.corpus import DeviceCorpus
from dreamshard.search.candidates import best_placement
from dreamshard.usecases.base import Request, Result
from dreamshard.values import Inventory
from dreamshard.values.progress import Progress

CORPUS_WRITER = "loop"  # this use case's file in the corpus directory


def _write_json(path: Path | None, data: Any) -> None:
    if path is not None:
        atomic_write_text(path, json.dumps(data, indent=2) + "\n")


class CostRequest(Request):
    inventory: Inventory
    measurements: Path
    model_dir: Path
    metrics_out: Path | None = None
    progress: bool = False
    report: Progress | None = Field(default=None, exclude=True)  # the progress hook: a line per step


class CardResult(Result):
    card: ModelCard


def run_cost(request: CostRequest) -> CardResult:
    """Fit the cost ensemble on a profile file and save it (no policy) in model_dir (the door checked that no
    output is an input)."""
    check_model_dir(request.model_dir)
    pool = request.inventory
    cfg = request.settings.train_cost
    records = check_training_records(load_measurements(request.measurements), pool, str(request.measurements))
    net, metrics = train_cost_model(pool, records, cfg, progress=request.progress, report=request.report)
    card = save_model(
        request.model_dir,
        net,
        None,
        configs={"train_cost": cfg.model_dump(mode="json")},
        inventory_name=pool.name,
        inventory_fingerprint=pool.fingerprint(),
        backend=records[-1].backend.name if records else "",
        comm_models=comm_models_of(records),
        feature_ranges=ranges_from(records, pool.by_name()),
        cost_metrics=metrics.model_dump(mode="json"),
        provenance={"command": "train-cost", "n_records": len(records)},
    )
    _write_json(request.metrics_out, metrics.model_dump(mode="json"))
    return CardResult(card=card)


class PolicyRequest(Request):
    inventory: Inventory
    tasks: Path
    model_dir: Path
    metrics_out: Path | None = None
    progress: bool = False
    report: Progress | None = Field(default=None, exclude=True)  # the progress hook: a line per step


def run_policy(request: PolicyRequest) -> CardResult:
    """Train the policy on the cost ensemble already in model_dir and save both there (the door checked that no
    output is an input)."""
    s = request.settings
    pool = request.inventory
    taskset = load_taskset(request.tasks)
    cfg, topo = s.train_policy, s.template
    loaded = load_model(request.model_dir, require_policy=False)
    costs = cost_factory(loaded.cost_net, loaded.card.comm_models, cfg.risk)
    policy, metrics = train_policy(
        pool, list(taskset.train), costs, cfg, progress=request.progress, topology=topo, report=request.report
    )
    summary = {
        "episodes": metrics.episodes,
        "updates": len(metrics.updates),
        "mean_cost_ms": metrics.mean_cost_ms,
        "entropy": metrics.entropy,
        "first_mean_cost_ms": metrics.updates[0].mean_cost_ms if metrics.updates else None,
        "greedy_cost_ms": dict(metrics.greedy_cost_ms),
    }
    card = loaded.card
    new = save_model(
        request.model_dir,
        loaded.cost_net,
        policy,
        configs={**card.configs, "train_policy": cfg.model_dump(mode="json"), "topology": topo.model_dump(mode="json")},
        inventory_name=card.inventory_name,
        inventory_fingerprint=card.inventory_fingerprint,
        backend=card.backend,
        comm_models=card.comm_models,
        feature_ranges=card.feature_ranges,
        cost_metrics=card.cost_metrics,
        policy_metrics=summary,
        provenance={**card.provenance, "policy_command": "train-policy"},
    )
    _write_json(request.metrics_out, summary)
    return CardResult(card=new)


def _check_architecture(model: LoadedModel, cfg: LoopConfig, what: str) -> None:
    """`model` has the architecture the settings ask for (a typed error naming the difference otherwise)."""
    want = CostNetSpec(hidden=cfg.cost.hidden, latent=cfg.cost.latent, head_hidden=cfg.cost.head_hidden)
    if model.cost_net.spec != want or model.cost_net.size != cfg.cost.ensemble_size:
        raise ConfigError(
            f"{what} ({model.card.version}: {model.cost_net.size} x {model.cost_net.spec.hidden}/"
            f"{model.cost_net.spec.latent}/{model.cost_net.spec.head_hidden}) differs from train_cost (ensemble_size "
            f"{cfg.cost.ensemble_size}, hidden {cfg.cost.hidden}, latent {cfg.cost.latent}, head_hidden "
            f"{cfg.cost.head_hidden}); match it or set train.init: none"
        )
    assert model.policy is not None
    pspec = model.policy.spec
    if (pspec.hidden, pspec.latent, pspec.head_hidden) != (
        cfg.policy.hidden,
        cfg.policy.latent,
        cfg.policy.head_hidden,
    ):
        raise ConfigError(
            f"{what}: its policy ({pspec.hidden}/{pspec.latent}/{pspec.head_hidden}) differs from "
            f"train_policy; match it or set train.init: none"
        )


def initial_model(cfg: LoopConfig) -> LoadedModel | None:
    """The packaged pretrained model the loop warm-starts from (train.init: pretrained, or previous without a
    previous model), checked to have the architecture the settings ask for; None for train.init: none."""
    if cfg.init == "none":
        return None
    model = load_model(None, require_policy=True)
    _check_architecture(model, cfg, "train.init asks for the packaged model, but it")
    return model


def warm_start(cfg: LoopConfig, state_dir: Path, pool: Inventory) -> tuple[LoadedModel | None, WarmStart | None]:
    """(init model, the previous version's warm start when the loop runs incrementally)."""
    if cfg.init == "previous":
        prev = previous_model(state_dir, pool)
        if prev is not None:
            try:
                _check_architecture(prev.model, cfg, "the previous version's model")
                return prev.model, prev
            except ConfigError:
                pass  # the settings changed the architecture: a full retrain from the packaged model
    return initial_model(cfg), None


class TrainSummary(BaseModel):
    """What `dreamshard train` reports (and writes with --metrics-out)."""

    model_config = ConfigDict(extra="forbid")
    model_version: str
    init: str | None
    incremental: bool = False  # warm-started from the previous version's model, measuring the changed tasks
    tasks_measured: int | None = None  # train tasks the loop measured on (all of them when not incremental)
    iterations_run: list[int]
    measured_now: int
    from_cache: int
    device_timings_measured: int | None = None  # with a corpus: fused-operator timings run now / reused
    device_timings_reused: int | None = None
    n_measurements: int
    cost: dict[str, Any]
    policy_mean_cost_ms: float | None


class TrainRequest(Request):
    inventory: Inventory
    tasks: Path
    model_dir: Path
    measurements: Path | None = None  # start from these profile records (the profile stage's)
    state_dir: Path | None = None
    metrics_out: Path | None = None
    resume: bool = True
    progress: bool = False
    corpus: Path | None = None  # the measurement corpus (device timings reused and added)
    report: Progress | None = Field(default=None, exclude=True)  # the progress hook: a line per step


class TrainResult(Result):
    iterations: list[IterationMetrics]
    summary: TrainSummary
    simulated: bool = False


def _summary(
    model_dir: Path, results: list[IterationMetrics], init: str | None, prev: WarmStart | None, corpus: dict[str, int]
) -> TrainSummary:
    """What the loop did and the model it left in `model_dir` (`init`: the version it was warm-started from;
    `prev`: the previous version's model when the run was incremental)."""
    card = load_model(model_dir, require_policy=True).card
    return TrainSummary(
        model_version=card.version,
        init=init,
        incremental=prev is not None,
        tasks_measured=results[0].n_tasks if results else None,
        device_timings_measured=corpus.get("device_timings_measured"),
        device_timings_reused=corpus.get("device_timings_reused"),
        iterations_run=[r.iteration for r in results],
        measured_now=sum(r.n_measured for r in results),
        from_cache=sum(r.n_new - r.n_measured for r in results),
        n_measurements=int(card.provenance.get("n_measurements", 0)),
        cost=dict(card.cost_metrics),
        policy_mean_cost_ms=card.policy_metrics.get("mean_cost_ms"),
    )


def run(request: TrainRequest) -> TrainResult:
    """The outer loop on the backend of the profile section (see dreamshard.learning.loop.train); the door checked
    that no output is an input."""
    s = request.settings
    pool = request.inventory
    taskset = load_taskset(request.tasks)
    check_model_dir(request.model_dir)
    seed = (
        check_training_records(load_measurements(request.measurements), pool, str(request.measurements))
        if request.measurements is not None
        else []
    )
    topo_cfg = s.template
    if s.profile.backend == "cuda":  # measured on GPUs: the devices planned for are GPUs
        topo_cfg = topo_cfg.model_copy(update={"device_type": "cuda"})
    state_dir = request.state_dir if request.state_dir is not None else request.model_dir / DEFAULT_STATE_DIR
    check_model_dir(state_dir, "state directory")  # before the previous model is looked for in it
    init, prev = warm_start(s.train, state_dir, pool) if request.resume else (initial_model(s.train), None)
    config = s.train.incremental() if prev else s.train
    oracle = s.oracle()
    oracle.corpus = DeviceCorpus(request.corpus, CORPUS_WRITER) if request.corpus is not None else None
    try:
        results = train(
            pool,
            taskset,
            topo_cfg,
            oracle,
            config,
            request.model_dir,
            state_dir=state_dir,
            resume=request.resume,
            progress=request.progress,
            measurements=seed,
            init=init,
            backend_name=s.profile.backend,
            previous_tasks=prev.tasks if prev else None,
            searcher=best_placement,
            report=request.report,
        )
    finally:
        oracle.close()
    corpus = oracle.corpus.stats() if oracle.corpus is not None else {}
    summary = _summary(request.model_dir, results, init.card.version if init is not None else None, prev, corpus)
    _write_json(request.metrics_out, summary.model_dump(mode="json"))
    return TrainResult(
        iterations=list(results), summary=summary, simulated=load_card(request.model_dir).backend == "simulator"
    )


class PretrainRequest(Request):
    out: Path
    state_dir: Path
    resume: bool = True
    progress: bool = False
    report: Progress | None = Field(default=None, exclude=True)  # the progress hook: a line per step


class PretrainResult(Result):
    summary: dict[str, Any]


def run_pretrain(request: PretrainRequest) -> PretrainResult:
    """Pre-train on tasks from the wide table generator (the `pretrain` section), measured on the profile backend."""
    oracle = request.settings.oracle()
    try:
        summary = pretrain(
            request.settings.pretrain,
            request.out,
            request.state_dir,
            oracle,
            best_placement,
            progress=request.progress,
            resume=request.resume,
            report=request.report,
        )
    finally:
        oracle.close()
    return PretrainResult(summary=summary)
