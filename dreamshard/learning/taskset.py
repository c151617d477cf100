"""Train / held-out planning tasks from one table pool (the held-out protocol of docs/architecture/learning.md,
"Learning").

The pool is split (seeded, per table) into disjoint train and test table pools. Training tasks draw
train_tables[0]..train_tables[1] tables from the train pool on `train_devices` devices; held-out tasks
take each size in `test_tables` (capped at the test pool size) on each device count in `test_devices`,
so the model is judged on tables, table counts and device counts it never trained on.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from pydantic import ValidationError

from dreamshard.config.learning import TasksConfig
from dreamshard.documents import describe_validation_error, read_structured
from dreamshard.errors import ConfigError
from dreamshard.inventory.draws import draw
from dreamshard.values import Inventory, Task, TaskSet


def _pick(names: list[str], k: int, seed: int, tag: str) -> tuple[str, ...]:
    """The k tables of `names` with the smallest draws for `tag`, in pool order."""
    chosen = set(sorted(names, key=lambda t: (draw(seed, tag, t), t))[:k])
    return tuple(t for t in names if t in chosen)


def make_taskset(pool: Inventory, config: TasksConfig) -> TaskSet:
    """Stable under inventory change: which pool a table joins and which tasks it is in are fixed by draws of its
    own name, so a new table joins some tasks (each displacing at most one table), and a table whose statistics
    changed stays in the same tasks; every other task is unchanged (its placements come from the measurement
    corpus). Task sizes come from a seeded generator independent of the tables."""
    n = pool.num_tables
    if n < 2:
        raise ConfigError(f"pool '{pool.name}' has {n} table; need at least 2 to split into train and test pools")
    rng = np.random.default_rng(config.seed)
    names = pool.table_names
    split = {t: draw(config.seed, "split", t) for t in names}
    test_set = {t for t in names if split[t] < config.test_fraction}
    if not test_set:  # both pools non-empty
        test_set = {min(names, key=lambda t: (split[t], t))}
    if len(test_set) == n:
        test_set.discard(max(names, key=lambda t: (split[t], t)))
    train_names = [t for t in names if t not in test_set]  # pool order, for readable task files
    test_names = [t for t in names if t in test_set]

    train: list[Task] = []
    lo, hi = config.train_tables
    for i in range(config.train_num_tasks):
        name = f"train-{i:03d}"
        k = min(int(rng.integers(lo, hi + 1)), len(train_names))
        train.append(Task(name=name, tables=_pick(train_names, k, config.seed, name), num_devices=config.train_devices))

    test: list[Task] = []
    seen: set[tuple[int, int]] = set()
    for want in config.test_tables:
        k = min(want, len(test_names))
        for d in config.test_devices:
            if (k, d) in seen:
                continue
            seen.add((k, d))
            for r in range(config.test_tasks_per_cell):
                name = f"test-t{k}-d{d}-{r}"
                test.append(Task(name=name, tables=_pick(test_names, k, config.seed, name), num_devices=d))

    return TaskSet(
        pool_name=pool.name,
        pool_fingerprint=pool.fingerprint(),
        train_tables=tuple(train_names),
        test_tables=tuple(test_names),
        train=tuple(train),
        test=tuple(test),
    )


def load_taskset(path: object) -> TaskSet:
    data = read_structured(Path(str(path)))
    try:
        return TaskSet.model_validate(data)
    except ValidationError as e:
        raise ConfigError(f"tasks {path}: {describe_validation_error(e)}") from None
