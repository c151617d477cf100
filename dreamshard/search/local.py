"""Bounded local search over a finished placement, under the cost estimator (no hardware).

The measured overall cost of a placement is the largest device total, so the search works on the
estimator's predicted device totals: repeatedly take the predicted bottleneck device and try (a) moving
one of its tables to any other device with memory room and (b) swapping one of its tables with a table
of another device; apply the candidate with the lowest resulting predicted maximum if it lowers that
maximum by more than a relative `tol`, else stop; keep the result only if the total predicted gain is
at least `min_gain`. Every candidate of one round is scored in a single
batched call of the estimator's device heads, and the number of rounds is capped (`max_rounds`), so the
cost is bounded: a round scores k*D moves and k*min(N, max_swaps) swaps for k tables on the bottleneck.

This is a refinement of the policy's plan, not a replacement: it can only lower the predicted maximum,
and it trusts the cost net's per-device predictions (docs/architecture.md, "Learning": the policy and
this search both act on the estimated MDP). Memory limits are kept.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from dreamshard.learning.estimator import CostEstimator, device_states
from dreamshard.values import Topology


def _totals(est: CostEstimator, states: torch.Tensor) -> torch.Tensor:
    return est.device_costs(states).sum(-1).clamp_min(0.0)


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
) -> list[int]:
    """Improved device of each table (same order as `states` / `sizes` / `actions`). A move is taken only
    if it lowers the predicted maximum by more than `tol` (relative), and the refined plan is kept only if
    it lowers the predicted maximum by at least `min_gain` in total: gains smaller than the cost net's
    typical held-out error are not trusted (measured: tiny predicted gains on few-table tasks were
    measured losses). `movable` False: the unit stays where it is (row shards and replicas: their sharding
    type fixes their devices); it still counts in its device's cost and memory."""
    n, d_count = len(actions), topology.num_devices
    if n == 0 or d_count < 2 or max_rounds <= 0:
        return list(actions)
    dev = np.asarray(actions, dtype=np.int64).copy()
    size = np.asarray(sizes, dtype=np.int64)
    free = np.ones(n, dtype=bool) if movable is None else np.asarray(movable, dtype=bool)
    cap = topology.usable_memory_bytes
    start = list(actions)
    with torch.no_grad():
        dstate = device_states(states, torch.from_numpy(dev), d_count)
        used = np.bincount(dev, weights=size, minlength=d_count).astype(np.int64)
        initial = float(_totals(est, dstate).max())
        for _ in range(max_rounds):
            tot = _totals(est, dstate)
            b = int(torch.argmax(tot))
            cur = float(tot[b])
            if cur <= 0:
                break
            on_b = np.flatnonzero((dev == b) & free)
            if len(on_b) == 0:
                break
            others = [d for d in range(d_count) if d != b]
            order = torch.argsort(tot, descending=True).tolist()

            def rest_max(exclude: tuple[int, ...]) -> float:
                for d in order:
                    if d not in exclude:
                        return float(tot[d])
                return 0.0

            sb = states[torch.from_numpy(on_b)]  # (k, S)
            best_val, best = cur * (1.0 - tol), None
            # (a) moves: table i of b -> device d
            od = torch.tensor(others, dtype=torch.long)
            b_after = _totals(est, dstate[b].unsqueeze(0) - sb)  # (k,)
            d_after = _totals(est, dstate[od].unsqueeze(0) + sb.unsqueeze(1))  # (k, D-1)
            rest = torch.tensor([rest_max((b, d)) for d in others], dtype=tot.dtype)
            val = torch.maximum(torch.maximum(b_after.unsqueeze(1), d_after), rest.unsqueeze(0))
            fits = torch.from_numpy(used[others][None, :] + size[on_b][:, None] <= cap)
            val = val.masked_fill(~fits, float("inf"))
            k = int(torch.argmin(val))
            if float(val.flatten()[k]) < best_val:
                best_val, best = float(val.flatten()[k]), ("move", int(on_b[k // len(others)]), others[k % len(others)])
            # (b) swaps: table i of b <-> table j of another device
            off_b = np.flatnonzero((dev != b) & free)
            if len(off_b) and max_swaps > 0:
                ii = np.repeat(on_b, len(off_b))
                jj = np.tile(off_b, len(on_b))
                if len(ii) > max_swaps:  # bound the work: the largest-state pairs are not special, take a seeded slice
                    pick = np.random.default_rng(len(ii)).choice(len(ii), size=max_swaps, replace=False)
                    ii, jj = ii[pick], jj[pick]
                di = dev[jj]
                delta = states[torch.from_numpy(jj)] - states[torch.from_numpy(ii)]  # what b gains
                b_sw = _totals(est, dstate[b].unsqueeze(0) + delta)
                d_sw = _totals(est, dstate[torch.from_numpy(di)] - delta)
                rest_d = torch.tensor([rest_max((b, int(d))) for d in range(d_count)], dtype=tot.dtype)[
                    torch.from_numpy(di)
                ]
                val_sw = torch.maximum(torch.maximum(b_sw, d_sw), rest_d)
                ok = (used[b] - size[ii] + size[jj] <= cap) & (used[di] - size[jj] + size[ii] <= cap)
                val_sw = val_sw.masked_fill(~torch.from_numpy(ok), float("inf"))
                k = int(torch.argmin(val_sw))
                if float(val_sw[k]) < best_val:
                    best_val, best = float(val_sw[k]), ("swap", int(ii[k]), int(jj[k]))
            if best is None:
                break
            if best[0] == "move":
                _, i, d = best
                dstate[b] -= states[i]
                dstate[d] += states[i]
                used[b] -= size[i]
                used[d] += size[i]
                dev[i] = d
            else:
                _, i, j = best
                d = int(dev[j])
                dstate[b] += states[j] - states[i]
                dstate[d] += states[i] - states[j]
                used[b] += size[j] - size[i]
                used[d] += size[i] - size[j]
                dev[i], dev[j] = d, b
        final = float(_totals(est, dstate).max())
    if final > (1.0 - min_gain) * initial:
        return start
    return dev.tolist()
