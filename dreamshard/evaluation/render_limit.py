"""Rendering of a comparison's limit (dreamshard.evaluation.limit): the "x limit" cells, the line saying how the limit
was made, and the table of where each contender's cost above it goes. Pure presentation."""

from __future__ import annotations

from dreamshard.evaluation.compare import Comparison, SharderResult


def limit_ratio(cmp: Comparison, r: SharderResult) -> str:
    """A contender's "x limit" cell ("-" without a limit)."""
    return f"{r.ratio_to_limit:.3f}" if cmp.limit is not None and r.ratio_to_limit > 0 else "-"


def limit_line(cmp: Comparison) -> str:
    """How the limit is made, with this comparison's figures (one line, for captions and reports)."""
    lim = cmp.limit
    if lim is None:
        return "limit not measured (no lower bound measured: the gate's comparison)"
    d = cmp.topology.num_devices
    fusion = f"x{lim.fusion_ratio:.2f} the tables alone" if lim.fusion_ratio > 0 else "fusion ratio unknown"
    return (
        f"limit = max(costliest table's smallest share alone {lim.max_single_ms:.3f}, even share on {d} devices: "
        f"fixed {lim.fixed_ms:.3f} + fused compute {lim.compute_ms - lim.fixed_ms:.3f} (as {lim.fused_by} fused: "
        f"{fusion}, above the fixed cost) + exchange {lim.comm_ms:.3f}) = {lim.total_ms:.3f} ms; no measured plan "
        f"costs less, nor any plan that fuses no better than the best measured one"
    )


def gap_markdown(cmp: Comparison) -> list[str]:
    """Markdown lines: per contender, its cost above the limit's even share split into noise, imbalance, fusion and
    exchange (none without a limit)."""
    lim = cmp.limit
    if lim is None:
        return []
    lines = [
        "",
        f"Where each contender's cost above the even share ({lim.even_ms:.3f} ms: fixed {lim.fixed_ms:.3f} + fused "
        f"compute {lim.compute_ms - lim.fixed_ms:.3f} + exchange {lim.comm_ms:.3f}) goes, ms:",
        "",
        "| sharder | overall ms | x limit | noise | imbalance | fusion | exchange |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in sorted(cmp.results, key=lambda r: r.overall_ms):
        gap = cmp.gap(r)
        if gap is None:
            continue
        lines.append(
            f"| {cmp.label(r, short=True)} | {r.overall_ms:.3f} | {limit_ratio(cmp, r)} | {gap.noise_ms:.3f} | "
            f"{gap.imbalance_ms:.3f} | {gap.fusion_ms:.3f} | {gap.exchange_ms:.3f} |"
        )
    lines += [
        "",
        "Noise: the overall (the median round's slowest device) above the slowest device's median; imbalance: the "
        "slowest device above the mean device; fusion: the mean device's compute above the limit's (fused less well "
        "than the best measured plan, or on fewer devices); exchange: the mean device's exchange above the least any "
        "plan pays.",
    ]
    return lines
