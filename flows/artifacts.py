"""Prefect artifacts of a run: rendering only (the numbers come from the library's render helpers).

Keys are stable and lowercase-dash so the Prefect UI shows each artifact's history across runs.
"""

from __future__ import annotations

import re
from typing import Any

from dreamshard.types import Plan


def artifact_key(*parts: str) -> str:
    """'plan-devices', 'pool' -> 'plan-devices-pool' (lowercase letters, digits and dashes only)."""
    key = "-".join(p for p in parts if p).lower()
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", key)).strip("-")[:100]


def publish_plan_artifacts(plan: Plan, comparison: Any | None, decision: Any, ref: Any | None, store_uri: str) -> None:
    """Per-device costs and memory table, markdown comparison with heuristics, link to the published plan."""
    from prefect.artifacts import create_link_artifact, create_markdown_artifact, create_table_artifact

    from dreamshard.evaluation import comparison_markdown, device_rows

    inv = plan.inventory_name
    create_table_artifact(
        key=artifact_key("plan-devices", inv),
        table=device_rows(plan),
        description=f"Per-device costs (ms) and memory (GB) of plan {plan.plan_id} ({plan.sharder})",
    )
    if comparison is not None:
        create_markdown_artifact(
            key=artifact_key("sharder-comparison", inv),
            markdown=comparison_markdown(comparison),
            description="DreamShard vs heuristics, measured interleaved on one backend",
        )
    verdict = "approved" if decision.approved else "rejected"
    create_markdown_artifact(
        key=artifact_key("publish-decision", inv),
        markdown=f"**{verdict}** plan `{plan.plan_id}`\n\n{decision.reason}\n",
        description="Publish gate decision",
    )
    if ref is not None:
        create_link_artifact(
            key=artifact_key("published-plan", inv),
            link=_plan_link(store_uri, ref.key),
            link_text=f"{verdict} plan {plan.plan_id} ({ref.key})",
            description=f"Plan in the store; current={ref.is_current}",
        )


def _plan_link(store_uri: str, key: str) -> str:
    if store_uri.startswith("s3://"):
        return f"{store_uri.rstrip('/')}/{key}"
    from pathlib import Path

    return (Path(store_uri.removeprefix("file://")).resolve() / key).as_uri()


def profile_artifact(summaries: list[dict[str, Any]], inventory_name: str) -> None:
    from prefect.artifacts import create_table_artifact

    rows = [
        {k: s[k] for k in ("planned", "measured", "skipped", "singles", "placements", "wall_s")} | {"batch": i}
        for i, s in enumerate(summaries)
    ]
    create_table_artifact(key=artifact_key("profile-batches", inventory_name), table=rows,
                          description="Measurements per profiling batch (skipped = resumed from the JSONL)")


def metrics_artifact(name: str, metrics: dict[str, Any], inventory_name: str) -> None:
    from prefect.artifacts import create_table_artifact

    rows = [{"metric": k, "value": v if isinstance(v, (int, float, str)) or v is None else str(v)[:200]}
            for k, v in metrics.items()]
    create_table_artifact(key=artifact_key(name, inventory_name), table=rows, description=f"{name} metrics")
