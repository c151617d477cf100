"""Bounded local search over a finished placement, under the cost estimator (docs/architecture/learning.md, "Learning").

The overall cost is the largest device total, so each round takes the predicted bottleneck device and applies the
best of (a) moving one of its units to another device with memory room and (b) swapping one of its units with one
of another device, if that lowers the predicted maximum by more than a relative `tol`; the result is kept only if
the total predicted gain is at least `min_gain`. A round scores all its candidates in one batched call of the
estimator's device heads (k*D moves and at most `max_swaps` swaps for k units on the bottleneck), and rounds are
capped (`max_rounds`). It can only lower the predicted maximum, and memory limits (device and host) are kept, as
are the devices each unit may use (its table's `devices` constraint; fixed units do not move).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from dreamshard.learning.estimator import CostEstimator, device_states
from dreamshard.placement.device_memory import unit_needs
from dreamshard.placement.options import allowed_devices
from dreamshard.values import GB, Inventory, Topology


@dataclass(frozen=True)
class UnitLimits:
    """What local search keeps for each unit of a placement (in the units' order): its device and host memory
    bytes, whether it may move (not fixed), and the devices it may use (units x devices, bool)."""

    sizes: list[int]
    host_sizes: list[int]
    movable: list[bool]
    allowed: np.ndarray


def unit_limits(units: Inventory, topology: Topology, fixed: Mapping[str, int]) -> UnitLimits:
    """The limits of `units`: a `fixed` unit ({unit: device}) stays on its device, the others may use the devices
    their tables' `devices` constraint allows."""
    needs = unit_needs(units, topology)
    tables = list(units.tables)
    allowed = np.zeros((len(tables), topology.num_devices), dtype=bool)
    for i, t in enumerate(tables):
        allowed[i, [fixed[t.name]] if t.name in fixed else list(allowed_devices(t, topology))] = True
    return UnitLimits(
        sizes=[needs[t.name].total for t in tables],
        host_sizes=[needs[t.name].host for t in tables],
        movable=[t.name not in fixed for t in tables],
        allowed=allowed,
    )


def _device_totals(est: CostEstimator, states: torch.Tensor) -> torch.Tensor:
    return est.device_costs(states).sum(-1).clamp_min(0.0)


#: a candidate change: ("move", unit, device) or ("swap", unit on the bottleneck, unit of another device)
Change = tuple[str, int, int]


def refine_placement(
    est: CostEstimator,
    states: torch.Tensor,
    sizes: Sequence[int],
    actions: Sequence[int],
    topology: Topology,
    max_rounds: int = 64,
    max_swaps: int = 4096,
    tol: float = 5e-3,
    min_gain: float = 0.03,
    movable: Sequence[bool] | None = None,
    allowed: np.ndarray | None = None,
    host_sizes: Sequence[int] | None = None,
) -> list[int]:
    """Improved device of each table (same order as `states` / `sizes` / `actions`). A move is taken only
    if it lowers the predicted maximum by more than `tol` (relative), and the refined plan is kept only if
    it lowers the predicted maximum by at least `min_gain` in total: gains smaller than the cost net's
    typical held-out error are not trusted (tiny predicted gains on few-table tasks were measured losses).
    `movable` False: the unit stays where it is (row shards and replicas: their sharding type fixes their
    devices); it still counts in its device's cost and memory. `allowed` (units x devices, bool): where each unit
    may go (None: anywhere); `host_sizes`: each unit's host memory (DDR) bytes (None: none)."""
    if len(actions) == 0 or topology.num_devices < 2 or max_rounds <= 0:
        return list(actions)
    with torch.no_grad():
        search = _LocalSearch(est, states, sizes, actions, topology, movable, allowed, host_sizes)
        initial = search.bottleneck_ms()
        for _ in range(max_rounds):
            if not search.improve(tol, max_swaps):
                break
        final = search.bottleneck_ms()
    if final > (1.0 - min_gain) * initial:
        return list(actions)
    return search.dev.tolist()


def _rest_max(tot: torch.Tensor, order: Sequence[int], exclude: tuple[int, ...]) -> float:
    """The largest device total outside `exclude` (`order`: devices by total, largest first)."""
    for d in order:
        if d not in exclude:
            return float(tot[d])
    return 0.0


class _LocalSearch:
    """The placement being refined: each unit's device, each device's state and used memory."""

    def __init__(
        self,
        est: CostEstimator,
        states: torch.Tensor,
        sizes: Sequence[int],
        actions: Sequence[int],
        topology: Topology,
        movable: Sequence[bool] | None,
        allowed: np.ndarray | None = None,
        host_sizes: Sequence[int] | None = None,
    ) -> None:
        self.est, self.states, self.d_count = est, states, topology.num_devices
        n = len(actions)
        self.dev = np.asarray(actions, dtype=np.int64).copy()
        self.size = np.asarray(sizes, dtype=np.int64)
        self.hsize = np.zeros(n, dtype=np.int64) if host_sizes is None else np.asarray(host_sizes, dtype=np.int64)
        self.free = np.ones(n, dtype=bool) if movable is None else np.asarray(movable, dtype=bool)
        self.allowed = np.ones((n, self.d_count), dtype=bool) if allowed is None else np.asarray(allowed, dtype=bool)
        self.cap = topology.usable_memory_bytes
        self.hcap = int(topology.host_memory_per_device_gb * GB)
        self.dstate = device_states(states, torch.from_numpy(self.dev), self.d_count)
        self.used = np.bincount(self.dev, weights=self.size, minlength=self.d_count).astype(np.int64)
        self.hused = np.bincount(self.dev, weights=self.hsize, minlength=self.d_count).astype(np.int64)

    def bottleneck_ms(self) -> float:
        return float(_device_totals(self.est, self.dstate).max())

    def improve(self, tol: float, max_swaps: int) -> bool:
        """Apply the best move or swap off the predicted bottleneck device if it lowers the predicted maximum
        by more than `tol` (relative); False when there is none."""
        tot = _device_totals(self.est, self.dstate)
        b = int(torch.argmax(tot))
        cur = float(tot[b])
        if cur <= 0:
            return False
        on_b = np.flatnonzero((self.dev == b) & self.free)
        if len(on_b) == 0:
            return False
        order = torch.argsort(tot, descending=True).tolist()
        best_val, best = cur * (1.0 - tol), None
        move_val, move = self._best_move(b, on_b, tot, order)
        if move_val < best_val:  # a swap must beat the best move strictly
            best_val, best = move_val, move
        swap = self._best_swap(b, on_b, tot, order, max_swaps)
        if swap is not None and swap[0] < best_val:
            best_val, best = swap
        if best is None:
            return False
        self._apply(b, best)
        return True

    def _best_move(self, b: int, on_b: np.ndarray, tot: torch.Tensor, order: Sequence[int]) -> tuple[float, Change]:
        """The lowest predicted maximum after moving one unit of `b` to a device with room, and that move."""
        others = [d for d in range(self.d_count) if d != b]
        sb = self.states[torch.from_numpy(on_b)]  # (k, S)
        od = torch.tensor(others, dtype=torch.long)
        b_after = _device_totals(self.est, self.dstate[b].unsqueeze(0) - sb)  # (k,)
        d_after = _device_totals(self.est, self.dstate[od].unsqueeze(0) + sb.unsqueeze(1))  # (k, D-1)
        rest = torch.tensor([_rest_max(tot, order, (b, d)) for d in others], dtype=tot.dtype)
        val = torch.maximum(torch.maximum(b_after.unsqueeze(1), d_after), rest.unsqueeze(0))
        fits = torch.from_numpy(
            (self.used[others][None, :] + self.size[on_b][:, None] <= self.cap)
            & (self.hused[others][None, :] + self.hsize[on_b][:, None] <= self.hcap)
            & self.allowed[on_b][:, others]
        )
        val = val.masked_fill(~fits, float("inf"))
        k = int(torch.argmin(val))
        return float(val.flatten()[k]), ("move", int(on_b[k // len(others)]), others[k % len(others)])

    def _best_swap(
        self, b: int, on_b: np.ndarray, tot: torch.Tensor, order: Sequence[int], max_swaps: int
    ) -> tuple[float, Change] | None:
        """The lowest predicted maximum after swapping a unit of `b` with one of another device (memory kept), and
        that swap; None when no unit can swap. More than `max_swaps` pairs: a seeded sample of them."""
        off_b = np.flatnonzero((self.dev != b) & self.free)
        if not len(off_b) or max_swaps <= 0:
            return None
        ii = np.repeat(on_b, len(off_b))
        jj = np.tile(off_b, len(on_b))
        if len(ii) > max_swaps:  # bound the work: the largest-state pairs are not special, take a seeded slice
            pick = np.random.default_rng(len(ii)).choice(len(ii), size=max_swaps, replace=False)
            ii, jj = ii[pick], jj[pick]
        di = self.dev[jj]
        delta = self.states[torch.from_numpy(jj)] - self.states[torch.from_numpy(ii)]  # what b gains
        b_sw = _device_totals(self.est, self.dstate[b].unsqueeze(0) + delta)
        d_sw = _device_totals(self.est, self.dstate[torch.from_numpy(di)] - delta)
        rest_by_device = torch.tensor([_rest_max(tot, order, (b, d)) for d in range(self.d_count)], dtype=tot.dtype)
        val_sw = torch.maximum(torch.maximum(b_sw, d_sw), rest_by_device[torch.from_numpy(di)])
        ok = self._swap_fits(b, ii, jj, di)
        val_sw = val_sw.masked_fill(~torch.from_numpy(ok), float("inf"))
        k = int(torch.argmin(val_sw))
        return float(val_sw[k]), ("swap", int(ii[k]), int(jj[k]))

    def _swap_fits(self, b: int, ii: np.ndarray, jj: np.ndarray, di: np.ndarray) -> np.ndarray:
        """Which swaps of unit ii (on b) with unit jj (on di) keep both devices within memory and both units on
        devices they may use."""
        ok = self.allowed[ii, di] & self.allowed[jj, b]
        for size, used, cap in ((self.size, self.used, self.cap), (self.hsize, self.hused, self.hcap)):
            ok &= (used[b] - size[ii] + size[jj] <= cap) & (used[di] - size[jj] + size[ii] <= cap)
        return ok

    def _apply(self, b: int, change: Change) -> None:
        kind, i, other = change
        if kind == "move":
            d = other
            self.dstate[b] -= self.states[i]
            self.dstate[d] += self.states[i]
            for size, used in ((self.size, self.used), (self.hsize, self.hused)):
                used[b] -= size[i]
                used[d] += size[i]
            self.dev[i] = d
        else:
            j = other
            d = int(self.dev[j])
            self.dstate[b] += self.states[j] - self.states[i]
            self.dstate[d] += self.states[i] - self.states[j]
            for size, used in ((self.size, self.used), (self.hsize, self.hused)):
                used[b] += size[j] - size[i]
                used[d] += size[i] - size[j]
            self.dev[i], self.dev[j] = d, b
