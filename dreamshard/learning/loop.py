"""The outer DreamShard loop, as production trains (docs/architecture/learning.md, "Learning"):

    for each iteration:  measure where the planners go on the real backend -- sampled rollouts of the current
    policy, the search planner's best plan, small perturbations of the best measured plans (iteration 0
    without a policy: random placements) -- ->  refit the cost ensemble warm on every record so far  ->
    REINFORCE on the estimated MDP

with linear LR decay over iterations. The model may start from the packaged pretrained one (`init`).

The final model goes to `model_dir` (cost_net.pt, policy.pt, model.json: byte-deterministic given the same
inputs); what a run needs to resume lives in its state dir (dreamshard.learning.loop_state). Measurements are a
cache: an iteration re-planned after a kill, or a whole run reproduced from a pulled state dir, finds its
placements already measured and measures nothing again. Seeded throughout.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from dreamshard.config.learning import LoopConfig, TopologyConfig
from dreamshard.documents import append_measurement, atomic_write_text
from dreamshard.errors import ConfigError
from dreamshard.learning.cost_eval import CostMetrics
from dreamshard.learning.cost_model import CostEnsemble
from dreamshard.learning.loop_planner import IterationPlanner, Searcher
from dreamshard.learning.loop_state import (
    DEFAULT_STATE_DIR,
    MEASUREMENTS_FILE,
    STATE_FILE,
    IterationMetrics,
    LoopState,
    append_metrics,
    checkpoint_dir,
    forget_checkpoints,
    inputs_fingerprint,
    last_checkpoint,
    load_cache,
    restore,
    task_signature,
)
from dreamshard.learning.model_store import LoadedModel, check_model_dir, load_model, save_model
from dreamshard.learning.planning_cost import comm_models_of
from dreamshard.learning.policy import Policy
from dreamshard.learning.ranges import ranges_from
from dreamshard.learning.records import check_training_records
from dreamshard.learning.train_cost import train_cost_model
from dreamshard.learning.train_policy import PolicyMetrics, train_policy
from dreamshard.profiling.runner import item_key
from dreamshard.values import BackendInfo, Inventory, Measurement, MeasurementKind, Task, TaskSet, Topology
from dreamshard.values.progress import Progress, prefixed

__all__ = [  # the state dir's names are re-exported: callers import them from here
    "DEFAULT_STATE_DIR",
    "MEASUREMENTS_FILE",
    "IterationMetrics",
    "OracleLike",
    "last_checkpoint",
    "train",
]


class OracleLike(Protocol):
    """What the loop needs from a measuring backend (dreamshard.profiling.oracle.Oracle is one)."""

    @property
    def info(self) -> BackendInfo: ...

    def measure(
        self,
        inventory: Inventory,
        placement: dict[str, int],
        topology: Topology,
        *,
        kind: MeasurementKind = ...,
        task: str = ...,
        measurement_id: str | None = ...,
    ) -> Measurement: ...


def train(
    pool: Inventory,
    taskset: TaskSet,
    topology_template: Topology | TopologyConfig,
    oracle: OracleLike,
    config: LoopConfig,
    model_dir: Path,
    state_dir: Path | None = None,
    resume: bool = True,
    progress: bool = True,
    measurements: Sequence[Measurement] = (),
    init: LoadedModel | None = None,
    backend_name: str = "",
    batch_sizes: Mapping[str, int] | None = None,
    previous_tasks: Mapping[str, str] | None = None,
    *,
    searcher: Searcher,
    report: Progress | None = None,
) -> list[IterationMetrics]:
    """Run (or resume) the outer loop; returns the metrics of the iterations run now. `searcher` is where the
    search planner goes on a task (dreamshard.search.candidates.best_placement). `measurements` are the
    records to start from (e.g. the profile stage's), `init` a model to warm-start from, `batch_sizes` each
    task's own batch size by name (pre-training; default: the template's for every task). `previous_tasks` (an
    incremental retrain: the task signatures `init` was trained on) limits what the loop measures to the tasks
    whose content differs, plus `config.refresh_tasks` others; the policy still trains on every task. `report` gets
    a line per measured placement, cost step (with its loss) and policy update, each prefixed with the iteration."""
    model_dir = Path(model_dir)
    state_dir = Path(state_dir) if state_dir is not None else model_dir / DEFAULT_STATE_DIR
    tasks = _train_tasks(pool, taskset)
    template = (
        topology_template if isinstance(topology_template, TopologyConfig) else TopologyConfig.of(topology_template)
    )
    backend = backend_name or oracle.info.name
    seed_records = check_training_records(measurements, pool)  # training data is checked like input
    check_model_dir(model_dir)
    check_model_dir(state_dir, "state directory")
    inputs = inputs_fingerprint(
        pool, taskset, [m.measurement_id for m in seed_records], config, backend, init, batch_sizes
    )
    cache = _open_dirs(state_dir, model_dir, resume, pool.fingerprint())
    comm_models = comm_models_of(seed_records, init.card.comm_models if init is not None else ())
    comm_models = comm_models_of(list(cache.values()), comm_models)
    signatures = {t.name: task_signature(pool, t) for t in tasks}
    measured_tasks = _measured_tasks(tasks, signatures, previous_tasks, config)
    run = _LoopRun(
        pool=pool,
        fingerprint=pool.fingerprint(),
        tasks=tasks,
        template=template,
        oracle=oracle,
        config=config,
        backend=backend,
        model_dir=model_dir,
        state_dir=state_dir,
        inputs=inputs,
        seed_records=seed_records,
        cache=cache,
        signatures=signatures,
        init=init,
        progress=progress,
        planner=IterationPlanner(pool, measured_tasks, template, config, comm_models, searcher, batch_sizes),
        report=report,
    )
    start = run.resume()
    results = [run.iteration(it) for it in range(start, config.iterations)]
    if not results and start > 0:  # nothing left to run: the model dir holds the last checkpoint's model
        restore(checkpoint_dir(state_dir, start - 1), model_dir)
    return results


def _train_tasks(pool: Inventory, taskset: TaskSet) -> list[Task]:
    """The task set's training tasks, refused when there are none or the set was made from another pool."""
    tasks = list(taskset.train)
    if not tasks:
        raise ConfigError("task set has no training tasks")
    if taskset.pool_fingerprint != pool.fingerprint():
        raise ConfigError(
            f"task set was made from pool '{taskset.pool_name}' with another fingerprint; rerun `dreamshard tasks`"
        )
    return tasks


def _open_dirs(state_dir: Path, model_dir: Path, resume: bool, fingerprint: str) -> dict[str, Measurement]:
    """Create the directories (a fresh state dir unless `resume`); the measurement cache of this pool."""
    if not resume and state_dir.exists():
        shutil.rmtree(state_dir)
    state_dir.mkdir(parents=True, exist_ok=True)
    model_dir.mkdir(parents=True, exist_ok=True)
    return load_cache(state_dir / MEASUREMENTS_FILE, fingerprint)


def _measured_tasks(
    tasks: Sequence[Task], signatures: Mapping[str, str], previous: Mapping[str, str] | None, config: LoopConfig
) -> list[Task]:
    """Every task; or, incremental, the changed ones and `refresh_tasks` unchanged ones (seeded)."""
    if previous is None:
        return list(tasks)
    changed = [t for t in tasks if previous.get(t.name) != signatures[t.name]]
    same = [t for t in tasks if previous.get(t.name) == signatures[t.name]]
    rng = np.random.default_rng([config.seed, 7])
    refresh = [same[int(i)] for i in sorted(rng.permutation(len(same))[: config.refresh_tasks])]
    return changed + refresh or list(tasks)


@dataclass
class _LoopRun:
    """One call of `train`: its checked inputs and files, and the model carried from one iteration to the next."""

    pool: Inventory
    fingerprint: str  # the pool's
    tasks: list[Task]
    template: TopologyConfig
    oracle: OracleLike
    config: LoopConfig
    backend: str
    model_dir: Path
    state_dir: Path
    inputs: str  # inputs_fingerprint: what a checkpoint must have been made from to be resumed
    seed_records: list[Measurement]
    cache: dict[str, Measurement]  # every placement measured so far, by id
    signatures: dict[str, str]  # task_signature of each train task
    init: LoadedModel | None
    progress: bool
    planner: IterationPlanner
    report: Progress | None = None  # the progress hook (dreamshard.values.progress)
    ensemble: CostEnsemble | None = None
    policy: Policy | None = None
    loop_ids: list[str] = field(default_factory=list)  # the loop records used so far, in order

    def resume(self) -> int:
        """Start from `init`, or from the last checkpoint made from the same inputs; the first iteration to run.
        A checkpoint made from other inputs is dropped (the measurement cache stays)."""
        if self.init is not None:
            self.ensemble, self.policy = self.init.cost_net, self.init.policy
        ckpt = last_checkpoint(self.state_dir)
        if ckpt is None:
            return 0
        i, d = ckpt
        state = LoopState.model_validate_json((d / STATE_FILE).read_text())
        if state.inputs != self.inputs or not all(x in self.cache for x in state.loop_ids):
            forget_checkpoints(self.state_dir)
            return 0
        loaded = load_model(d, require_policy=True)
        self.ensemble, self.policy, self.loop_ids = loaded.cost_net, loaded.policy, list(state.loop_ids)
        return i + 1

    def records(self) -> list[Measurement]:
        """What the cost ensemble fits on: the seed records and the loop's records so far."""
        return self.seed_records + [self.cache[x] for x in self.loop_ids]

    def iteration(self, it: int) -> IterationMetrics:
        """Measure where the planners go, refit the cost ensemble and the policy, save the model."""
        say = prefixed(self.report, f"iteration {it + 1}/{self.config.iterations}: ")
        if say is not None:
            say("planning the placements to measure")
        planned = self.planner.plan(it, self.ensemble, self.policy, self.records())
        new, measured_now = self.measure(planned, say)
        records = self.records()
        self.planner.comm_models = comm_models_of(new, self.planner.comm_models)
        lr = self.config.lr_factor(it)
        cost_cfg = self.config.cost.model_copy(update={"seed": self.config.cost.seed + it})
        ensemble, cost_metrics = train_cost_model(
            self.pool, records, cost_cfg, init=self.ensemble, progress=self.progress, lr_factor=lr, report=say
        )
        policy, pol_metrics = self.fit_policy(it, ensemble, say)
        self.ensemble, self.policy = ensemble, policy
        self.save(it, ensemble, policy, self.card_fields(it, records, cost_metrics, pol_metrics))
        metrics = IterationMetrics(
            iteration=it,
            lr_factor=lr,
            n_measurements=len(records),
            n_new=len(planned),
            n_measured=measured_now,
            n_tasks=len(self.planner.tasks),
            measured_mean_ms=float(np.mean([m.overall_ms for m in new])) if new else None,
            cost=cost_metrics,
            policy_mean_cost_ms=pol_metrics.mean_cost_ms,
            policy_entropy=pol_metrics.entropy,
        )
        append_metrics(self.state_dir, metrics)
        return metrics

    def measure(
        self, planned: Sequence[tuple[Task, dict[str, int]]], say: Progress | None = None
    ) -> tuple[list[Measurement], int]:
        """Measure the planned placements the cache lacks; the records new to this run, and how many of them
        were measured now (the rest came from the cache). `say` gets a line per placement measured."""
        fingerprint = self.fingerprint
        new: list[Measurement] = []
        measured_now = 0
        for i, (task, placement) in enumerate(planned):
            topology = self.planner.topology(task)
            key = item_key("placement", task.name, fingerprint, topology, placement, self.backend)
            if key not in self.cache:
                inventory = self.pool.subset(list(task.tables), name=task.name)
                m = self.oracle.measure(
                    inventory, placement, topology, kind="placement", task=task.name, measurement_id=key
                )
                m = m.model_copy(update={"inventory_name": self.pool.name, "inventory_fingerprint": fingerprint})
                append_measurement(self.state_dir / MEASUREMENTS_FILE, m)
                self.cache[key] = m
                measured_now += 1
                if say is not None:
                    say(f"measured placement {i + 1}/{len(planned)} (task {task.name}): {m.overall_ms:.4g} ms")
            if key not in self.loop_ids:
                self.loop_ids.append(key)
                new.append(self.cache[key])
        return new, measured_now

    def fit_policy(self, it: int, ensemble: CostEnsemble, say: Progress | None = None) -> tuple[Policy, PolicyMetrics]:
        """REINFORCE on every train task under the freshly fit cost ensemble (`say`: a line per update)."""
        pol_cfg = self.config.policy.model_copy(update={"seed": self.config.policy.seed + it})
        return train_policy(
            self.pool,
            self.tasks,
            self.planner.cost_factory(ensemble),
            pol_cfg,
            init=self.policy,
            progress=self.progress,
            topology=self.template,
            lr_factor=self.config.lr_factor(it),
            batch_sizes=self.planner.batch_sizes,
            report=say,
        )

    def card_fields(
        self, it: int, records: Sequence[Measurement], cost_metrics: CostMetrics, pol_metrics: PolicyMetrics
    ) -> dict[str, Any]:
        """The model card of iteration `it`, besides what `save_model` derives from the weights."""
        ranges = ranges_from(records, self.pool.by_name())
        init_ranges = self.init.card.ranges if self.init is not None else None  # an old card: device type = backend
        if init_ranges is not None:
            ranges = ranges.merge(init_ranges)
        return dict(
            configs={"train": self.config.model_dump(mode="json")},
            inventory_name=self.pool.name,
            inventory_fingerprint=self.fingerprint,
            backend=self.backend,
            comm_models=self.planner.comm_models,
            feature_ranges=ranges,
            cost_metrics=cost_metrics.model_dump(mode="json"),
            policy_metrics={"mean_cost_ms": pol_metrics.mean_cost_ms, "entropy": pol_metrics.entropy},
            provenance={
                "command": "train",
                "iteration": it,
                "iterations": self.config.iterations,
                "n_measurements": len(records),
                "init": self.init.card.version if self.init is not None else None,
            },
        )

    def save(self, it: int, ensemble: CostEnsemble, policy: Policy, card_fields: dict[str, Any]) -> None:
        """The checkpoint of iteration `it` (model and state), then the model in `model_dir`."""
        ck = checkpoint_dir(self.state_dir, it)
        card = save_model(ck, ensemble, policy, **card_fields)
        state = LoopState(
            iteration=it,
            inputs=self.inputs,
            loop_ids=self.loop_ids,
            model_version=card.version,
            pool=self.fingerprint,
            tasks=self.signatures,
        )
        atomic_write_text(ck / STATE_FILE, state.model_dump_json() + "\n")
        save_model(self.model_dir, ensemble, policy, **card_fields)
