"""The outer loop's state directory: what a run keeps so that it can resume (docs/architecture/learning.md, "Learning").

`checkpoints/iter-N/` holds the model of iteration N with its `state.json` (`LoopState`: what the run was started
from and the loop records it used); `loop_measurements.jsonl` is the cache of every placement the loop measured,
keyed by a deterministic id; `metrics.json` holds one `IterationMetrics` per iteration. A checkpoint is resumed
only when `inputs_fingerprint` of the new run matches the one it was made from.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from dreamshard.config.learning import LoopConfig
from dreamshard.documents import atomic_write_text, iter_measurements
from dreamshard.learning.cost_eval import CostMetrics
from dreamshard.learning.model_store import LoadedModel
from dreamshard.values import Inventory, Measurement, Task, TaskSet
from dreamshard.values.model_files import CARD_FILE, COST_FILE, POLICY_FILE

MEASUREMENTS_FILE = "loop_measurements.jsonl"
METRICS_FILE = "metrics.json"
CHECKPOINTS_DIR = "checkpoints"
STATE_FILE = "state.json"
#: state dir used when none is given: inside the model dir
DEFAULT_STATE_DIR = "train-state"


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
    # the pool's fingerprint and each train task's content (task_signature): what an incremental retrain compares
    # with (dreamshard.learning.incremental)
    pool: str = ""
    tasks: dict[str, str] = {}


def task_signature(pool: Inventory, task: Task) -> str:
    """A train task's content: its device count and its tables' canonical content (any change of either is a
    change of the task)."""
    by_name = pool.by_name()
    rows = sorted(by_name[n].canonical_json() for n in task.tables)
    return hashlib.sha256(json.dumps([task.num_devices, rows]).encode()).hexdigest()[:16]


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


def checkpoint_dir(state_dir: Path, iteration: int) -> Path:
    return state_dir / CHECKPOINTS_DIR / f"iter-{iteration}"


def last_checkpoint(state_dir: Path) -> tuple[int, Path] | None:
    """The last complete checkpoint (its iteration and directory), or None."""
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


def append_metrics(state_dir: Path, metrics: IterationMetrics) -> None:
    """Add (or replace) one iteration's metrics in `metrics.json`."""
    path = state_dir / METRICS_FILE
    rows: list[Any] = []
    if path.is_file():
        try:
            rows = json.loads(path.read_text())
        except json.JSONDecodeError:
            rows = []
    rows = [r for r in rows if r.get("iteration") != metrics.iteration] + [metrics.model_dump(mode="json")]
    atomic_write_text(path, json.dumps(rows, indent=2) + "\n")


def load_cache(path: Path, fingerprint: str) -> dict[str, Measurement]:
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


def forget_checkpoints(state_dir: Path) -> None:
    """Drop the checkpoints and metrics of a run made from other inputs (the measurement cache stays)."""
    shutil.rmtree(state_dir / CHECKPOINTS_DIR)
    (state_dir / METRICS_FILE).unlink(missing_ok=True)


def restore(checkpoint: Path, model_dir: Path) -> None:
    """Put the checkpoint's model (byte for byte) into `model_dir` if that does not hold it already."""
    if (model_dir / CARD_FILE).is_file() and (model_dir / CARD_FILE).read_bytes() == (
        checkpoint / CARD_FILE
    ).read_bytes():
        return
    for name in (COST_FILE, POLICY_FILE):
        if (checkpoint / name).is_file():
            shutil.copyfile(checkpoint / name, model_dir / name)
    shutil.copyfile(checkpoint / CARD_FILE, model_dir / CARD_FILE)  # the card last: it vouches for the weights
