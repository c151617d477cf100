"""The decision tags on a workspace's commits: `published/<plan id>` or `rejected/<plan id>` mark the commit a plan
was decided for, so each plan id is decided once (docs/architecture/pipeline.md, "One stage graph")."""

from __future__ import annotations

from pathlib import Path

from dreamshard.documents import load_plan
from dreamshard.pipeline.workspace import PLAN, PipelineWorkspace

#: The prefixes of a decision tag.
DECISION_TAGS = ("published/", "rejected/")


def decision_tag(tags: list[str]) -> str | None:
    """The decision tag among some tags (None: none is a decision)."""
    return next((t for t in tags if t.startswith(DECISION_TAGS)), None)


def plan_decision(root: str | Path) -> tuple[str | None, str | None]:
    """(plan id of the workspace's data/plan.json, its decision tag); (None, None) before the plan stage ran."""
    ws = PipelineWorkspace(root)
    if not ws.path(PLAN).is_file():
        return None, None
    plan_id = load_plan(ws.path(PLAN)).plan_id
    return plan_id, decision_tag(ws.tags(*(f"{t}{plan_id}" for t in DECISION_TAGS)))


def tag_decision(root: str | Path, plan_id: str, approved: bool, reason: str) -> None:
    """Tag the workspace's commit with a plan's decision."""
    PipelineWorkspace(root).tag(f"{'published' if approved else 'rejected'}/{plan_id}", reason)
