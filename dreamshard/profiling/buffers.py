"""Buffers the timed operators reuse from one build to the next (docs/architecture/measuring.md, "Measuring").

A device timing builds its fused operator afresh (the tables differ from one timing to the next), but two of
its inputs need not be fresh: neither the weights' values nor the upstream gradient's values change what the
timed iterations cost (finite SGD updates of finite gradients). Allocating and filling them per build would be a
measurable share of every timing, so each comes from one buffer that grows to the largest device timed and is
kept until the oracle closes (`clear_all`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

#: The upstream gradients' values come from this seed: every process times with the same gradients.
GRAD_SEED = 0


class HostArena:
    """One reusable host buffer per weight dtype for the CPU operator's weights (TBE's
    ``preallocated_host_buffers``). Building a TBE zero-fills its weights: a device holding gigabytes of tables
    spent 0.17 s of a 0.58 s timing in ``torch.zeros`` (measured, profile of a 120-table gate). The arena's pages
    are already resident, as freshly zeroed ones are."""

    def __init__(self) -> None:
        self._buffers: dict[torch.dtype, torch.Tensor] = {}

    def view(self, numel: int, dtype: torch.dtype, offset: int = 0) -> torch.Tensor:
        """`numel` elements of the `dtype` buffer from `offset` (a device's second operator takes the elements
        after its first one's, so their weights never share memory)."""
        buf = self._buffers.get(dtype)
        if buf is None or buf.numel() < offset + numel:
            self._buffers.pop(dtype, None)  # free the smaller one first: peak memory is one buffer
            buf = torch.zeros(offset + numel, dtype=dtype)
            self._buffers[dtype] = buf
        return buf[offset : offset + numel]

    def reserve(self, numel: int, dtype: torch.dtype) -> None:
        """Grow the `dtype` buffer to `numel` elements now, in one allocation. Growing as the devices come costs a
        fresh zero-filled buffer per larger device (first touch of every page each time: 0.14-0.51 s of a plan
        stage's race, bench/results/plan_stage.md); a batch of measurements that knows its largest device reserves
        it once."""
        buf = self._buffers.get(dtype)
        if numel > 0 and (buf is None or buf.numel() < numel):
            self._buffers.pop(dtype, None)  # free the smaller one first: peak memory is one buffer
            self._buffers[dtype] = torch.zeros(numel, dtype=dtype)

    def clear(self) -> None:
        self._buffers.clear()


class GradPool:
    """The upstream gradient of a timed backward: a view of one standard-normal buffer per (device, dtype).
    Drawing ``torch.randn`` per build cost 15 ms of each 0.27 s device timing on the CPU backend (2.6 s of a
    120-table `replan`, measured with cProfile). Backward passes read the gradient and never write it, so every
    operator may share the buffer; the values are seeded (`GRAD_SEED`), drawn on the host and copied once to the
    device."""

    def __init__(self, seed: int = GRAD_SEED) -> None:
        self.seed = seed
        self._buffers: dict[tuple[str, torch.dtype], torch.Tensor] = {}

    def get(self, shape: Sequence[int], device: torch.device, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        numel = math.prod(shape)
        key = (str(device), dtype)
        buf = self._buffers.get(key)
        if buf is None or buf.numel() < numel:
            self._buffers.pop(key, None)  # free the smaller one first: peak memory is one buffer
            gen = torch.Generator().manual_seed(self.seed)
            buf = torch.randn(numel, generator=gen, dtype=torch.float32).to(device=device, dtype=dtype)
            self._buffers[key] = buf
        return buf[:numel].view(*shape)

    def clear(self) -> None:
        self._buffers.clear()


HOST_ARENA = HostArena()
GRADS = GradPool()


def clear_all() -> None:
    """Free every kept buffer (the oracle that timed on them is closing)."""
    HOST_ARENA.clear()
    GRADS.clear()
