"""The judge's compute timing: one device's fused embedding forward and backward, in a worker process of its own.

`ComputeWorker` (the judge's side) starts ``python bench/judge_compute.py`` once, a fresh interpreter that pins
itself to one thread, imports torch and FBGEMM once and then times one device per request (JSON lines on
stdin/stdout), so no two devices are ever timed at once and nothing of the caller's process is timed.

A device runs as TorchRec runs it: one FBGEMM CPU TBE (`SplitTableBatchedEmbeddingBagsCodegen`, ComputeDevice.CPU,
EmbeddingLocation.HOST, EXACT_SGD fused into backward) over its pooled units (PoolingMode.SUM), one without pooling
(PoolingMode.NONE) per width of its sequence units; each request lists these operators with their batch (the
global batch; a data-parallel replica's operator runs the device's share). One iteration runs every operator's
forward, then every backward; its forward time and backward time are the sums. Rows and ids: `judge_indices`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import IO, Any

from judge_protocol import answer_lines, private_reply

HERE = Path(__file__).resolve().parent
LEARNING_RATE = 0.01
#: Distinct index batches per operator, cycled over the iterations.
BATCHES = 2


class ComputeWorker:
    """The judge's handle on its compute worker process (a context manager; `close` ends it)."""

    def __init__(self) -> None:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        self._proc = subprocess.Popen(
            [sys.executable, str(HERE / "judge_compute.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )

    def time_device(self, operators: list[dict[str, Any]], warmup: int, repeats: int, seed: int) -> dict[str, Any]:
        """{"fwd_ms": [...], "bwd_ms": [...]} per timed iteration of one device's `operators` ({"tables": [unit
        tables as JSON], "batch": int, "pooled": bool} each)."""
        assert self._proc.stdin is not None and self._proc.stdout is not None
        request = {"operators": operators, "warmup": warmup, "repeats": repeats, "seed": seed}
        self._proc.stdin.write(json.dumps(request) + "\n")
        self._proc.stdin.flush()
        line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the judge's compute worker exited (code {self._proc.poll()})")
        reply: dict[str, Any] = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"the judge's compute worker failed: {reply['error']}")
        return reply

    def close(self) -> None:
        if self._proc.poll() is None:
            assert self._proc.stdin is not None
            self._proc.stdin.close()
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()

    def __enter__(self) -> ComputeWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ----------------------------------------------------------------------------------------- the worker process


class _Worker:
    """Builds and times the operators of one device per request (runs inside the worker process)."""

    def __init__(self) -> None:
        import torch

        torch.set_num_threads(1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from fbgemm_gpu.split_embedding_configs import EmbOptimType, SparseType
            from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation, PoolingMode
            from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
                ComputeDevice,
                SplitTableBatchedEmbeddingBagsCodegen,
            )
        self.torch = torch
        self.tbe = SplitTableBatchedEmbeddingBagsCodegen
        self.where = (EmbeddingLocation.HOST, ComputeDevice.CPU)
        self.modes = {True: PoolingMode.SUM, False: PoolingMode.NONE}
        self.sgd, self.sparse = EmbOptimType.EXACT_SGD, SparseType
        self.arenas: dict[Any, Any] = {}  # dtype -> one zeroed host buffer the TBEs' weights are views of

    def _weights(self, elements: int, fp16: bool, offset: int) -> Any:
        """A view of `elements` of this process's weight arena (grown once, zero-filled: no page faults per build)."""
        dtype = self.torch.float16 if fp16 else self.torch.float32
        arena = self.arenas.get(dtype)
        if arena is None or arena.numel() < offset + elements:
            arena = self.arenas[dtype] = self.torch.zeros(max(offset + elements, 1 << 20), dtype=dtype)
        return arena[offset : offset + elements]

    def build(self, tables: list[dict[str, Any]], rows: list[int], pooled: bool, offset: int) -> Any:
        """One TBE over `tables` with `rows` each (weights at `offset` of the arena)."""
        specs = [(r, int(t["embedding_dim"]), *self.where) for t, r in zip(tables, rows, strict=True)]
        fmap = [k for k, t in enumerate(tables) for _ in range(max(1, len(t.get("features") or ())))]
        fp16 = all(t.get("dtype") == "fp16" for t in tables)
        weights = self._weights(sum(r * d for r, d, _, _ in specs), fp16, offset)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return self.tbe(
                specs,
                optimizer=self.sgd,
                pooling_mode=self.modes[pooled],
                learning_rate=LEARNING_RATE,
                weights_precision=self.sparse.FP16 if fp16 else self.sparse.FP32,
                device=self.torch.device("cpu"),
                feature_table_map=fmap,
                preallocated_host_buffers={"weights": weights},
            )

    def prepare(self, operators: list[dict[str, Any]], seed: int) -> list[tuple[Any, list[tuple[Any, Any]]]]:
        """(module, index batches) of each operator; rows capped over the whole device, each table's ids from its
        own generator for the round `seed` (`judge_indices.table_rng`)."""
        from judge_indices import batch_inputs, kept_rows, table_rng

        every = [t for op in operators for t in op["tables"]]
        rows = kept_rows(every)
        out, at, offset = [], 0, 0
        for op in operators:
            mine = rows[at : at + len(op["tables"])]
            at += len(op["tables"])
            module = self.build(op["tables"], mine, op["pooled"], offset)
            offset += sum(r * int(t["embedding_dim"]) for r, t in zip(mine, op["tables"], strict=True))
            rngs = [table_rng(seed, t) for t in op["tables"]]  # each table's ids: the round's, in every plan
            batches = [batch_inputs(op["tables"], mine, int(op["batch"]), rngs) for _ in range(BATCHES)]
            out.append((module, [(self.torch.from_numpy(i), self.torch.from_numpy(o)) for i, o in batches]))
        return out

    def time(self, request: dict[str, Any]) -> dict[str, Any]:
        prepared = self.prepare(request["operators"], int(request["seed"]))
        fwd_ms: list[float] = []
        bwd_ms: list[float] = []
        warmup, repeats = int(request["warmup"]), int(request["repeats"])
        for it in range(warmup + repeats):
            outs, fwd = [], 0.0
            for module, batches in prepared:
                idx, off = batches[it % len(batches)]
                t0 = time.perf_counter()
                outs.append(module(idx, off))
                fwd += time.perf_counter() - t0
            grads = [self.torch.ones_like(o) for o in outs]
            t0 = time.perf_counter()
            for out, grad in zip(outs, grads, strict=True):
                out.backward(grad)
            bwd = time.perf_counter() - t0
            if it >= warmup:
                fwd_ms.append(fwd * 1e3)
                bwd_ms.append(bwd * 1e3)
        return {"fwd_ms": fwd_ms, "bwd_ms": bwd_ms}


def serve(stdin: IO[str], reply: IO[str]) -> None:
    """Answer one device request per line until stdin closes."""
    worker = _Worker()

    def answer(request: dict[str, Any]) -> dict[str, Any]:
        try:
            return worker.time(request)
        except Exception as e:  # the judge reports it and stops
            return {"error": f"{type(e).__name__}: {e}"}

    answer_lines(stdin, reply, answer)


def main() -> None:
    serve(sys.stdin, private_reply())


if __name__ == "__main__":
    main()
