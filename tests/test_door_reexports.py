"""The door rule cannot be passed by re-exporting (docs/architecture/index.md, "Layers"): every library name a door
uses, imported or read off an imported module, is followed to the module that defines it (tests/door_names.py), and that
module must be one a door may import (tests/test_import_rules.py, DOOR_ALLOWED)."""

from __future__ import annotations

from pathlib import Path

from door_names import defined_where, defining_module
from test_import_rules import door_files, door_may_import


def reexport_violations(source: str, where: str, cli: bool) -> list[str]:
    """The names a door's source uses whose defining module a door may not import."""
    return [
        f"{where}:{line} uses {used}, defined in {module}"
        for line, used, module in defined_where(source)
        if not door_may_import(module, cli)
    ]


def test_every_name_a_door_uses_is_defined_where_a_door_may_import() -> None:
    assert [v for source, where, cli in door_files() for v in reexport_violations(source, where, cli)] == []


def test_a_planted_reexport_is_followed_to_its_definition(tmp_path: Path) -> None:
    """`dreamshard.usecases.publish` re-exporting the store's `get_current` would pass the import rule; used by a
    door, by import or as an attribute of the module, it is found where it is defined."""
    assert defining_module("dreamshard.usecases.replan", "list_plans") == "dreamshard.store.listing"
    assert defining_module("dreamshard.usecases", "plan") == "dreamshard.usecases.plan"  # a submodule is itself
    assert defining_module("dreamshard.usecases.plan", "run") == "dreamshard.usecases.plan"
    imported = "from dreamshard.usecases.replan import list_plans\n"
    assert reexport_violations(imported, "m.py", cli=False) == [
        "m.py:1 uses dreamshard.usecases.replan.list_plans, defined in dreamshard.store.listing"
    ]
    read_off = (
        "from dreamshard.lazy import lazy_module\nreplan_uc = lazy_module('dreamshard.usecases.replan')\n"
        "x = replan_uc.list_plans\ny = replan_uc.run\n"
    )
    assert reexport_violations(read_off, "m.py", cli=False) == [
        "m.py:3 uses dreamshard.usecases.replan.list_plans, defined in dreamshard.store.listing"
    ]
    aliased = "from dreamshard.usecases import replan as r\nr.get_current_inventory\n"
    assert reexport_violations(aliased, "m.py", cli=False) == [
        "m.py:2 uses dreamshard.usecases.replan.get_current_inventory, defined in dreamshard.store.inventories"
    ]
    assert reexport_violations("from dreamshard.usecases import plan\nplan.run\n", "m.py", cli=False) == []
