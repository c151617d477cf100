"""Prefect artifacts of a run: rendering only (the numbers come from the library).

Keys are stable and lowercase-dash so the Prefect UI shows each artifact's history across runs:

    plan-devices-<inv>        per-device costs and memory of the gated plan (table)
    sharder-comparison-<inv>  the plan vs every baseline, measured interleaved (markdown)
    publish-decision-<inv>    what the publish did, the gate's reason, references and moves (markdown)
    review-<inv>              what a reviewer is asked before a plan becomes current (markdown)
    published-plan-<inv>      where the plan is in the store (link)
    plan-lineage-<inv>        data / model / params / code hashes of the plan (markdown)
    profile-batches-<inv>     which worker measured which batch, which run completed it (table)
    train-metrics-<inv>       the training stage's metrics (table)
    drift-report-<inv>        the trend of drift checks (markdown)
    replan-<inv>              what the fast path did for a new inventory version, and why (markdown)
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dreamshard.evaluation.render import drift_line


def artifact_key(*parts: str) -> str:
    """'plan-devices', 'pool' -> 'plan-devices-pool' (lowercase letters, digits and dashes only)."""
    key = "-".join(p for p in parts if p).lower()
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", key)).strip("-")[:100]


def publish_plan_artifacts(publication: Any, store_uri: str, stats_md: str | None = None) -> None:
    """What a publish did (dreamshard.usecases.publication.Publication): per-device costs and memory of the judged
    plan, the stats report, the markdown comparison with the baselines, the decision (with every baseline that
    cannot honour a constraint, labelled, and each moved table), the lineage, a link to the stored plan."""
    from prefect.artifacts import create_link_artifact, create_markdown_artifact, create_table_artifact

    from dreamshard.evaluation.render import comparison_markdown, device_rows

    plan, decision, ref = publication.plan, publication.decision, publication.ref
    inv = publication.inventory_name
    if plan is not None:
        create_table_artifact(
            key=artifact_key("plan-devices", inv),
            table=device_rows(plan, publication.inventory),
            description=f"Per-device costs (ms) and memory (GB) of plan {plan.plan_id} ({plan.sharder})",
        )
    if stats_md is not None and plan is not None:
        create_markdown_artifact(
            key=artifact_key("plan-stats", inv),
            markdown=stats_md,
            description=f"Plan {plan.plan_id} explained: each table's share, what sets the maximum",
        )
    if publication.comparison is not None:
        create_markdown_artifact(
            key=artifact_key("sharder-comparison", inv),
            markdown=comparison_markdown(publication.comparison),
            description="The plan vs every baseline, measured interleaved on one backend",
        )
    create_markdown_artifact(
        key=artifact_key("publish-decision", inv),
        markdown=decision_markdown(publication),
        description=f"Publish decision: {publication.status}",
    )
    if plan is not None and plan.lineage is not None:
        create_markdown_artifact(
            key=artifact_key("plan-lineage", inv),
            markdown=f"Lineage of plan `{plan.plan_id}`\n\n{plan.lineage.markdown()}",
            description="What data, model, params and code produced the plan (`dreamshard plans reproduce`)",
        )
    if ref is not None:
        shown = decision.shown if decision is not None else publication.status
        create_link_artifact(
            key=artifact_key("published-plan", inv),
            link=_plan_link(store_uri, ref.key),
            link_text=f"{shown} plan {publication.plan_id} ({ref.key})",
            description=f"Plan in the store; current={publication.judged_is_current}",
        )


def decision_markdown(publication: Any) -> str:
    """The publish decision in markdown: what happened, the gate's reason, the baselines that cannot honour a
    constraint (labelled, never contenders), and each moved table from -> to."""
    d = publication.decision
    lines = [f"**{publication.status}**: plan `{publication.plan_id}`", "", publication.reason]
    if d is not None and d.reason != publication.reason:
        lines += ["", f"Gate: **{d.shown}** — {d.reason}"]
    if d is not None and d.references:
        lines += [
            "",
            "| baseline (not a contender) | breaks | its expressible plan, ms | this plan x |",
            "|---|---|---|---|",
        ]
        for r in d.references:
            ms = f"{r.overall_ms:.4g}" if r.overall_ms is not None else "not measured"
            ratio = f"{r.ratio:.3f}" if r.ratio is not None else "-"
            lines.append(f"| {r.name} | {r.breaks} | {ms} | {ratio} |")
    diff = publication.diff
    if diff is not None:
        lines += ["", f"**Moves** against plan `{diff.old_plan_id}`: {diff.summary}"]
        lines += [f"- {m.table}: {m.why or f'{m.before} -> {m.after}'}, {m.weights_gib:.4f} GiB" for m in diff.tables]
        if publication.moves_why:
            lines += ["", f"Why: {publication.moves_why}"]
    return "\n".join(lines) + "\n"


def review_artifact(question: Any) -> None:
    """What a reviewer is asked (markdown, key review-<inv>): on the paused run's page, beside its Resume form."""
    from prefect.artifacts import create_markdown_artifact

    create_markdown_artifact(
        key=artifact_key("review", question.inventory_name),
        markdown=question.details,
        description=question.headline[:500],
    )


def _plan_link(store_uri: str, key: str) -> str:
    if store_uri.startswith("s3://"):
        return f"{store_uri.rstrip('/')}/{key}"
    return (Path(store_uri.removeprefix("file://")).resolve() / key).as_uri()


def batch_rows(shards: list[Any], runs: Mapping[str, Sequence[tuple[str, str]]]) -> list[dict[str, Any]]:
    """One row per batch: who measured it (the shard's worker, host, process and flow run) and, from its
    deployment runs (`runs`: batch id -> [(run name, state name)] in submission order, `fanout.batch_runs`), the
    run that completed it and every attempt with its state. A run marked Crashed whose shard a retry found written
    is listed as an attempt; the retry that completed is credited."""
    rows = []
    for s in shards:
        tries = list(runs.get(s.batch_id, ()))
        done = [name for name, state in tries if state == "Completed"]
        rows.append(
            {
                "batch": s.batch_id,
                "records": len(s.records),
                "worker": s.worker.worker or "local",
                "host": s.worker.host,
                "pid": s.worker.pid,
                "flow_run": s.worker.flow_run_id or "-",
                "completed_by": done[-1] if done else "-",
                "attempts": ", ".join(f"{name} {state}" for name, state in tries) or "-",
                "seconds": round((s.finished_at - s.started_at).total_seconds(), 3),
            }
        )
    return rows


def profile_batches_artifact(
    shards: list[Any], inventory_name: str, runs: Mapping[str, Sequence[tuple[str, str]]] | None = None
) -> None:
    """Which worker (host, process, flow run) measured which batch of the profile stage, and which of the batch's
    runs completed it (`batch_rows`)."""
    from prefect.artifacts import create_table_artifact

    create_table_artifact(
        key=artifact_key("profile-batches", inventory_name),
        table=batch_rows(shards, runs or {}),
        description="Profiling batches: one shard each in object storage, who measured it and which run completed it",
    )


def metrics_artifact(name: str, metrics: Any, inventory_name: str) -> None:
    """A metrics JSON as a table: a list of rows as they are, a mapping as metric/value rows."""
    from prefect.artifacts import create_table_artifact

    def cell(v: Any) -> Any:
        return v if isinstance(v, (int, float, str)) or v is None else str(v)[:200]

    if isinstance(metrics, list):
        rows = [{k: cell(v) for k, v in r.items()} if isinstance(r, dict) else {"value": cell(r)} for r in metrics]
    else:
        rows = [{"metric": k, "value": cell(v)} for k, v in dict(metrics).items()]
    create_table_artifact(key=artifact_key(name, inventory_name), table=rows, description=f"{name}")


def drift_artifact(rows: list[dict[str, Any]], inventory_name: str, latest: Any) -> None:
    """The trend of drift checks (newest first) with the latest verdict on top."""
    from prefect.artifacts import create_markdown_artifact

    head = list(rows[0]) if rows else []
    table = "\n".join(
        ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        + ["| " + " | ".join(str(r[h]) for h in head) + " |" for r in rows]
    )
    verdict = f"**drifted**: path `{latest.path}`" if latest.drifted else "within threshold"
    md = (
        f"{verdict} (backend {latest.backend}). {drift_line(latest)}\n\n"
        "Drift is plan / reference measured in the same rounds against the same ratio when the plan was published; "
        "`host` is what the absolute milliseconds moved (the host's load), never decisive.\n\n"
        f"{table}\n"
    )
    create_markdown_artifact(
        key=artifact_key("drift-report", inventory_name),
        markdown=md,
        description="Drift checks of the published plan: plan / reference now vs at publishing",
    )


def replan_artifact(result: Any, why: str) -> None:
    """What the fast path did for an inventory version, and why it ran (markdown, key replan-<inv>)."""
    from prefect.artifacts import create_markdown_artifact

    lines = [
        f"**Why:** {why}",
        "",
        f"**Outcome:** `{result.outcome}` — {result.reason}",
        "",
        f"Inventory `{result.inventory_name}` version `{result.fingerprint[:12]}`; previous current plan "
        f"`{result.previous_plan_id or '-'}`; new plan `{result.plan.plan_id if result.plan else '-'}`.",
    ]
    if result.diff is not None:
        lines += ["", f"**Against the plan that was current:** {result.diff.summary}."]
        lines += [
            f"- {m.table}: {m.why or f'{m.before} -> {m.after}'}, {m.weights_gib:.4f} GiB" for m in result.diff.tables
        ]
    if result.retrain_reasons:
        lines += ["", "**Retrain due:**", *(f"- {r}" for r in result.retrain_reasons)]
    create_markdown_artifact(
        key=artifact_key("replan", result.inventory_name),
        markdown="\n".join(lines),
        description=f"replan of {result.inventory_name}: {result.outcome}",
    )
