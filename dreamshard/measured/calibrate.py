"""Calibration at plan time: correct the cost model for one inventory on the backend that will run it
(docs/architecture/learning.md, "Calibration").

A model that never saw an inventory mispredicts some of its tables (a histogram it assumed, a size it saw rarely)
and the backend's speed as a whole. Before searching, `calibrate` measures groups of the inventory's tables, one
group per device of a probe placement (a few tables alone, then random partitions of every table into groups as
small as the budget allows: each timing costs about the same), and fits by ridge least squares, separately for
forward and backward compute:

    measured(group) = scale * predicted(group) + sum over the group's tables of bias(table)

`scale` corrects the backend's speed (the median ratio of measured to predicted), `bias` each table's own
error, fitted on what the scale leaves (shrunk towards 0 by the ridge, so a table seen in one probe moves less).
The last probe placement is held out: each form of the fit (`FORMS`: nothing, the scale alone, scale and biases
at two ridge strengths) is fitted on the other probes and the one with the least held-out prediction error (mean
absolute percentage) is refitted on every probe, so calibration never makes the held-out error worse than the
uncorrected model's; the report says which form and the error before / after (`CalibrationReport`).
`CalibratedCost` is the planning cost with the correction applied: search, verification's ranking and refinement
all cost plans with it. The probes are ordinary device timings: the oracle's corpus keeps them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from dreamshard.learning.cost_model import COMPUTE
from dreamshard.learning.planning_cost import PlanningCost
from dreamshard.profiling.oracle import Oracle
from dreamshard.values import MAX_DEVICE_GB, Inventory, Table, Topology
from dreamshard.values.calibration import CalibrationReport
from dreamshard.values.units import parse_unit

#: ridge penalty on each per-table bias, in probes: a bias seen in one probe is shrunk by 1 / (1 + RIDGE)
RIDGE = 0.3
#: the forms of the fit the held-out probes choose from: (name, fit a scale, ridge of the biases or None: no bias)
FORMS: tuple[tuple[str, bool, float | None], ...] = (
    ("none", False, None),
    ("scale", True, None),
    ("scale+bias", True, RIDGE),
    ("scale+shrunk bias", True, 10 * RIDGE),
)
#: tables measured alone first, which also times one device timing for the budget
FIRST_SINGLES = 8
#: largest group of tables one probe device holds
MAX_GROUP = 6
#: probe placements never exceed this many groups (devices) each
MAX_GROUPS = 256
#: the largest calibration budget a plan may ask for (plan.calibrate_seconds)
MAX_CALIBRATE_SECONDS = 600.0


@dataclass(frozen=True)
class Correction:
    """The fitted correction: forward / backward compute scale and each table's forward / backward bias (ms)."""

    scale: tuple[float, float]
    bias: Mapping[str, tuple[float, float]]

    def unit_bias(self, unit: Table, parent: Table | None) -> tuple[float, float]:
        """A unit's share of its table's bias: a column shard's share of the dim, a row shard's of the rows, a
        replica's of the batch (1 / devices is applied by the caller's batch split, so the whole bias here)."""
        ref = parse_unit(unit.name)
        fwd, bwd = self.bias.get(ref.table, (0.0, 0.0))
        if parent is None or ref.kind == "table":
            return fwd, bwd
        share = unit.embedding_dim / parent.embedding_dim if ref.kind == "column" else 1.0
        if ref.kind == "row":
            share = unit.num_embeddings / max(parent.num_embeddings, 1)
        return fwd * share, bwd * share


class CalibratedCost(PlanningCost):
    """A planning cost with a `Correction` applied to each device's compute (module docstring). Its state has two
    more columns than the base one: the summed forward and backward biases of the device's units."""

    def __init__(self, base: PlanningCost, correction: Correction, inventory: Inventory) -> None:
        super().__init__(base.ensemble, base.topology, base.comm, base.risk, base.source)
        self.collectives = base.collectives  # the collectives' models fitted so far, shared
        self.uncalibrated = base  # the cost before calibration (the plan stage's search-only plan is searched on it)
        self.correction = correction
        self.parents = inventory.by_name()
        self.state_dim = self.base + 6

    def encode(self, tables: Sequence[Table]) -> torch.Tensor:
        states = super().encode(tables)
        extra = [self.correction.unit_bias(t, self.parents.get(parse_unit(t.name).table)) for t in tables]
        return torch.cat([states, torch.tensor(extra, dtype=states.dtype).reshape(len(tables), 2)], dim=1)

    def member_costs(self, states: torch.Tensor) -> torch.Tensor:
        costs = super().member_costs(states[..., : self.base + 4]).clone()
        nonempty = (states[..., self.base] > 0.5).to(states.dtype)
        for i, component in enumerate(COMPUTE):
            bias = states[..., self.base + 4 + i] * nonempty
            costs[..., component] = self.correction.scale[i] * costs[..., component] + bias
        return costs.clamp_min(0.0)


def _random_groups(names: list[str], size: int, rng: np.random.Generator) -> list[list[str]]:
    """A random partition of `names` into groups of `size` (the last may be smaller)."""
    order = [str(n) for n in rng.permutation(names)]
    return [order[i : i + size] for i in range(0, len(order), size)]


def _chunks(groups: list[list[str]]) -> list[list[list[str]]]:
    """Probe placements of at most MAX_GROUPS devices each."""
    return [groups[i : i + MAX_GROUPS] for i in range(0, len(groups), MAX_GROUPS)]


def _group_size(tables: int, per_timing_s: float, left_s: float) -> int:
    """The smallest group size whose probe placements of every table fit the time left at least twice (one to
    fit, one held out): each table alone when the budget allows."""
    timings = max(left_s / max(per_timing_s, 1e-6), 1.0)
    return int(min(MAX_GROUP, max(1, math.ceil(2 * tables / timings))))


@dataclass
class _Probes:
    """Every probed group: its tables, the predicted and the measured forward / backward compute (ms)."""

    groups: list[list[str]]
    predicted: list[tuple[float, float]]
    measured: list[tuple[float, float]]
    round_of: list[int]


def _measure(
    inventory: Inventory, topology: Topology, groups: list[list[str]], cost: PlanningCost, oracle: Oracle
) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """Measure `groups` (one device each) and predict them with the uncorrected cost."""
    probe_topology = Topology.model_validate(
        {
            **topology.model_dump(),
            "num_devices": len(groups),
            "devices_per_host": None,
            "memory_per_device_gb": MAX_DEVICE_GB,
        }
    )
    placement = {n: d for d, g in enumerate(groups) for n in g}
    measured = oracle.measure(inventory, placement, probe_topology, kind="single").costs.per_device
    by = inventory.by_name()
    predicted = []
    with torch.no_grad():
        for g in groups:
            tables = [by[n] for n in g]
            member = cost.mean_device_costs(cost.placement_states(tables, dict.fromkeys(g, 0))[:1])[0]
            predicted.append((float(member[COMPUTE[0]]), float(member[COMPUTE[1]])))
    return predicted, [(m.fwd_compute, m.bwd_compute) for m in measured]


def _collect(
    inventory: Inventory, topology: Topology, cost: PlanningCost, oracle: Oracle, seconds: float, seed: int
) -> _Probes:
    """Probe placements until the budget is spent: the first `FIRST_SINGLES` tables alone (they time a timing),
    then random partitions into groups of the size the budget allows (`_group_size`), at least two of them."""
    rng = np.random.default_rng(seed)
    names = [t.name for t in inventory.tables]
    probes = _Probes([], [], [], [])
    start = time.perf_counter()

    def take(groups: list[list[str]], round_no: int) -> None:
        predicted, measured = _measure(inventory, topology, groups, cost, oracle)
        probes.groups.extend(groups)
        probes.predicted.extend(predicted)
        probes.measured.extend(measured)
        probes.round_of.extend([round_no] * len(groups))

    first = [[n] for n in names[:FIRST_SINGLES]]
    take(first, 0)
    per_timing = (time.perf_counter() - start) / len(first)
    size = _group_size(len(names), per_timing, seconds - (time.perf_counter() - start))
    round_no = 1
    while round_no <= 2 or time.perf_counter() - start + per_timing * len(names) / size <= seconds:
        for chunk in _chunks(_random_groups(names, size, rng)):
            take(chunk, round_no)
        round_no += 1
    return probes


def _fit(
    probes: _Probes, names: list[str], rows: Sequence[int], with_scale: bool = True, ridge: float | None = RIDGE
) -> Correction:
    """The fit of the module docstring on the probes `rows`, forward and backward separately, in two steps so that
    the scale and the biases cannot trade off: the scale is the median ratio of measured to predicted over the
    probes (a few badly predicted tables do not move it; 1 without `with_scale`), then each table's bias is
    ridge-regressed on what the scale leaves (none when `ridge` is None)."""
    index = {n: i for i, n in enumerate(names)}
    x = np.zeros((len(rows), len(names)))
    for r, k in enumerate(rows):
        for n in probes.groups[k]:
            x[r, index[n]] = 1.0
    scales, biases = [], []
    for c in range(2):
        y = np.array([probes.measured[k][c] for k in rows])
        p = np.array([probes.predicted[k][c] for k in rows])
        ratios = y[p > 0] / p[p > 0]
        scale = float(np.median(ratios)) if with_scale and len(ratios) and np.median(ratios) > 0 else 1.0
        residual = y - scale * p
        coef = (
            np.linalg.solve(x.T @ x + ridge * np.eye(len(names)), x.T @ residual)
            if ridge is not None
            else np.zeros(len(names))
        )
        scales.append(scale)
        biases.append(coef)
    bias = {n: (float(biases[0][i]), float(biases[1][i])) for n, i in index.items()}
    return Correction(scale=(scales[0], scales[1]), bias=bias)


def _mape(probes: _Probes, rows: Sequence[int], correction: Correction | None) -> float:
    """Mean absolute percentage error of the (corrected) prediction of the probes `rows`' total compute."""
    errors = []
    for k in rows:
        fwd, bwd = probes.predicted[k]
        if correction is not None:
            biases = [correction.bias.get(n, (0.0, 0.0)) for n in probes.groups[k]]
            fwd = correction.scale[0] * fwd + sum(b[0] for b in biases)
            bwd = correction.scale[1] * bwd + sum(b[1] for b in biases)
        measured = sum(probes.measured[k])
        errors.append(abs(fwd + bwd - measured) / max(measured, 1e-9))
    return float(np.mean(errors)) if errors else math.nan


def calibrate(
    inventory: Inventory, topology: Topology, cost: PlanningCost, oracle: Oracle, seconds: float, seed: int = 0
) -> tuple[CalibratedCost, CalibrationReport]:
    """The planning cost corrected for `inventory` on `oracle`'s backend (module docstring), and its report."""
    start = time.perf_counter()
    probes = _collect(inventory, topology, cost, oracle, seconds, seed)
    names = [t.name for t in inventory.tables]
    last = max(probes.round_of)  # a whole random partition (rounds 1.. each cover every table)
    fit_rows = [k for k, r in enumerate(probes.round_of) if r != last]
    held = [k for k, r in enumerate(probes.round_of) if r == last]
    errors = {
        name: _mape(probes, held, _fit(probes, names, fit_rows, with_scale, ridge)) for name, with_scale, ridge in FORMS
    }
    form = min(FORMS, key=lambda f: (errors[f[0]], FORMS.index(f)))  # ties: the simpler form
    correction = _fit(probes, names, range(len(probes.groups)), form[1], form[2])
    report = CalibrationReport(
        backend=oracle.info.name,
        probes=len(probes.groups),
        placements=last + 1,
        seconds=round(time.perf_counter() - start, 3),
        scale_fwd=round(correction.scale[0], 4),
        scale_bwd=round(correction.scale[1], 4),
        mape_before=round(_mape(probes, held, None), 4),
        mape_after=round(errors[form[0]], 4),
        fit=form[0],
    )
    return CalibratedCost(cost, correction, inventory), report
