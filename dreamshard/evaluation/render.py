"""Rendering of plans and comparisons: rich tables (CLI), markdown (reports, Prefect artifacts), PNG plots.

Pure presentation: nothing here measures or plans.
"""

from __future__ import annotations

import io
from pathlib import Path

from rich.table import Table as RichTable

from dreamshard.documents import atomic_write_bytes
from dreamshard.errors import PlanError
from dreamshard.evaluation.compare import Comparison, SharderResult
from dreamshard.evaluation.render_limit import gap_markdown, limit_line, limit_ratio
from dreamshard.integrations.torchrec_carried import carried_lines
from dreamshard.placement.device_memory import MemoryBreakdown, device_memory
from dreamshard.placement.expand import expand_plan
from dreamshard.values import COST_COMPONENTS, Costs, Inventory, Plan
from dreamshard.values.drift import DriftCheck

#: The memory breakdown's columns (device_rows keys, GB): what each device holds, recomputed from the inventory.
MEMORY_PARTS: tuple[str, ...] = ("weights", "optimizer", "io")
#: ... shown too when a device keeps weights in host memory (UVM kernels on cuda): its device cache and the host
#: part, so that "memory" (the device's own, HBM) = weights + optimizer + io + cache - host reads beside them.
UVM_PARTS: tuple[str, ...] = ("cache", "host")


def memory_parts(rows: list[dict[str, object]]) -> tuple[str, ...]:
    """The memory columns of device rows: weights, optimizer, io, and cache and host when any device has host
    memory in use."""
    uvm = any(float(r.get("host_gb", 0.0)) > 0 for r in rows)  # type: ignore[arg-type]
    return (*MEMORY_PARTS, *UVM_PARTS) if uvm else MEMORY_PARTS


def _plan_costs(plan: Plan) -> tuple[Costs | None, str]:
    """The plan's costs and their label (Plan.cost_basis: measured / simulated / predicted)."""
    return plan.best_costs, plan.cost_basis or "none"


def _lb_ratio(cmp: Comparison, r: SharderResult) -> str:
    return f"{r.ratio_to_lower_bound:.3f}" if cmp.has_lower_bound else "-"


def reference_line(cmp: Comparison) -> str:
    """How the LB column is computed, with this comparison's figures (one line, for captions and reports)."""
    d = cmp.topology.num_devices
    lb = cmp.reference
    if not cmp.has_lower_bound:
        return "LB not measured (the gate's comparison: it decides on the plans, not on the tables alone)"
    how = (
        "the simulator's cost terms: no plan costs less"
        if cmp.backend.name == "simulator"
        else "assumes compute adds up across tables; fused kernels can beat it slightly"
    )
    return (
        f"LB = max(costliest table's smallest share alone {lb.max_single_ms:.3f}, even 1/{d} share: compute "
        f"{lb.compute_ms:.3f} + all-to-all {lb.comm_ms:.3f}) = {lb.total_ms:.3f} ms ({how})"
    )


def plan_memory(plan: Plan, inventory: Inventory) -> list[MemoryBreakdown]:
    """Each device's memory (weights, optimizer state, io buffers) recomputed from `inventory` under the plan's
    topology (dreamshard.placement.device_memory), never read from the plan."""
    units, placed = expand_plan(inventory, plan)
    return device_memory(units, placed, plan.topology, kernels=plan.kernels, load_factors=plan.cache_load_factors)


def device_rows(plan: Plan, inventory: Inventory | None = None) -> list[dict[str, object]]:
    """One row per device: tables, memory, four costs, total, bottleneck flag. With the plan's `inventory`,
    memory is recomputed from it (dreamshard.placement.device_memory) and broken down into `weights_gb`,
    `optimizer_gb` and `io_gb` (`memory_gb` is their sum); without it, `memory_gb` is the plan's own figure and
    there is no breakdown."""
    costs, _ = _plan_costs(plan)
    tables = plan.device_tables()
    cap = plan.topology.memory_per_device_gb
    memory = plan_memory(plan, inventory) if inventory is not None else None
    rows: list[dict[str, object]] = []
    bottleneck = costs.bottleneck_device if costs else -1
    for d in range(plan.topology.num_devices):
        used = memory[d].total_gb if memory is not None else plan.memory_per_device_gb[d]
        row: dict[str, object] = {
            "device": d,
            "tables": len(tables[d]),
            "memory_gb": round(used, 4),
            "memory_pct": round(100.0 * used / cap, 1),
        }
        if memory is not None:
            gb = memory[d].gb()
            row.update({f"{part}_gb": round(gb[part], 4) for part in (*MEMORY_PARTS, *UVM_PARTS)})
        if costs is not None:
            dc = costs.per_device[d]
            row.update({k: round(v, 4) for k, v in zip(COST_COMPONENTS, dc.as_list(), strict=True)})
            row["total_ms"] = round(dc.total, 4)
            row["bottleneck"] = d == bottleneck
        rows.append(row)
    return rows


def memory_caption(plan: Plan) -> str:
    """How memory is counted for `plan` (its topology's optimizer, memory model and reserve)."""
    tp = plan.topology
    model = "weights + optimizer state" if tp.memory_model == "weights" else "as TorchRec counts it (+ io buffers)"
    reserve = f", {tp.memory_reserve:.0%} of each device reserved" if tp.memory_reserve else ""
    return f"memory: {model}, optimizer {tp.optimizer}{reserve}"


def device_table(plan: Plan, inventory: Inventory | None = None) -> RichTable:
    """TorchRec-planner-stats-style box: per-device costs and memory, bottleneck marked; with the plan's
    `inventory`, memory is recomputed and broken down (weights / optimizer / io GB)."""
    costs, basis = _plan_costs(plan)
    title = (
        f"plan {plan.plan_id} · sharder {plan.sharder} · {plan.topology.num_devices}x{plan.topology.device_type}"
        f" · batch {plan.topology.batch_size}"
    )
    caption = f"costs: {basis} (ms)" + (f" · overall {costs.overall_ms:.3f} ms" if costs else "")
    if inventory is not None:
        caption += f" · {memory_caption(plan)}"
    rows = device_rows(plan, inventory)
    parts = memory_parts(rows) if inventory is not None else ()
    if "host" in parts:
        caption += " · memory GB = the device's own (HBM): weights + optimizer + io + cache - host"
    t = RichTable(title=title, caption=caption)
    for col in ("dev", "tables", "memory GB", "mem %", *(f"{p} GB" for p in parts)):
        t.add_column(col, justify="right")
    if costs:
        for col in ("fwd compute", "fwd comm", "bwd comm", "bwd compute", "total"):
            t.add_column(col, justify="right")
    for row in rows:
        cells = [
            str(row["device"]),
            str(row["tables"]),
            f"{row['memory_gb']:.3f}",
            f"{row['memory_pct']:.1f}",
            *(f"{row[f'{p}_gb']:.3f}" for p in parts),
        ]
        if costs:
            cells += [f"{row[k]:.3f}" for k in COST_COMPONENTS]
            mark = " *" if row["bottleneck"] else ""
            cells.append(f"{row['total_ms']:.3f}{mark}")
        t.add_row(*cells)
    return t


def device_table_markdown(plan: Plan, inventory: Inventory | None = None) -> str:
    """The device table as markdown; with the plan's `inventory`, memory recomputed and broken down."""
    costs, basis = _plan_costs(plan)
    rows = device_rows(plan, inventory)
    parts = memory_parts(rows) if inventory is not None else ()
    head = "| device | tables | memory GB | mem % |" + "".join(f" {p} GB |" for p in parts)
    sep = "|---:|---:|---:|---:|" + "---:|" * len(parts)
    if costs:
        head += " fwd compute | fwd comm | bwd comm | bwd compute | total ms |"
        sep += "---:|---:|---:|---:|---:|"
    lines = [head, sep]
    for row in rows:
        line = f"| {row['device']} | {row['tables']} | {row['memory_gb']:.3f} | {row['memory_pct']:.1f} |"
        line += "".join(f" {row[f'{p}_gb']:.3f} |" for p in parts)
        if costs:
            line += "".join(f" {row[k]:.3f} |" for k in COST_COMPONENTS)
            total = f"{row['total_ms']:.3f}"
            line += f" **{total}** |" if row["bottleneck"] else f" {total} |"
        lines.append(line)
    if costs:
        lines.append(f"\nOverall ({basis}): **{costs.overall_ms:.3f} ms**; bold = bottleneck device.")
    if inventory is not None:
        caption = memory_caption(plan)
        lines.append(f"\n{caption[0].upper()}{caption[1:]}.")
    return "\n".join(lines)


def world_line(cmp: Comparison) -> str:
    """The world the comparison charged, and its PROXY sentence when that is not the world the plans are for."""
    said = cmp.world.describe() if cmp.world is not None else "world: not recorded (a comparison written before it was)"
    return said + (f"; {cmp.world_proxy}" if cmp.world_proxy else "")


def comparison_table(cmp: Comparison) -> RichTable:
    b = cmp.backend
    t = RichTable(
        title=(
            f"{cmp.inventory_name}: {len(cmp.results[0].plan.table_names) if cmp.results else 0} tables on "
            f"{cmp.topology.num_devices} devices · backend {b.name} ({b.operator}, {b.num_threads} thread(s), "
            f"batch {cmp.topology.batch_size}) · {cmp.rounds} interleaved round(s)"
            + (" · SIMULATED" if b.is_simulated else "")
        ),
        caption=f"{reference_line(cmp)}\n{limit_line(cmp)}\n{world_line(cmp)}",
    )
    t.add_column("sharder", justify="left", overflow="fold", max_width=60)  # a reason a sharder is outside wraps
    for col in ("overall ms", "spread", "x best", "x LB", "x limit", "max mem GB"):
        t.add_column(col, justify="right")
    for r in sorted(cmp.results, key=lambda r: r.overall_ms):
        t.add_row(
            cmp.label(r, short=True) + (" (best)" if cmp.is_best(r) else ""),
            f"{r.overall_ms:.3f}",
            f"±{100 * r.spread / 2:.1f}%",
            f"{r.ratio_to_best:.3f}",
            _lb_ratio(cmp, r),
            limit_ratio(cmp, r),
            f"{max(r.plan.memory_per_device_gb):.3f}",
        )
    for label, o in _outside_rows(cmp):
        if o is None:
            t.add_row(label, "-", "-", "-", "-", "-", "-")
        else:
            mem = f"{max(o.plan.memory_per_device_gb):.3f}"
            spread = f"±{100 * o.spread / 2:.1f}%"
            t.add_row(label, f"{o.overall_ms:.3f}", spread, f"{o.ratio_to_best:.3f}", "-", "-", mem)
    return t


def _outside_rows(cmp: Comparison) -> list[tuple[str, SharderResult | None]]:
    """The rows that are not contenders: a plan that breaks a constraint its planner cannot be asked, measured as
    it is where it could be made without that constraint ("torchrec (breaks: table 'x' devices [3]: ...)"), and
    each sharder that cannot place the inventory, with its reason."""
    measured = {r.sharder: r for r in cmp.broken_results}
    rows: list[tuple[str, SharderResult | None]] = [
        (f"{name} (breaks: {why})", measured.get(name)) for name, why in cmp.breaks_constraints.items()
    ]
    return rows + [(f"{name} (cannot place: {why})", None) for name, why in cmp.infeasible.items()]


def comparison_markdown(cmp: Comparison) -> str:
    b = cmp.backend
    lines = [
        f"### {cmp.inventory_name} on {cmp.topology.num_devices} x {cmp.topology.device_type}",
        "",
        f"Backend `{b.name}` (operator `{b.operator}`, {b.num_threads} thread(s), batch {cmp.topology.batch_size}, "
        f"warm-up {b.warmup}, repeats {b.repeats}); {cmp.rounds} interleaved round(s)"
        + ("; **simulated costs, not a measurement**" if b.is_simulated else "; measured")
        + ".",
        "",
        "| sharder | overall ms | spread (max-min)/median | ratio to best | ratio to LB | ratio to limit |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in sorted(cmp.results, key=lambda r: r.overall_ms):
        name = f"**{cmp.label(r, short=True)}**" if cmp.is_best(r) else cmp.label(r, short=True)
        lines.append(
            f"| {name} | {r.overall_ms:.3f} | {100 * r.spread:.1f}% | {r.ratio_to_best:.3f} | {_lb_ratio(cmp, r)} | "
            f"{limit_ratio(cmp, r)} |"
        )
    lines += [
        f"| {label} | - | - | - | - | - |"
        if r is None
        else f"| {label} | {r.overall_ms:.3f} | {100 * r.spread:.1f}% | {r.ratio_to_best:.3f} | - | - |"
        for label, r in _outside_rows(cmp)
    ]
    lines += [
        "",
        reference_line(cmp) + ".",
        limit_line(cmp) + ".",
        f"Best baseline: `{cmp.best_baseline}`.",
        f"Charged in {world_line(cmp)}.",
        *gap_markdown(cmp),
    ]
    if cmp.carried:
        lines += ["", *(f"- {line}" for line in carried_lines(cmp.carried))]
    return "\n".join(lines)


def _measured(r: SharderResult) -> Costs:
    """A contender's measured costs (every contender of a comparison is measured)."""
    if r.plan.measured is None:
        raise PlanError(f"contender {r.sharder} of the comparison has no measured costs; measure it with compare")
    return r.plan.measured


def plot_comparison_png(cmp: Comparison) -> bytes:
    """PNG bytes: one panel per sharder, per-device stacked bars of the four cost components."""
    import matplotlib  # optional dependency: matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # optional dependency: matplotlib

    results = sorted(cmp.results, key=lambda r: r.overall_ms)
    n = len(results)
    cols = min(4, n)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 2.8 * rows), sharey=True, squeeze=False)
    colors = ("#4c72b0", "#dd8452", "#55a868", "#c44e52")
    measured = [_measured(r) for r in results]
    ymax = max((dc.total for costs in measured for dc in costs.per_device), default=1.0) if results else 1.0
    for ax, r, costs in zip(axes.flat, results, measured, strict=False):  # the grid may have spare axes
        bottom = [0.0] * len(costs.per_device)
        xs = list(range(len(costs.per_device)))
        for k, (comp, color) in enumerate(zip(COST_COMPONENTS, colors, strict=True)):
            vals = [dc.as_list()[k] for dc in costs.per_device]
            ax.bar(xs, vals, bottom=bottom, color=color, label=comp.replace("_", " "))
            bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
        if cmp.has_lower_bound:
            ax.axhline(cmp.lower_bound_ms, color="black", linestyle="--", linewidth=0.8)
        if cmp.limit is not None:
            ax.axhline(cmp.limit.total_ms, color="black", linestyle=":", linewidth=0.8)
        ax.set_title(f"{cmp.label(r, short=True)}: {r.overall_ms:.2f} ms (x{r.ratio_to_best:.2f})", fontsize=9)
        ax.set_xticks(xs)
        ax.set_xlabel("device", fontsize=8)
        ax.set_ylim(0, ymax * 1.1)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    axes.flat[0].set_ylabel("ms")
    axes.flat[0].legend(fontsize=7, loc="upper right")
    sim = " (SIMULATED)" if cmp.backend.is_simulated else ""
    fig.suptitle(
        f"{cmp.inventory_name}: per-device cost by sharder, backend {cmp.backend.name}{sim}; "
        "dashed = LB, dotted = limit",
        fontsize=10,
    )
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def plot_comparison(cmp: Comparison, path: str | Path) -> Path:
    """Write the PNG of plot_comparison_png to path (atomically)."""
    return atomic_write_bytes(path, plot_comparison_png(cmp))


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.1%}"


def trend_rows(history: list[DriftCheck]) -> list[dict[str, object]]:
    """Rows for a table of the trend (newest first): when, which plan, its reference, plan / reference now and at
    publishing, drift with its interval, the absolute change (the host's load: never decisive), verdict and path.
    A check made before paired checks shows its absolute drift, marked so."""
    return [
        {
            "checked_at": c.checked_at.strftime("%Y-%m-%d %H:%M:%S"),
            "plan_id": c.plan_id,
            "backend": c.backend,
            "reference": c.reference or "-",
            "ratio": f"{c.ratio:.4f} [{c.ratio_low:.4f}, {c.ratio_high:.4f}]" if c.paired else "-",
            "published": f"{c.published_ratio:.4f} ({c.ratio_source})" if c.paired else "-",
            "drift": f"{c.drift:+.1%} [{_pct(c.drift_low)}, {_pct(c.drift_high)}]"
            if c.paired
            else f"{c.drift:+.1%} (ms)",
            "now_ms": round(c.now_ms, 4),
            "host": _pct(c.host_change if c.paired else c.drift),
            "threshold": f"{c.threshold:.0%}",
            "drifted": c.drifted,
            "path": c.path,
        }
        for c in reversed(history)
    ]


def drift_line(c: DriftCheck) -> str:
    """One check in one line, as the flow log, the CLI and the drift report say it: the paired ratio now against
    the published one with its interval, the absolute figure beside it (not decisive), the verdict and its path."""
    head = f"{c.inventory_name} plan {c.plan_id}"
    if not c.paired:
        return (
            f"{head}: {c.now_ms:.4g} ms now, {c.drift:+.1%} vs its {c.basis} cost: {'DRIFTED' if c.drifted else 'ok'}"
        )
    then = "at publishing" if c.ratio_source == "gate" else "anchored"
    verdict = (
        f"DRIFTED: {c.path}: {c.path_reason}" if c.drifted else "ok" + (f" ({c.path_reason})" if c.path_reason else "")
    )
    interval = f"[{_pct(c.drift_low)}, {_pct(c.drift_high)}]"
    return (
        f"{head}: plan/{c.reference} {c.ratio:.4f} [{c.ratio_low:.4f}, {c.ratio_high:.4f}] now vs "
        f"{c.published_ratio:.4f} {then} ({c.drift:+.1%}, interval {interval}, threshold +-{c.threshold:.0%}, "
        f"{c.rounds} paired rounds); {c.now_ms:.4g} ms, {_pct(c.host_change)} vs its {c.basis} cost (the host's load, "
        f"not decisive): {verdict}"
    )
