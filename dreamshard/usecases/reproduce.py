"""The workspace a published plan came from: its dvc.yaml, params and dvc.lock, `dvc pull` of exactly that data
and model from the plan's DVC remote, their md5 checked against the plan's lineage (dreamshard.workspace)."""

from __future__ import annotations

from pathlib import Path

from dreamshard.errors import PlanError
from dreamshard.types import Plan
from dreamshard.usecases.base import Request, Result
from dreamshard.usecases.stored import open_plan_store, stored_plan
from dreamshard.workspace import ReproduceResult, check_lineage, reproduce


class ReproduceRequest(Request):
    plan_id: str  # or 'current' with inventory
    into: Path
    inventory: str | None = None
    store: str | None = None
    endpoint_url: str | None = None


class ReproduceOutcome(Result):
    plan: Plan
    result: ReproduceResult


def run(request: ReproduceRequest) -> ReproduceOutcome:
    store = open_plan_store(request.settings, request.store, request.endpoint_url)
    plan = stored_plan(store, request.plan_id, request.inventory, "reproduce")
    if plan.lineage is None:
        raise PlanError(f"plan {plan.plan_id} has no lineage: only plans published by the pipeline can be reproduced")
    check_lineage(plan.lineage, plan.plan_id)  # md5s to check against; only the installed pipeline's commands
    return ReproduceOutcome(plan=plan, result=reproduce(plan.lineage, request.into, plan.plan_id))
