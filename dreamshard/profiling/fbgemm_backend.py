"""FBGEMM's table-batched embedding (TBE) as the fused operator: the same operator family TorchRec runs.

One ``SplitTableBatchedEmbeddingBagsCodegen`` per device over all its pooled tables, pooling SUM, fused EXACT_SGD
update in backward; its sequence tables (``Table.pooled`` false) in one without pooling (``PoolingMode.NONE``: one
output row per lookup) per width. A table serving k features (``Table.features``) is k lookups into one table
(``feature_table_map``), as TorchRec runs a shared table. On CPU: ``EmbeddingLocation.HOST`` /
``ComputeDevice.CPU``; on CUDA: ``EmbeddingLocation.DEVICE`` / ``ComputeDevice.CUDA`` (needs the CUDA build of
fbgemm-gpu).
Set ``DREAMSHARD_DISABLE_FBGEMM=1`` to force the ``embedding_bag`` fallback.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from dreamshard.profiling.base import FusedOp, TorchBackend, arena_layout
from dreamshard.profiling.buffers import GRADS, HOST_ARENA
from dreamshard.profiling.scaling import padded_dim
from dreamshard.values import Table

LEARNING_RATE = 0.01


def fbgemm_disabled() -> bool:
    return os.environ.get("DREAMSHARD_DISABLE_FBGEMM", "").strip().lower() in {"1", "true", "yes", "on"}


def _import_tbe() -> dict[str, Any] | None:
    if fbgemm_disabled():
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # optional dependency: fbgemm_gpu (without it the embedding_bag fallback runs)
            from fbgemm_gpu.split_embedding_configs import EmbOptimType, SparseType
            from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation, PoolingMode
            from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
                ComputeDevice,
                SplitTableBatchedEmbeddingBagsCodegen,
            )
    except Exception:  # ImportError, or a broken native library
        return None
    return {
        "TBE": SplitTableBatchedEmbeddingBagsCodegen,
        "EmbeddingLocation": EmbeddingLocation,
        "ComputeDevice": ComputeDevice,
        "PoolingMode": PoolingMode,
        "OptimType": EmbOptimType,
        "SparseType": SparseType,
    }


_CUDA_OK: bool | None = None


def fbgemm_available(cuda: bool = False) -> bool:
    """True if the TBE operator can run here. On CUDA a tiny TBE is built and run once (the CPU-only wheel
    imports fine but has no CUDA kernels), and the answer is cached."""
    global _CUDA_OK
    mods = _import_tbe()
    if mods is None:
        return False
    if not cuda:
        return True
    if _CUDA_OK is None:
        try:
            op = mods["TBE"](
                [(8, 4, mods["EmbeddingLocation"].DEVICE, mods["ComputeDevice"].CUDA)],
                optimizer=mods["OptimType"].EXACT_SGD,
                device=torch.device("cuda"),
            )
            out = op(torch.tensor([1, 2], device="cuda"), torch.tensor([0, 1, 2], device="cuda"))
            out.backward(torch.ones_like(out))
            torch.cuda.synchronize()
            _CUDA_OK = True
        except Exception:
            _CUDA_OK = False
    return _CUDA_OK


class _TBEOp(FusedOp[Any]):
    def __init__(self, module: Any, batches: list[tuple[Any, Any]], grad: Any) -> None:
        self.module = module
        self.batches = batches
        self.grad = grad

    def forward(self, batch_no: int) -> Any:
        idx, off = self.batches[batch_no % len(self.batches)]
        return self.module(idx, off)

    def backward(self, out: Any) -> None:
        out.backward(self.grad)


def arena_needs(tables: Sequence[Table], rows: Sequence[int]) -> dict[torch.dtype, int]:
    """The arena elements of each dtype one device's build takes (`arena_layout`, each operator fp16 when all its
    tables are)."""
    need: dict[torch.dtype, int] = {}
    for group, offset, numel in arena_layout(tables, rows):
        dtype = torch.float16 if all(tables[i].dtype == "fp16" for i in group) else torch.float32
        need[dtype] = max(need.get(dtype, 0), offset + numel)
    return need


class _SequenceTBEOp(_TBEOp):
    """A TBE without pooling: its output has one row per lookup, so the upstream gradient takes its shape."""

    def backward(self, out: Any) -> None:
        out.backward(GRADS.get(tuple(out.shape), out.device))


class FbgemmBackend(TorchBackend):
    """Times a device's tables with one TBE operator."""

    operator = "fbgemm_tbe"

    def reserve(self, devices: Sequence[Sequence[Table]]) -> None:
        """On CPU, the weight arena sized once for the largest of `devices` (`arena_needs`)."""
        if self.device.startswith("cuda"):
            return
        need: dict[torch.dtype, int] = {}
        for tables in devices:
            for dtype, numel in arena_needs(tables, self.rule.device_rows(list(tables))).items():
                need[dtype] = max(need.get(dtype, 0), numel)
        for dtype, numel in need.items():
            HOST_ARENA.reserve(numel, dtype)

    def build(
        self,
        tables: Sequence[Table],
        rows: Sequence[int],
        batches: list[tuple[np.ndarray, np.ndarray]],
        *,
        arena_offset: int = 0,
    ) -> FusedOp[Any]:
        m = _import_tbe()
        assert m is not None, "FBGEMM unavailable"
        cuda = self.device.startswith("cuda")
        loc = m["EmbeddingLocation"].DEVICE if cuda else m["EmbeddingLocation"].HOST
        dev = m["ComputeDevice"].CUDA if cuda else m["ComputeDevice"].CPU
        specs = [(int(r), padded_dim(t.embedding_dim), loc, dev) for t, r in zip(tables, rows, strict=True)]
        # A shared table (k features) is k lookups into one table: TBE's feature_table_map lists it k times.
        feature_map = [k for k, t in enumerate(tables) for _ in range(t.num_outputs)]
        precision = m["SparseType"].FP16 if all(t.dtype == "fp16" for t in tables) else m["SparseType"].FP32
        tdev = torch.device(self.device)
        kwargs: dict[str, Any] = {}
        if not cuda:  # HOST weights: one flat buffer of sum(rows x dim) elements, reused across builds
            dtype = torch.float16 if precision == m["SparseType"].FP16 else torch.float32
            kwargs["preallocated_host_buffers"] = {
                "weights": HOST_ARENA.view(sum(r * d for r, d, _, _ in specs), dtype, arena_offset)
            }
        pooled = tables[0].pooled  # a group is all pooled or all sequence tables (base.operator_groups)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module = m["TBE"](
                specs,
                optimizer=m["OptimType"].EXACT_SGD,
                pooling_mode=m["PoolingMode"].SUM if pooled else m["PoolingMode"].NONE,
                learning_rate=LEARNING_RATE,
                weights_precision=precision,
                device=tdev,
                feature_table_map=feature_map,
                **kwargs,
            )
        prepared = [(torch.from_numpy(i).to(tdev), torch.from_numpy(o).to(tdev)) for i, o in batches]
        if not pooled:  # one output row of the width per lookup
            return _SequenceTBEOp(module, prepared, None)
        batch_size = (len(batches[0][1]) - 1) // len(feature_map)
        out_dim = sum(specs[k][1] for k in feature_map)
        grad = GRADS.get((batch_size, out_dim), tdev)
        return _TBEOp(module, prepared, grad)
