"""What the plan stage added to the search-only plan, measured (docs/architecture/learning.md, "Measured refinement"):
the figure and the plan report's sentence, from the plan's records alone (no torch: the CLI renders it at import).

Each link is measured interleaved: verification's kept plan against the search-only plan
(`Verification.kept_vs_search`), then the refined plan against the plan refinement started from
(`RefineTrace.vs_start`, dreamshard.measured.stage); `Verification.stage_vs_search` is their product.
"""

from __future__ import annotations

from dreamshard.values import Plan


def stage_vs_search(plan: Plan) -> float | None:
    """The plan against the search-only plan, measured: the verification record's `stage_vs_search`; without
    verification, refinement's refined / start (the start is the search-only plan; 1.0 when it was kept). None when
    nothing was measured against the search-only plan (or an older plan's record does not say)."""
    v, r = plan.verification, plan.refinement
    if v is not None:
        return v.stage_vs_search
    if r is not None and r.vs_start is not None:
        return 1.0 if r.reverted else r.vs_start
    return None


def stage_line(plan: Plan) -> str | None:
    """The plan report's sentence: what measurement added to the search-only plan, against the fastest baseline, and
    the time it took, e.g. "plan stage: 0.970x the search-only plan, measured interleaved (race of 9 over 3 round(s):
    kept lpt+search, 0.981x the fastest baseline heuristic:dim_greedy; refinement confirmed no proposal); 2.8x the
    search's time (search 1.9 s, plan 5.3 s, budget 5.7 s)". None when the plan was neither verified nor refined (or
    its record predates these figures)."""
    v, r = plan.verification, plan.refinement
    ratio = stage_vs_search(plan)
    if ratio is None:
        if v is None and r is not None and r.kept == 0:
            return "plan stage: the search-only plan (refinement confirmed no proposal)"
        return None
    parts: list[str] = []
    if v is not None and v.kept_vs_search is not None:
        kept = "kept the search-only plan" if v.chosen == v.search_only else f"kept {v.chosen}"
        rounds = max((c.rounds or v.rounds for c in v.candidates), default=v.rounds)
        race = f"race of {len(v.candidates)} over {rounds} round(s): {kept} ({v.kept_vs_search:.3f}x)"
        if v.best_baseline is not None and v.kept_vs_baseline is not None:
            race += f", {v.kept_vs_baseline:.3f}x the fastest baseline {v.best_baseline}"
        parts.append(race)
    if r is not None and r.vs_start is not None:
        verdict = "not faster in every round, its start kept" if r.reverted else "kept"
        parts.append(f"refined plan {r.vs_start:.3f}x its start over {r.whole_rounds} round(s): {verdict}")
    elif r is not None:
        parts.append("refinement confirmed no proposal")
    elif v is not None and v.refine_s == 0:
        parts.append("no refinement: the budget was spent")
    detail = f" ({'; '.join(parts)})" if parts else ""
    return f"plan stage: {ratio:.3f}x the search-only plan, measured interleaved{detail}{_times(plan)}"


def _times(plan: Plan) -> str:
    """The sentence's time part, "; 2.8x the search's time (search 1.9 s, plan 5.3 s, budget 5.7 s)" ("" without
    times)."""
    v = plan.verification
    if v is None or v.search_s is None or v.plan_s is None:
        return ""
    budget = f", budget {v.budget_s:.1f} s" if v.budget_s is not None else ""
    times = f"{v.plan_s / v.search_s:.1f}x the search's time" if v.search_s > 0 else "time"
    return f"; {times} (search {v.search_s:.1f} s, plan {v.plan_s:.1f} s{budget})"
