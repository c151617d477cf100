"""Measurement records as the cost network's training samples (docs/architecture/learning.md, "Learning"): the feature
matrix (one row per table and batch size measured), one sample per record, and batches of samples collated for a
forward pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from dreamshard.errors import ModelError, PlanError
from dreamshard.learning.features import tables_features
from dreamshard.placement.expand import unit_table
from dreamshard.values import Inventory, Measurement, Table, parse_unit


@dataclass(frozen=True)
class Sample:
    table_idx: np.ndarray  # (T,) the tables' positions in the pool
    feat_idx: np.ndarray  # (T,) their rows of the feature matrix (a table at the record's batch size)
    device: np.ndarray  # (T,) device of each table
    num_devices: int
    dev_targets: np.ndarray  # (D, 4) ms
    overall: float


@dataclass(frozen=True)
class Batch:
    feats: torch.Tensor
    table_device: torch.Tensor
    num_devices_total: int
    device_placement: torch.Tensor
    num_placements: int
    dev_targets: torch.Tensor
    overall: torch.Tensor


def to_samples(pool: Inventory, records: Sequence[Measurement]) -> tuple[torch.Tensor, list[Sample], list[Table]]:
    """The feature matrix (one row per table and batch size the records measured it at), one sample per record,
    and the tables the samples index: the pool's, then the units records measured (column shards, row shards,
    replicas: dreamshard.placement.expand.unit_table), a replica at its share of the batch as planning features it
    (dreamshard.learning.planning_cost)."""
    tables = list(pool.tables)
    by_name = pool.by_name()
    index = {t.name: i for i, t in enumerate(tables)}
    replicas: set[int] = set()  # indices of data-parallel replicas (featured at their share of the batch)
    rows: dict[tuple[int, float], int] = {}  # (table index, batch size) -> feature row
    out: list[Sample] = []
    for m in records:
        names = list(m.placement)
        for n in names:
            if n in index:
                continue
            ref = parse_unit(n)
            if ref.table not in by_name:
                raise ModelError(
                    f"measurement {m.measurement_id} places table '{n[:80]}', which is not in pool "
                    f"'{pool.name}'; train on the inventory that was profiled"
                )
            try:
                tables.append(unit_table(by_name, n))
            except PlanError as e:
                raise ModelError(f"measurement {m.measurement_id}: {e}") from None
            index[n] = len(tables) - 1
            if ref.kind == "replica":
                replicas.add(index[n])
        D = m.topology.num_devices
        if len(m.costs.per_device) != D:
            raise ModelError(
                f"measurement {m.measurement_id} has {len(m.costs.per_device)} device costs for {D} devices"
            )
        idx = [index[n] for n in names]
        batch = m.topology.batch_size
        at = [batch / D if i in replicas else float(batch) for i in idx]
        out.append(
            Sample(
                table_idx=np.array(idx, dtype=np.int64),
                feat_idx=np.array(
                    [rows.setdefault((i, b), len(rows)) for i, b in zip(idx, at, strict=True)], dtype=np.int64
                ),
                device=np.array([m.placement[n] for n in names], dtype=np.int64),
                num_devices=D,
                dev_targets=np.array([d.as_list() for d in m.costs.per_device], dtype=np.float32),
                overall=float(m.costs.overall_ms),
            )
        )
    keys = list(rows)  # insertion order = row order
    feats = tables_features([tables[i] for i, _ in keys], [b for _, b in keys])
    return torch.from_numpy(feats), out, tables


def collate(feats: torch.Tensor, samples: Sequence[Sample]) -> Batch:
    idx, tdev, dplace, targets, overall = [], [], [], [], []
    offset = 0
    for b, s in enumerate(samples):
        idx.append(s.feat_idx)
        tdev.append(s.device + offset)
        dplace.append(np.full(s.num_devices, b, dtype=np.int64))
        targets.append(s.dev_targets)
        overall.append(s.overall)
        offset += s.num_devices
    return Batch(
        feats=feats[torch.from_numpy(np.concatenate(idx))],
        table_device=torch.from_numpy(np.concatenate(tdev)),
        num_devices_total=offset,
        device_placement=torch.from_numpy(np.concatenate(dplace)),
        num_placements=len(samples),
        dev_targets=torch.from_numpy(np.concatenate(targets)),
        overall=torch.tensor(overall, dtype=torch.float32),
    )
