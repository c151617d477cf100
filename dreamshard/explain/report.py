"""Every plan explained: the stats report (`plan --stats`, `evaluate --stats`, `plans show --stats`; what-if is
dreamshard.explain.whatif) -- docs/architecture/learning.md, "Plan stats and what-if".

Per device, a fused operator's compute is not the sum of its tables' costs, so a table's cost is its share of
its device: the device's compute (fwd + bwd) split in proportion to each unit's predicted compute alone, plus the
device's all-to-all (fwd + bwd) split in proportion to each unit's output bytes (`Table.output_elements_per_sample`:
a sequence table's follow its lookups). The shares of a device
add up to its total exactly, for the predicted costs and (where the plan was measured) for the measured ones.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from dreamshard.integrations.torchrec_carried import carried_lines, carried_report
from dreamshard.placement.device_memory import device_memory
from dreamshard.placement.expand import expand_plan
from dreamshard.values import GB, Costs, DeviceCost, Inventory, Plan, Table, Topology, parse_unit
from dreamshard.values.reports import DeviceStat, PlanStats, TableStat

if TYPE_CHECKING:
    from dreamshard.learning.planning_cost import PlanningCost

INDEX_BYTES = 8  # int64 indices
OUTPUT_BYTES = 4  # fp32 outputs


def _shares(device: DeviceCost, units: Sequence[Table], alone: Mapping[str, float]) -> dict[str, float]:
    """`device`'s total split over `units`: compute by predicted compute alone, comm by output bytes (evenly when
    those are all zero); the shares add up to the device's total."""
    compute = device.fwd_compute + device.bwd_compute
    comm = device.fwd_comm + device.bwd_comm
    weight = sum(alone[t.name] for t in units)
    width = sum(t.output_elements_per_sample for t in units)
    return {
        t.name: compute * (alone[t.name] / weight if weight > 0 else 1 / len(units))
        + comm * (t.output_elements_per_sample / width if width > 0 else 1 / len(units))
        for t in units
    }


def plan_stats(inventory: Inventory, plan: Plan, cost: PlanningCost) -> PlanStats:
    """The stats report of `plan` (its units, predicted by `cost`, and its measured costs when it has them)."""
    units, placed = expand_plan(inventory, plan)
    by_name = units.by_name()
    predicted = cost.predict(list(units.tables), placed)
    measured: Costs | None = plan.measured
    alone = {t.name: _compute_ms(cost.predict([t], {t.name: 0}).per_device[0]) for t in units.tables}
    n = plan.topology.num_devices
    on = [[by_name[u] for u, d in placed.items() if d == dev] for dev in range(n)]
    pred_share = _unit_shares(predicted, on, alone)
    meas_share = _unit_shares(measured, on, alone) if measured is not None else {}
    basis_share = meas_share if measured is not None else pred_share
    order = sorted(basis_share, key=lambda u: -basis_share[u])
    rank = {u: i + 1 for i, u in enumerate(order)}
    tables = tuple(
        TableStat(
            unit=t.name,
            type=plan.sharding_type(parse_unit(t.name).table),
            device=placed[t.name],
            size_gb=t.size_gb,
            dim=t.embedding_dim,
            pooling=t.pooling_factor,
            outputs=t.num_outputs,
            pooled=t.pooled,
            predicted_ms=pred_share[t.name],
            measured_ms=meas_share.get(t.name),
            rank=rank[t.name],
        )
        for t in sorted(units.tables, key=lambda t: rank[t.name])
    )
    basis_costs = measured if measured is not None else predicted
    totals = [d.total for d in basis_costs.per_device]
    b = max(range(n), key=lambda d: totals[d])
    mean = sum(totals) / n
    return PlanStats(
        plan_id=plan.plan_id,
        basis="measured" if measured is not None else "predicted",
        tables=tables,
        devices=_device_stats(units, placed, plan.topology, on, predicted, measured, b),
        imbalance=max(totals) / mean if mean > 0 else 1.0,
        critical=tuple(u for u in order if placed[u] == b),
        carried=carried_report(inventory),
    )


def _unit_shares(costs: Costs, on: Sequence[Sequence[Table]], alone: Mapping[str, float]) -> dict[str, float]:
    """Every unit's share of its device's total in `costs` (`on`: each device's units)."""
    out: dict[str, float] = {}
    for dev, units in enumerate(on):
        out.update(_shares(costs.per_device[dev], units, alone))
    return out


def _device_stats(
    units: Inventory,
    placed: Mapping[str, int],
    topology: Topology,
    on: Sequence[Sequence[Table]],
    predicted: Costs,
    measured: Costs | None,
    bottleneck: int,
) -> tuple[DeviceStat, ...]:
    """Each device's memory, batch input and output sizes and costs."""
    batch = topology.batch_size
    memory = device_memory(units, placed, topology)
    return tuple(
        DeviceStat(
            device=d,
            units=len(on[d]),
            memory_gb=memory[d].total / GB,
            weights_gb=memory[d].weights / GB,
            optimizer_gb=memory[d].optimizer / GB,
            io_gb=memory[d].io / GB,
            input_mb=sum(
                batch * t.pooling_factor * INDEX_BYTES + (batch + 1) * t.num_outputs * INDEX_BYTES for t in on[d]
            )
            / 1e6,
            output_mb=sum(batch * t.output_elements_per_sample * OUTPUT_BYTES for t in on[d]) / 1e6,
            predicted_ms=predicted.per_device[d].total,
            measured_ms=measured.per_device[d].total if measured is not None else None,
            bottleneck=d == bottleneck,
        )
        for d in range(topology.num_devices)
    )


def _compute_ms(d: DeviceCost) -> float:
    return d.fwd_compute + d.bwd_compute


def planning_cost_for(model_dir: Path | None, topology: Topology) -> PlanningCost:
    """The learned cost (members' mean, the model's measured comm) of the model in `model_dir` (None: the
    packaged one) for `topology`: what the stats and what-if predict with. The model (and torch) loads here, not
    with this module: the pipeline's publish step imports the report and may render it without a model."""
    from dreamshard.learning.model_store import load_model  # loads torch
    from dreamshard.learning.planning_cost import cost_factory  # loads torch

    model = load_model(model_dir, require_policy=False)
    return cost_factory(model.cost_net, model.card.comm_models, 0.0)(topology)


def stats_markdown(stats: PlanStats, top: int = 15) -> str:
    """The stats report as markdown (the Prefect artifact of a published plan)."""
    measured = stats.basis == "measured"
    lines = [
        f"Plan `{stats.plan_id}`: the {min(top, len(stats.tables))} costliest of {len(stats.tables)} units "
        f"({stats.basis}; a unit's share of its device). Imbalance max/mean **{stats.imbalance:.3f}**; the "
        f"maximum is set by {', '.join(f'`{u}`' for u in stats.critical[:5])}.",
        "",
        "| rank | unit | type | device | GB | dim | pooling | predicted ms |" + (" measured ms |" if measured else ""),
        "|---:|---|---|---:|---:|---:|---:|---:|" + ("---:|" if measured else ""),
    ]
    for t in stats.tables[:top]:
        kind = t.type if t.pooled else f"{t.type} (sequence)"
        lines.append(
            f"| {t.rank} | `{t.unit}` | {kind} | {t.device} | {t.size_gb:.3f} | {t.dim} | {t.pooling:g} | "
            f"{t.predicted_ms:.3f} |" + (f" {t.measured_ms:.3f} |" if t.measured_ms is not None else "")
        )
    lines += [
        "",
        "| device | units | memory GB | weights GB | optimizer GB | io GB | input MB | output MB | "
        "predicted ms |" + (" measured ms |" if measured else ""),
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|" if measured else ""),
    ]
    for d in stats.devices:
        mark = " (max)" if d.bottleneck else ""
        lines.append(
            f"| {d.device}{mark} | {d.units} | {d.memory_gb:.3f} | {d.weights_gb:.3f} | "
            f"{d.optimizer_gb:.3f} | {d.io_gb:.3f} | {d.input_mb:.2f} | {d.output_mb:.2f} | "
            f"{d.predicted_ms:.3f} |" + (f" {d.measured_ms:.3f} |" if d.measured_ms is not None else "")
        )
    if stats.carried:
        lines += ["", *(f"- {line}" for line in carried_lines(stats.carried))]
    return "\n".join(lines) + "\n"
