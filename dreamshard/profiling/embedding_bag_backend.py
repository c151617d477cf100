"""Fallback fused operator when FBGEMM cannot be imported: ``torch.nn.functional.embedding_bag``.

Tables of equal dim share ONE concatenated weight (rows stacked, each table's indices shifted by its row
offset), so a device runs one ``embedding_bag`` call per distinct dim (one call in total when all dims agree).
A table serving k features has k bags per sample into its rows (its k pooled outputs). Sequence tables
(``Table.pooled`` false) are plain ``embedding`` lookups into their concatenated weight: one output row per lookup.
Backward computes sparse gradients and applies the SGD update in place, like TBE's fused EXACT_SGD.
Records ``operator="embedding_bag"`` so every report says which operator ran.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from dreamshard.profiling.base import FusedOp, TorchBackend
from dreamshard.profiling.buffers import GRADS
from dreamshard.profiling.fbgemm_backend import LEARNING_RATE
from dreamshard.values import Table


def _sgd_step(weights: Sequence[Any]) -> None:
    """The fused optimizer's update: SGD of each weight by its (sparse) gradient, in place."""
    with torch.no_grad():
        for w in weights:
            w.add_(w.grad, alpha=-LEARNING_RATE)
            w.grad = None


class _SequenceOp(FusedOp[Any]):
    """Sequence tables of one width: one concatenated weight, one ``embedding`` lookup per batch."""

    def __init__(self, weight: Any, inputs: list[Any]) -> None:
        self.weight = weight
        self.inputs = inputs  # [batch] -> indices shifted to the concatenated rows

    def forward(self, batch_no: int) -> Any:
        return F.embedding(self.inputs[batch_no % len(self.inputs)], self.weight, sparse=True)

    def backward(self, out: Any) -> None:
        out.backward(GRADS.get(tuple(out.shape), out.device, out.dtype))
        _sgd_step([self.weight])


class _BagOp(FusedOp[list[Any]]):
    def __init__(self, weights: list[Any], inputs: list[list[tuple[Any, Any]]], grads: list[Any]) -> None:
        self.weights = weights  # one per dim group
        self.inputs = inputs  # [batch][group] -> (indices, offsets)
        self.grads = grads

    def forward(self, batch_no: int) -> list[Any]:
        groups = self.inputs[batch_no % len(self.inputs)]
        return [
            F.embedding_bag(i, w, o, mode="sum", sparse=True, include_last_offset=True)
            for w, (i, o) in zip(self.weights, groups, strict=True)
        ]

    def backward(self, out: list[Any]) -> None:
        torch.autograd.backward(out, self.grads)
        _sgd_step(self.weights)


def _weight(rows: int, dim: int, fp16: bool, device: torch.device) -> Any:
    """A concatenated weight of `rows` x `dim` (fp16 only on cuda, as the fallback runs it)."""
    dtype = torch.float16 if fp16 and device.type == "cuda" else torch.float32
    return torch.empty(rows, dim, device=device, dtype=dtype).uniform_(-0.01, 0.01).requires_grad_(True)


def _first_bags(tables: Sequence[Table]) -> list[int]:
    """The first bag of each table in a fused batch (table-major; a shared table: one bag per feature), then the
    total."""
    first = [0]
    for t in tables:
        first.append(first[-1] + t.num_outputs)
    return first


def _group_input(
    members: Sequence[int],
    first_bag: Sequence[int],
    row_base: Mapping[int, int],
    batch: tuple[np.ndarray, np.ndarray],
    batch_size: int,
) -> tuple[np.ndarray, np.ndarray]:
    """The (indices, offsets) of the tables `members` in one fused batch, indices shifted to each table's rows in
    the group's concatenated weight (`row_base`)."""
    idx, off = batch
    i_parts: list[np.ndarray] = []
    o_parts: list[np.ndarray] = []
    shift = 0
    for k in members:
        b0, b1 = first_bag[k] * batch_size, first_bag[k + 1] * batch_size  # all its features' bags
        lo, hi = off[b0], off[b1]
        i_parts.append(idx[lo:hi] + row_base[k])
        o_parts.append(off[b0:b1] - lo + shift)
        shift += int(hi - lo)
    o_parts.append(np.array([shift], dtype=np.int64))
    return np.concatenate(i_parts), np.concatenate(o_parts)


def _on(pair: tuple[np.ndarray, np.ndarray], device: torch.device) -> tuple[Any, Any]:
    """(indices, offsets) as tensors on `device`."""
    return torch.from_numpy(pair[0]).to(device), torch.from_numpy(pair[1]).to(device)


class EmbeddingBagBackend(TorchBackend):
    """Times a device's tables with concatenated weights + ``embedding_bag`` (one call per dim), or ``embedding``
    for sequence tables."""

    operator = "embedding_bag"

    def build(
        self,
        tables: Sequence[Table],
        rows: Sequence[int],
        batches: list[tuple[np.ndarray, np.ndarray]],
        *,
        arena_offset: int = 0,
    ) -> FusedOp[Any]:
        tdev = torch.device(self.device)
        first_bag = _first_bags(tables)
        batch_size = (len(batches[0][1]) - 1) // first_bag[-1]
        groups: dict[int, list[int]] = {}
        for k, t in enumerate(tables):
            groups.setdefault(t.embedding_dim, []).append(k)
        row_base: dict[int, int] = {}
        weights: list[Any] = []
        for dim, members in groups.items():
            base = 0
            for k in members:
                row_base[k] = base
                base += int(rows[k])
            weights.append(_weight(base, dim, all(tables[k].dtype == "fp16" for k in members), tdev))
        inputs = [
            [_on(_group_input(m, first_bag, row_base, b, batch_size), tdev) for m in groups.values()] for b in batches
        ]
        if not tables[0].pooled:  # a sequence group: one width (base.operator_groups), lookups without offsets
            return _SequenceOp(weights[0], [per_group[0][0] for per_group in inputs])
        grads = [
            GRADS.get((sum(tables[k].num_outputs for k in m) * batch_size, w.shape[1]), tdev, w.dtype)
            for m, w in zip(groups.values(), weights, strict=True)
        ]
        return _BagOp(weights, inputs, grads)
