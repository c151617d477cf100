"""The outer DreamShard loop, as production trains (docs/architecture.md, "Learning"):

    for each iteration:  measure where the planners go on the real backend -- sampled rollouts of the current
    policy, the search planner's best plan, small perturbations of the best measured plans (iteration 0
    without a policy: random placements) -- ->  refit the cost ensemble warm on every record so far  ->
    REINFORCE on the estimated MDP

with linear LR decay over iterations. The model may start from the packaged pretrained one (`init`).

Files: the final model goes to `model_dir` (only cost_net.pt, policy.pt, model.json: byte-deterministic given
the same inputs); everything needed to resume lives in `state_dir`: `checkpoints/iter-N/` (model + state.json),
`loop_measurements.jsonl` (every placement the loop measured, keyed by a deterministic id) and `metrics.json`.
Measurements are a cache: an iteration re-planned after a kill, or a whole run reproduced from a pulled
state dir, finds its placements already measured and measures nothing again. A checkpoint is used only if it
was made from the same inputs (pool, tasks, seed records, config, initial model); otherwise training starts
over (the measurement cache stays). Seeded throughout.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict

from dreamshard.config.learning import LoopConfig, TopologyConfig
from dreamshard.documents import append_measurement, atomic_write_text, iter_measurements
from dreamshard.errors import ConfigError
from dreamshard.learning.cost_eval import CostMetrics
from dreamshard.learning.cost_model import CostEnsemble
from dreamshard.learning.loop_planner import Planner
from dreamshard.learning.model_store import (
    CARD_FILE,
    COST_FILE,
    POLICY_FILE,
    LoadedModel,
    check_model_dir,
    load_model,
    save_model,
)
from dreamshard.learning.planning_cost import comm_models_of
from dreamshard.learning.policy import Policy
from dreamshard.learning.ranges import ranges_from
from dreamshard.learning.records import check_training_records
from dreamshard.learning.train_cost import train_cost_model
from dreamshard.learning.train_policy import train_policy
from dreamshard.profiling.runner import item_key
from dreamshard.values import Inventory, Measurement, Task, TaskSet, Topology

MEASUREMENTS_FILE = "loop_measurements.jsonl"
METRICS_FILE = "metrics.json"
CHECKPOINTS_DIR = "checkpoints"
STATE_FILE = "state.json"
#: state dir used when none is given: inside the model dir
DEFAULT_STATE_DIR = "train-state"


class OracleLike(Protocol):
    info: Any

    def measure(
        self,
        inventory: Inventory,
        placement: dict[str, int],
        topology: Topology,
        *,
        kind: str = ...,
        task: str = ...,
        measurement_id: str | None = ...,
    ) -> Measurement: ...


class IterationMetrics(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    iteration: int
    lr_factor: float
    n_measurements: int  # records the cost ensemble was fit on (seed records + loop records so far)
    n_new: int  # placements planned this iteration
    n_measured: int  # of which measured now (the rest came from the measurement cache)
    n_tasks: int = 0  # train tasks measured on (fewer than all in an incremental retrain)
    measured_mean_ms: float | None  # mean measured overall cost of this iteration's placements
    cost: CostMetrics
    policy_mean_cost_ms: float | None
    policy_entropy: float | None


class LoopState(BaseModel):
    model_config = ConfigDict(extra="forbid")
    iteration: int
    inputs: str  # fingerprint of what the run was started from
    loop_ids: list[str]  # loop records used so far, in order
    model_version: str
    pool: str = ""  # the pool's fingerprint, and each train task's content (task_signature): what an incremental
    tasks: dict[str, str] = {}  # retrain compares with (dreamshard.learning.incremental)


def task_signature(pool: Inventory, task: Task) -> str:
    """A train task's content: its device count and its tables' canonical content (any change of either is a
    change of the task)."""
    by_name = pool.by_name()
    rows = sorted(by_name[n].canonical_json() for n in task.tables)
    return hashlib.sha256(json.dumps([task.num_devices, rows]).encode()).hexdigest()[:16]


def _checkpoint_dir(state_dir: Path, i: int) -> Path:
    return state_dir / CHECKPOINTS_DIR / f"iter-{i}"


def last_checkpoint(state_dir: Path) -> tuple[int, Path] | None:
    root = Path(state_dir) / CHECKPOINTS_DIR
    if not root.is_dir():
        return None
    done = []
    for d in root.iterdir():
        if d.name.startswith("iter-") and (d / STATE_FILE).is_file():
            try:
                done.append((int(d.name.removeprefix("iter-")), d))
            except ValueError:
                continue
    return max(done) if done else None


def inputs_fingerprint(
    pool: Inventory,
    taskset: TaskSet,
    seed_ids: Sequence[str],
    config: LoopConfig,
    backend: str,
    init: LoadedModel | None,
    batch_sizes: Mapping[str, int] | None = None,
) -> str:
    """What a checkpoint must have been made from to be resumed. `iterations` is left out: iteration i trains
    with the same learning rate whatever the total (lr_factor(0) = 1), so a run can be extended."""
    inputs: dict[str, Any] = {
        "pool": pool.fingerprint(),
        "tasks": taskset.model_dump(mode="json"),
        "seed": list(seed_ids),
        "config": config.model_dump(mode="json", exclude={"iterations"}),
        "backend": backend,
        "init": init.card.version if init else None,
    }
    if batch_sizes:  # only when given, so a run without per-task batch sizes keeps its fingerprint
        inputs["batch_sizes"] = {k: int(v) for k, v in batch_sizes.items()}
    payload = json.dumps(inputs, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


def _item_key(task: Task, fingerprint: str, topology: Topology, placement: dict[str, int], backend: str) -> str:
    return item_key("placement", task.name, fingerprint, topology, placement, backend)


def _append_metrics(state_dir: Path, m: IterationMetrics) -> None:
    path = state_dir / METRICS_FILE
    rows: list[Any] = []
    if path.is_file():
        try:
            rows = json.loads(path.read_text())
        except json.JSONDecodeError:
            rows = []
    rows = [r for r in rows if r.get("iteration") != m.iteration] + [m.model_dump(mode="json")]
    atomic_write_text(path, json.dumps(rows, indent=2) + "\n")


def _load_cache(path: Path, fingerprint: str) -> dict[str, Measurement]:
    """Measured loop placements by id (records of another pool are dropped from the file)."""
    if not path.exists():
        return {}
    kept: dict[str, Measurement] = {}
    stale = False
    for m in iter_measurements(path):
        if m.measurement_id.startswith("placement-") and m.inventory_fingerprint == fingerprint:
            kept[m.measurement_id] = m
        else:
            stale = True
    if stale:
        atomic_write_text(path, "".join(m.model_dump_json() + "\n" for m in kept.values()))
    return kept


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
) -> list[IterationMetrics]:
    """Run (or resume) the outer loop; returns the metrics of the iterations run now. `measurements` are the
    records to start from (e.g. the profile stage's), `init` a model to warm-start from, `batch_sizes` each
    task's own batch size by name (pre-training; default: the template's for every task). `previous_tasks` (an
    incremental retrain: the task signatures `init` was trained on) limits what the loop measures to the tasks
    whose content differs, plus `config.refresh_tasks` others; the policy still trains on every task."""
    model_dir = Path(model_dir)
    state_dir = Path(state_dir) if state_dir is not None else model_dir / DEFAULT_STATE_DIR
    tasks = list(taskset.train)
    if not tasks:
        raise ConfigError("task set has no training tasks")
    if taskset.pool_fingerprint != pool.fingerprint():
        raise ConfigError(
            f"task set was made from pool '{taskset.pool_name}' with another fingerprint; rerun `dreamshard tasks`"
        )
    template = (
        topology_template if isinstance(topology_template, TopologyConfig) else TopologyConfig.of(topology_template)
    )
    backend = backend_name or str(getattr(oracle.info, "name", ""))
    fp = pool.fingerprint()
    seed_records = check_training_records(measurements, pool)  # training data is checked like input
    check_model_dir(model_dir)
    check_model_dir(state_dir, "state directory")
    inputs = inputs_fingerprint(
        pool, taskset, [m.measurement_id for m in seed_records], config, backend, init, batch_sizes
    )
    meas_path = state_dir / MEASUREMENTS_FILE
    if not resume and state_dir.exists():
        shutil.rmtree(state_dir)
    state_dir.mkdir(parents=True, exist_ok=True)
    model_dir.mkdir(parents=True, exist_ok=True)
    cache = _load_cache(meas_path, fp)

    start = 0
    ensemble: CostEnsemble | None = init.cost_net if init is not None else None
    policy: Policy | None = init.policy if init is not None else None
    loop_ids: list[str] = []
    ckpt = last_checkpoint(state_dir)
    if ckpt is not None:
        i, d = ckpt
        state = LoopState.model_validate_json((d / STATE_FILE).read_text())
        if state.inputs == inputs and all(x in cache for x in state.loop_ids):
            loaded = load_model(d, require_policy=True)
            ensemble, policy, loop_ids, start = loaded.cost_net, loaded.policy, list(state.loop_ids), i + 1
        else:  # made from other inputs: start over, keep the measurement cache
            shutil.rmtree(state_dir / CHECKPOINTS_DIR)
            (state_dir / METRICS_FILE).unlink(missing_ok=True)

    comm_models = comm_models_of(seed_records, init.card.comm_models if init is not None else ())
    comm_models = comm_models_of(cache.values(), comm_models)
    signatures = {t.name: task_signature(pool, t) for t in tasks}
    planner = Planner(
        pool, _measured_tasks(tasks, signatures, previous_tasks, config), template, config, comm_models, batch_sizes
    )
    results: list[IterationMetrics] = []
    for it in range(start, config.iterations):
        lr = config.lr_factor(it)
        records = seed_records + [cache[x] for x in loop_ids]
        planned = planner.plan(it, ensemble, policy, records)
        new: list[Measurement] = []
        measured_now = 0
        for task, placement in planned:
            topo = planner.topology(task)
            key = _item_key(task, fp, topo, placement, backend)
            if key not in cache:
                inv = pool.subset(list(task.tables), name=task.name)
                m = oracle.measure(inv, placement, topo, kind="placement", task=task.name, measurement_id=key)
                m = m.model_copy(update={"inventory_name": pool.name, "inventory_fingerprint": fp})
                append_measurement(meas_path, m)
                cache[key] = m
                measured_now += 1
            if key not in loop_ids:
                loop_ids.append(key)
                new.append(cache[key])
        records = seed_records + [cache[x] for x in loop_ids]
        planner.comm_models = comm_models_of(new, planner.comm_models)
        cost_cfg = config.cost.model_copy(update={"seed": config.cost.seed + it})
        ensemble, cost_metrics = train_cost_model(
            pool, records, cost_cfg, init=ensemble, progress=progress, lr_factor=lr
        )
        pol_cfg = config.policy.model_copy(update={"seed": config.policy.seed + it})
        policy, pol_metrics = train_policy(
            pool,
            tasks,
            planner.cost_factory(ensemble),
            pol_cfg,
            init=policy,
            progress=progress,
            topology=template,
            lr_factor=lr,
            batch_sizes=planner.batch_sizes,
        )
        ranges = ranges_from(records, pool.by_name())
        init_ranges = init.card.ranges if init is not None else None  # an old card: device type = its backend
        if init_ranges is not None:
            ranges = ranges.merge(init_ranges)
        card_fields = dict(
            configs={"train": config.model_dump(mode="json")},
            inventory_name=pool.name,
            inventory_fingerprint=fp,
            backend=backend,
            comm_models=planner.comm_models,
            feature_ranges=ranges,
            cost_metrics=cost_metrics.model_dump(mode="json"),
            policy_metrics={"mean_cost_ms": pol_metrics.mean_cost_ms, "entropy": pol_metrics.entropy},
            provenance={
                "command": "train",
                "iteration": it,
                "iterations": config.iterations,
                "n_measurements": len(records),
                "init": init.card.version if init is not None else None,
            },
        )
        ck = _checkpoint_dir(state_dir, it)
        card = save_model(ck, ensemble, policy, **card_fields)
        state = LoopState(
            iteration=it, inputs=inputs, loop_ids=loop_ids, model_version=card.version, pool=fp, tasks=signatures
        )
        atomic_write_text(ck / STATE_FILE, state.model_dump_json() + "\n")
        save_model(model_dir, ensemble, policy, **card_fields)
        m_it = IterationMetrics(
            iteration=it,
            lr_factor=lr,
            n_measurements=len(records),
            n_new=len(planned),
            n_measured=measured_now,
            n_tasks=len(planner.tasks),
            measured_mean_ms=float(np.mean([m.overall_ms for m in new])) if new else None,
            cost=cost_metrics,
            policy_mean_cost_ms=pol_metrics.mean_cost_ms,
            policy_entropy=pol_metrics.entropy,
        )
        _append_metrics(state_dir, m_it)
        results.append(m_it)
    if not results and ckpt is not None and start > 0:
        _restore(_checkpoint_dir(state_dir, start - 1), model_dir)
    return results


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


def _restore(checkpoint: Path, model_dir: Path) -> None:
    """Put the checkpoint's model (byte for byte) into `model_dir` if that does not hold it already."""
    if (model_dir / CARD_FILE).is_file() and (model_dir / CARD_FILE).read_bytes() == (
        checkpoint / CARD_FILE
    ).read_bytes():
        return
    for name in (COST_FILE, POLICY_FILE):
        if (checkpoint / name).is_file():
            shutil.copyfile(checkpoint / name, model_dir / name)
    shutil.copyfile(checkpoint / CARD_FILE, model_dir / CARD_FILE)  # the card last: it vouches for the weights
