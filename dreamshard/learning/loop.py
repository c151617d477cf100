"""The outer DreamShard loop (DESIGN.md section 4):

    for each iteration:  measure placements from the current policy on the real backend (iteration 0:
    the random sharder)  ->  append them to model_dir/measurements.jsonl  ->  fit the cost net on all
    measurements so far  ->  REINFORCE on the estimated MDP

with linear LR decay over iterations, a checkpoint per iteration (model_dir/checkpoints/iter-N/ holding
the model files and state.json), per-iteration metrics appended to model_dir/metrics.json, and the
latest model always saved in model_dir itself. On resume the last complete checkpoint is loaded, the
measurement file is cut back to the records that checkpoint had seen (a crash mid-iteration leaves no
trace), and training continues with the next iteration. Seeded throughout.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict

from dreamshard.errors import ConfigError, ModelError
from dreamshard.io import append_measurement, atomic_write_text, load_measurements
from dreamshard.learning.configs import LoopConfig, TopologyConfig
from dreamshard.learning.cost_model import CostNet
from dreamshard.learning.model_store import load_model, save_model
from dreamshard.learning.policy import Policy, mdp_clone, rollout
from dreamshard.learning.train_cost import CostMetrics, train_cost_model
from dreamshard.learning.train_policy import make_mdps, train_policy
from dreamshard.sharders.heuristics import RandomSharder
from dreamshard.types import Inventory, Measurement, Task, TaskSet, Topology

MEASUREMENTS_FILE = "measurements.jsonl"
METRICS_FILE = "metrics.json"
CHECKPOINTS_DIR = "checkpoints"


class OracleLike(Protocol):
    def measure(self, inventory: Inventory, placement: dict[str, int], topology: Topology, *, kind: str = ..., task: str = ...) -> Measurement: ...


class IterationMetrics(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    iteration: int
    lr_factor: float
    n_measurements: int
    measured_mean_ms: float | None  # mean measured overall cost of this iteration's placements
    cost: CostMetrics
    policy_mean_cost_ms: float | None
    policy_entropy: float | None


class LoopState(BaseModel):
    model_config = ConfigDict(extra="forbid")
    iteration: int
    n_measurements: int
    model_version: str


def _checkpoint_dir(model_dir: Path, i: int) -> Path:
    return model_dir / CHECKPOINTS_DIR / f"iter-{i}"


def last_checkpoint(model_dir: Path) -> tuple[int, Path] | None:
    root = Path(model_dir) / CHECKPOINTS_DIR
    if not root.is_dir():
        return None
    done = []
    for d in root.iterdir():
        if d.name.startswith("iter-") and (d / "state.json").is_file():
            try:
                done.append((int(d.name.removeprefix("iter-")), d))
            except ValueError:
                continue
    return max(done) if done else None


def _template(topology: Topology) -> TopologyConfig:
    return TopologyConfig(
        device_type=topology.device_type, memory_per_device_gb=topology.memory_per_device_gb, batch_size=topology.batch_size
    )


def _placements_to_measure(
    pool: Inventory,
    tasks: Sequence[Task],
    template: TopologyConfig,
    n: int,
    iteration: int,
    seed: int,
    policy: Policy | None,
    cost_net: CostNet | None,
    measure_devices: Sequence[int] = (),
) -> list[tuple[Task, dict[str, int]]]:
    rng = np.random.default_rng([seed, iteration])
    gen = torch.Generator().manual_seed(int(rng.integers(2**31)))
    picks = rng.choice(len(tasks), size=n, replace=len(tasks) < n) if n else []
    chosen = []
    for i in picks:
        task = tasks[int(i)]
        if measure_devices:
            task = task.model_copy(update={"num_devices": int(rng.choice(list(measure_devices)))})
        chosen.append(task)
    out = []
    mdps = make_mdps(pool, chosen, cost_net, template) if policy is not None and cost_net is not None else None
    for j, task in enumerate(chosen):
        topo = template.topology(task.num_devices)
        if mdps is None:
            placement = RandomSharder(seed=int(rng.integers(2**31))).place(pool.subset(list(task.tables)), topo)
        else:
            assert policy is not None
            placement = rollout(policy, mdp_clone(mdps[j]), "sample", gen).placement
        out.append((task, placement))
    return out


def _append_metrics(model_dir: Path, m: IterationMetrics) -> None:
    path = model_dir / METRICS_FILE
    rows: list[Any] = []
    if path.is_file():
        try:
            rows = json.loads(path.read_text())
        except json.JSONDecodeError:
            rows = []
    rows = [r for r in rows if r.get("iteration") != m.iteration] + [m.model_dump(mode="json")]
    atomic_write_text(path, json.dumps(rows, indent=2) + "\n")


def _truncate_measurements(path: Path, keep: Sequence[Measurement]) -> None:
    atomic_write_text(path, "".join(r.model_dump_json() + "\n" for r in keep))


def train(
    pool: Inventory,
    taskset: TaskSet,
    topology_template: Topology,
    oracle: OracleLike,
    config: LoopConfig,
    model_dir: Path,
    resume: bool = True,
    progress: bool = True,
    measurements: Path | None = None,
    backend_name: str = "",
) -> list[IterationMetrics]:
    """Run (or resume) the outer loop; returns the metrics of the iterations run now. The model in
    `model_dir` is updated after every iteration. `measurements` seeds a fresh run with existing
    profile records (e.g. the profile stage's output)."""
    model_dir = Path(model_dir)
    tasks = list(taskset.train)
    if not tasks:
        raise ConfigError("task set has no training tasks")
    if taskset.pool_fingerprint != pool.fingerprint():
        raise ConfigError(f"task set was made from pool '{taskset.pool_name}' with another fingerprint; rerun `dreamshard tasks`")
    template = _template(topology_template)
    meas_path = model_dir / MEASUREMENTS_FILE
    model_dir.mkdir(parents=True, exist_ok=True)

    start = 0
    cost_net: CostNet | None = None
    policy: Policy | None = None
    records: list[Measurement] = []
    ckpt = last_checkpoint(model_dir) if resume else None
    if ckpt is not None:
        i, d = ckpt
        state = LoopState.model_validate_json((d / "state.json").read_text())
        loaded = load_model(d, require_policy=True)
        cost_net, policy = loaded.cost_net, loaded.policy
        all_records = load_measurements(meas_path) if meas_path.exists() else []
        if len(all_records) < state.n_measurements:
            raise ModelError(f"{meas_path} holds {len(all_records)} records, checkpoint iter-{i} saw {state.n_measurements}; start over with --no-resume")
        records = all_records[: state.n_measurements]
        if len(all_records) > len(records):
            _truncate_measurements(meas_path, records)
        start = i + 1
    else:
        if (model_dir / CHECKPOINTS_DIR).exists():
            shutil.rmtree(model_dir / CHECKPOINTS_DIR)
        seed_records = load_measurements(measurements) if measurements is not None else []
        _truncate_measurements(meas_path, seed_records)
        records = list(seed_records)
        for f in (METRICS_FILE,):
            (model_dir / f).unlink(missing_ok=True)

    results: list[IterationMetrics] = []
    for it in range(start, config.iterations):
        lr = config.lr_factor(it)
        new: list[Measurement] = []
        for task, placement in _placements_to_measure(
            pool, tasks, template, config.placements_per_iteration, it, config.seed, policy, cost_net,
            config.measure_devices,
        ):
            inv = pool.subset(list(task.tables), name=task.name)
            m = oracle.measure(inv, placement, template.topology(task.num_devices), kind="placement", task=task.name)
            append_measurement(meas_path, m)
            new.append(m)
        records.extend(new)
        cost_cfg = config.cost.model_copy(update={"seed": config.cost.seed + it})
        cost_net, cost_metrics = train_cost_model(pool, records, cost_cfg, init=cost_net, progress=progress, lr_factor=lr)
        pol_cfg = config.policy.model_copy(update={"seed": config.policy.seed + it})
        policy, pol_metrics = train_policy(
            pool, tasks, cost_net, pol_cfg, init=policy, progress=progress, topology=template, lr_factor=lr
        )
        backend = backend_name or (records[-1].backend.name if records else "")
        card_fields = dict(
            configs={"train": config.model_dump(mode="json")},
            inventory_name=pool.name,
            inventory_fingerprint=pool.fingerprint(),
            backend=backend,
            cost_metrics=cost_metrics.model_dump(mode="json"),
            policy_metrics={"mean_cost_ms": pol_metrics.mean_cost_ms, "entropy": pol_metrics.entropy},
            provenance={"command": "train", "iteration": it, "iterations": config.iterations, "n_measurements": len(records)},
        )
        ck = _checkpoint_dir(model_dir, it)
        card = save_model(ck, cost_net, policy, **card_fields)
        atomic_write_text(
            ck / "state.json", LoopState(iteration=it, n_measurements=len(records), model_version=card.version).model_dump_json() + "\n"
        )
        save_model(model_dir, cost_net, policy, **card_fields)
        m_it = IterationMetrics(
            iteration=it,
            lr_factor=lr,
            n_measurements=len(records),
            measured_mean_ms=float(np.mean([m.overall_ms for m in new])) if new else None,
            cost=cost_metrics,
            policy_mean_cost_ms=pol_metrics.mean_cost_ms,
            policy_entropy=pol_metrics.entropy,
        )
        _append_metrics(model_dir, m_it)
        results.append(m_it)
    return results
