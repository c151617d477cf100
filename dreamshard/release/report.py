"""The release gate's decision and its report: the candidate's geomean ratio to the shipped model and to each
task's best heuristic, with paired bootstrap intervals; released only if both upper ends are within bounds.

Every plan-quality figure here is the oracle's (the planner's own measuring backend and collective fits), and the
rendered report labels it "oracle-measured": the library cannot grade itself independently. On the analytic
simulator (only with release.allow_simulated) it is labelled "simulated", never a measurement. The independent
judge's figures for the same held-out tasks come from `bench/heldout.py` (docs/benchmarks/judge.md)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from dreamshard.config.release import ReleaseConfig
from dreamshard.learning.model_store import SIMULATED_BACKENDS
from dreamshard.release.bench import CANDIDATE, SHIPPED, TaskResult
from dreamshard.release.stats import RatioInterval, geomean_interval, round_log_ratios
from dreamshard.values import BackendInfo
from dreamshard.values.ids import utcnow


class ReleaseReport(BaseModel):
    """What the release bench measured and what the gate decided."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    candidate: str  # model versions
    shipped: str | None
    backend: BackendInfo
    rounds: int
    tasks: list[TaskResult]
    vs_shipped: RatioInterval | None
    vs_best: RatioInterval
    max_vs_shipped: float
    max_vs_best: float
    released: bool
    reasons: list[str]  # why not, one per failed bound (empty when released)
    created_at: datetime = Field(default_factory=utcnow)

    @property
    def basis(self) -> str:
        """What the figures are: "oracle-measured" on a measuring backend, "simulated" on the analytic simulator
        (never called a measurement)."""
        return "simulated" if self.backend.name in SIMULATED_BACKENDS else "oracle-measured"

    def summary(self) -> str:
        """One line: the decision and the two intervals, labelled with their basis."""
        parts = [f"vs best heuristic {self.vs_best} (bound {self.max_vs_best:g})"]
        if self.vs_shipped is not None:
            parts.insert(0, f"vs shipped {self.shipped} {self.vs_shipped} (bound {self.max_vs_shipped:g})")
        verdict = "released" if self.released else "refused"
        return f"{verdict}: model {self.candidate} {self.basis} geomean " + "; ".join(parts)


def decide(
    results: list[TaskResult], cfg: ReleaseConfig, candidate: str, shipped: str | None, backend: BackendInfo
) -> ReleaseReport:
    """The gate: the upper ends of the paired intervals against the configured bounds."""
    to_best = [round_log_ratios(r.samples_ms[CANDIDATE], r.samples_ms[r.best_heuristic]) for r in results]
    vs_best = geomean_interval(to_best, cfg.confidence, cfg.bootstrap, cfg.seed)
    vs_shipped = None
    reasons = []
    if shipped is not None:
        to_shipped = [round_log_ratios(r.samples_ms[CANDIDATE], r.samples_ms[SHIPPED]) for r in results]
        vs_shipped = geomean_interval(to_shipped, cfg.confidence, cfg.bootstrap, cfg.seed + 1)
        if vs_shipped.high > cfg.max_vs_shipped:
            reasons.append(
                f"upper end {vs_shipped.high:.3f}x of the shipped model's geomean is above {cfg.max_vs_shipped:g}"
            )
    if vs_best.high > cfg.max_vs_best:
        reasons.append(f"upper end {vs_best.high:.3f}x of the best heuristic's geomean is above {cfg.max_vs_best:g}")
    return ReleaseReport(
        candidate=candidate,
        shipped=shipped,
        backend=backend,
        rounds=cfg.rounds,
        tasks=results,
        vs_shipped=vs_shipped,
        vs_best=vs_best,
        max_vs_shipped=cfg.max_vs_shipped,
        max_vs_best=cfg.max_vs_best,
        released=not reasons,
        reasons=reasons,
    )


def render(report: ReleaseReport) -> str:
    """The report as Markdown (committed beside a released model; its card links it)."""
    conf = f"{report.vs_best.confidence:.0%}"
    basis = report.basis
    source = (
        "the analytic simulator's costs, not a measurement of any hardware"
        if basis == "simulated"
        else "the planner's own measurement and collective fits, not an independent judge (bench/heldout.py "
        "reports the judge's figures for these tasks)"
    )
    lines = [
        f"# Release gate: model {report.candidate}",
        "",
        f"{report.summary()}.",
        "",
        f"{basis.capitalize()} on {report.backend.name}/{report.backend.operator} ({report.backend.device}), "
        f"{report.rounds} interleaved rounds per task, {report.created_at:%Y-%m-%d}: {source}. Ratios are medians "
        f"over rounds (< 1: the candidate is faster); intervals are paired bootstraps over tasks and rounds at {conf}.",
        "",
        f"| task | tables | histograms | best heuristic ({basis}) | candidate / best ({basis}) | "
        f"candidate / shipped ({basis}) |",
        "|---|---:|---:|---|---:|---:|",
    ]
    for r in report.tasks:
        best = r.median(r.best_heuristic)
        shipped = f"{r.median(CANDIDATE) / r.median(SHIPPED):.3f}" if SHIPPED in r.samples_ms else "-"
        lines.append(
            f"| {r.label} | {r.tables} | {r.histograms} | {r.best_heuristic} {best:.2f} ms | "
            f"{r.median(CANDIDATE) / best:.3f} | {shipped} |"
        )
    if report.reasons:
        lines += ["", "Refused:", "", *(f"- {reason}" for reason in report.reasons)]
    return "\n".join(lines) + "\n"
