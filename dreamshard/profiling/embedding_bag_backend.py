"""Fallback fused operator when FBGEMM cannot be imported: ``torch.nn.functional.embedding_bag``.

Tables of equal dim share ONE concatenated weight (rows stacked, each table's indices shifted by its row
offset), so a device runs one ``embedding_bag`` call per distinct dim (one call in total when all dims agree).
A table serving k features has k bags per sample into its rows (its k pooled outputs).
Backward computes sparse gradients and applies the SGD update in place, like TBE's fused EXACT_SGD.
Records ``operator="embedding_bag"`` so every report says which operator ran.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from dreamshard.profiling.base import FusedOp, TorchBackend
from dreamshard.profiling.buffers import GRADS
from dreamshard.profiling.fbgemm_backend import LEARNING_RATE
from dreamshard.values import Table


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
        with torch.no_grad():
            for w in self.weights:
                w.add_(w.grad, alpha=-LEARNING_RATE)
                w.grad = None


class EmbeddingBagBackend(TorchBackend):
    """Times a device's tables with concatenated weights + ``embedding_bag`` (one call per dim)."""

    operator = "embedding_bag"

    def build(
        self, tables: Sequence[Table], rows: Sequence[int], batches: list[tuple[np.ndarray, np.ndarray]]
    ) -> FusedOp[list[Any]]:
        tdev = torch.device(self.device)
        n_bags = sum(t.num_outputs for t in tables)  # a shared table: one bag per feature and sample
        batch_size = (len(batches[0][1]) - 1) // n_bags
        first_bag = [0]
        for t in tables:
            first_bag.append(first_bag[-1] + t.num_outputs)
        groups: dict[int, list[int]] = {}
        for k, t in enumerate(tables):
            groups.setdefault(t.embedding_dim, []).append(k)
        weights: list[Any] = []
        grads: list[Any] = []
        row_base: dict[int, int] = {}
        for dim, members in groups.items():
            base = 0
            for k in members:
                row_base[k] = base
                base += int(rows[k])
            dtype = (
                torch.float16
                if all(tables[k].dtype == "fp16" for k in members) and tdev.type == "cuda"
                else torch.float32
            )
            w = torch.empty(base, dim, device=tdev, dtype=dtype).uniform_(-0.01, 0.01).requires_grad_(True)
            weights.append(w)
            bags = sum(tables[k].num_outputs for k in members)
            grads.append(GRADS.get((bags * batch_size, dim), tdev, dtype))
        inputs: list[list[tuple[Any, Any]]] = []
        for idx, off in batches:
            per_group: list[tuple[Any, Any]] = []
            for members in groups.values():
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
                per_group.append(
                    (
                        torch.from_numpy(np.concatenate(i_parts)).to(tdev),
                        torch.from_numpy(np.concatenate(o_parts)).to(tdev),
                    )
                )
            inputs.append(per_group)
        return _BagOp(weights, inputs, grads)
