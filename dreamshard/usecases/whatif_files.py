"""The files of `dreamshard explain what-if`: the doors' adapter for the what-if use case
(dreamshard.usecases.explain.run_whatif), which takes and returns values. Reading checks, in one line before
anything is loaded, that no output is an input (an `--add-table` file among them) or another output, and that a
changed plan of a changed inventory is written with that inventory."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from dreamshard.documents import INVENTORY_SUFFIXES, check_outputs, load_inventory, load_plan, save_inventory, save_plan
from dreamshard.errors import InputFileError
from dreamshard.explain.whatif import is_file_spec
from dreamshard.usecases.explain import WhatIfResult
from dreamshard.values import Inventory, Plan


class WhatIfFiles(BaseModel):
    """The what-if's files: the inventory and plan read, the model, the tables added (specs or inventory files),
    and where the changed plan and inventory go."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    inventory: Path
    plan: Path
    model: Path | None = None
    add_tables: tuple[str, ...] = ()
    changes_tables: bool = False  # tables are added or removed
    out: Path | None = None
    inventory_out: Path | None = None


def read(files: WhatIfFiles) -> tuple[Inventory, Plan]:
    """The inventory and the plan, after the outputs were checked against the inputs."""
    added = [p for p in files.add_tables if is_file_spec(p)]
    check_outputs(
        {
            "--inventory": files.inventory,
            "--plan": files.plan,
            "--model": files.model,
            **{f"--add-table {p}": p for p in added},
        },
        {"--out": files.out, "--inventory-out": files.inventory_out},
    )
    if files.out is not None and files.changes_tables and files.inventory_out is None:
        raise InputFileError(
            "--out with --add-table/--remove-table needs --inventory-out too: the changed plan is a "
            "plan of the changed inventory; nothing was written"
        )
    if files.inventory_out is not None and files.inventory_out.suffix.lower() not in INVENTORY_SUFFIXES:
        raise InputFileError(f"--inventory-out {files.inventory_out}: name it .yaml, .yml or .json")
    return load_inventory(files.inventory), load_plan(files.plan)


def write(result: WhatIfResult, files: WhatIfFiles) -> None:
    """The changed inventory and plan, where asked."""
    if files.inventory_out is not None:
        save_inventory(result.whatif.inventory, files.inventory_out)
    if files.out is not None:
        save_plan(result.changed, files.out)
