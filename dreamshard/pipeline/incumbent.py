"""The incumbent: the plan the training job runs when a new inventory version arrives (docs/architecture/pipeline.md,
"The production loop").

Planning a new version starts from it (the `current` search candidate: its units keep their devices), so a plan
moves only what the change calls for. An incumbent file is either a plan (as `plan -o` writes it or
`plans show` prints it) or a note that none was current:

    {"incumbent": null, "reason": "no plan was current for inventory 'pool'"}

In a pipeline workspace the orchestrator writes `inputs/incumbent.json` when the input inventory changes (never
otherwise: a run on an unchanged inventory re-runs nothing); the DVC `incumbent` stage validates it into
`data/incumbent.json`, which the plan stage reads and `plans reproduce` restores.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, StringConstraints

from dreamshard.documents import dump_model, read_structured, validate_mapping
from dreamshard.errors import PlanError
from dreamshard.values import Plan
from dreamshard.values.names import ALLOWED, name_problem


class NoIncumbent(BaseModel):
    """An incumbent file's way of saying that no plan was current."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    incumbent: None
    reason: Annotated[str, StringConstraints(max_length=500)]


def no_incumbent(inventory_name: str) -> NoIncumbent:
    return NoIncumbent(incumbent=None, reason=f"no plan was current for inventory '{inventory_name}'")


def read_incumbent(path: str | Path) -> Plan | NoIncumbent:
    """An incumbent file: a plan or a `NoIncumbent` note; one-line PlanError (InputFileError when unreadable)."""
    data = read_structured(path)
    if isinstance(data, dict) and "incumbent" in data:
        return validate_mapping(data, NoIncumbent, PlanError, f"incumbent {path}")
    plan = validate_mapping(data, Plan, PlanError, f"incumbent {path}")
    for what, value in (("plan id", plan.plan_id), ("inventory name", plan.inventory_name)):
        if (problem := name_problem(value)) is not None:  # a plan id is data: one a store could hold, or none
            raise PlanError(f"incumbent {path}: {what} {value[:80]!r} {problem}: use {ALLOWED}")
    return plan


def load_incumbent(path: str | Path) -> Plan | None:
    """The plan an incumbent file holds; None when it says no plan was current."""
    doc = read_incumbent(path)
    return doc if isinstance(doc, Plan) else None


def save_incumbent(doc: Plan | NoIncumbent, path: str | Path) -> Path:
    """The canonical incumbent file (indented JSON, as `plans show` prints a plan): byte-equal for equal content,
    so DVC sees a change only when there is one."""
    return dump_model(doc, path)
