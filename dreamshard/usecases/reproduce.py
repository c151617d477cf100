"""The workspace a published plan came from: its dvc.yaml, params and dvc.lock, `dvc pull` of exactly that data
and model from the plan's DVC remote, their md5 checked against the plan's lineage (dreamshard.pipeline.workspace).

Before anything is written the lineage is checked (`check_lineage`: md5s to check against, only the installed
pipeline's commands) and so is `--into` (an empty or new directory, no file in the way); a reproduction that
fails removes only what it wrote (a directory the user gave empty stays, empty)."""

from __future__ import annotations

from pathlib import Path

import yaml

from dreamshard.config.settings import installed_pipeline_file
from dreamshard.errors import PipelineError, PlanError
from dreamshard.parsing import load_yaml
from dreamshard.pipeline.workspace import ReproduceResult, check_directory_path, reproduce
from dreamshard.usecases.base import Request, Result
from dreamshard.usecases.stored import open_plan_store, stored_plan
from dreamshard.values import Plan
from dreamshard.values.lineage import Lineage


class ReproduceRequest(Request):
    plan_id: str  # or 'current' with inventory
    into: Path
    inventory: str | None = None
    store: str | None = None
    endpoint_url: str | None = None


class ReproduceOutcome(Result):
    plan: Plan
    result: ReproduceResult


def _stage_table(text: str, what: str) -> dict[str, tuple[str, tuple[str, ...]]]:
    """{stage: (command with whitespace normalised, outs)} of a dvc.yaml text."""
    try:
        data = load_yaml(text)
    except (yaml.YAMLError, ValueError):  # ValueError: a repeated key, nesting too deep (dreamshard.parsing)
        data = None
    stages = data.get("stages") if isinstance(data, dict) else None
    if not isinstance(stages, dict) or not stages:
        raise PipelineError(f"{what} has no stages")
    out: dict[str, tuple[str, tuple[str, ...]]] = {}
    for name, stage in stages.items():
        cmd = stage.get("cmd") if isinstance(stage, dict) else None
        cmds = [cmd] if isinstance(cmd, str) else cmd if isinstance(cmd, list) else None
        if not cmds or not all(isinstance(c, str) for c in cmds):
            raise PipelineError(f"{what}: stage '{name}' has no command")
        outs = stage.get("outs") or []
        out[str(name)] = (" && ".join(" ".join(c.split()) for c in cmds), tuple(str(o) for o in outs))
    return out


def check_lineage(lineage: Lineage, plan_id: str) -> None:
    """PipelineError unless a plan's lineage can be reproduced safely: md5s for the model and the measurements
    (what the reproduction is checked against), and a dvc.yaml whose stage commands and outputs are exactly the
    installed pipeline file's (`dreamshard ...` commands; params may differ), so no stored text runs a command."""
    missing = [n for n, v in (("model", lineage.model_md5), ("measurements", lineage.measurements_md5)) if not v]
    if missing:
        raise PipelineError(
            f"plan {plan_id}'s lineage has no md5 for the {' and the '.join(missing)}: a reproduction "
            f"could not be checked; refusing"
        )
    mine = _stage_table(installed_pipeline_file("dvc.yaml").read_text(), "the installed dvc.yaml")
    if lineage.dvc_yaml is None:
        return  # `reproduce` says the lineage is incomplete
    theirs = _stage_table(lineage.dvc_yaml, f"plan {plan_id}'s dvc.yaml")
    for name, (cmd, outs) in theirs.items():
        if not cmd.startswith("dreamshard ") or name not in mine or mine[name] != (cmd, outs):
            raise PipelineError(
                f"plan {plan_id}'s dvc.yaml stage '{name}' is not the installed pipeline's "
                f"(`{cmd[:60]}`); refusing to write it"
            )


def run(request: ReproduceRequest) -> ReproduceOutcome:
    check_directory_path(request.into, "--into")  # a file in the way: one line before the store is opened
    store = open_plan_store(request.settings, request.store, request.endpoint_url)
    plan = stored_plan(store, request.plan_id, request.inventory, "reproduce")
    if plan.lineage is None:
        raise PlanError(f"plan {plan.plan_id} has no lineage: only plans published by the pipeline can be reproduced")
    check_lineage(plan.lineage, plan.plan_id)
    return ReproduceOutcome(plan=plan, result=reproduce(plan.lineage, request.into, plan.plan_id))
