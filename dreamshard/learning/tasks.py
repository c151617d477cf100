"""Train / held-out planning tasks from one table pool (the held-out protocol of docs/architecture.md, "Learning").

The pool is split (seeded) into disjoint train and test table pools. Training tasks draw
train_tables[0]..train_tables[1] tables from the train pool on `train_devices` devices; held-out tasks
take each size in `test_tables` (capped at the test pool size) on each device count in `test_devices`,
so the model is judged on tables, table counts and device counts it never trained on.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from pydantic import ValidationError

from dreamshard.errors import ConfigError
from dreamshard.io import describe_validation_error, read_structured
from dreamshard.learning.configs import TasksConfig
from dreamshard.types import Inventory, Task, TaskSet


def make_taskset(pool: Inventory, config: TasksConfig) -> TaskSet:
    n = pool.num_tables
    if n < 2:
        raise ConfigError(f"pool '{pool.name}' has {n} table; need at least 2 to split into train and test pools")
    rng = np.random.default_rng(config.seed)
    perm = rng.permutation(n)
    n_test = min(n - 1, max(1, int(round(config.test_fraction * n))))
    names = pool.table_names
    test_set = {names[i] for i in perm[:n_test]}
    train_names = [t for t in names if t not in test_set]  # pool order, for readable task files
    test_names = [t for t in names if t in test_set]

    train: list[Task] = []
    lo, hi = config.train_tables
    for i in range(config.train_num_tasks):
        k = min(int(rng.integers(lo, hi + 1)), len(train_names))
        pick = set(rng.choice(len(train_names), size=k, replace=False).tolist())
        tables = tuple(t for j, t in enumerate(train_names) if j in pick)
        train.append(Task(name=f"train-{i:03d}", tables=tables, num_devices=config.train_devices))

    test: list[Task] = []
    seen: set[tuple[int, int]] = set()
    for want in config.test_tables:
        k = min(want, len(test_names))
        for d in config.test_devices:
            if (k, d) in seen:
                continue
            seen.add((k, d))
            for r in range(config.test_tasks_per_cell):
                pick = set(rng.choice(len(test_names), size=k, replace=False).tolist())
                tables = tuple(t for j, t in enumerate(test_names) if j in pick)
                test.append(Task(name=f"test-t{k}-d{d}-{r}", tables=tables, num_devices=d))

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
