"""Small inputs that once slipped through: a device number in another script's digits, a world size of 0."""

from __future__ import annotations

from pathlib import Path

import pytest

from dreamshard.errors import PlanError
from dreamshard.explain.whatif import parse_added, parse_changes
from dreamshard.integrations.torchrec_current import load_current_sharding_plan
from dreamshard.integrations.torchrec_file import document_from_data
from dreamshard.inventory.synth import synth_inventory


@pytest.mark.parametrize("move", ["t:٣", "t:３", "t:²"])  # Arabic-Indic three, fullwidth three, superscript two
def test_a_device_number_is_ascii_digits(move: str) -> None:
    with pytest.raises(PlanError, match="expected UNIT:DEVICE"):
        parse_changes([move], [])
    assert parse_changes(["t:3"], []) == ({"t": 3}, [])


def test_an_added_tables_device_is_ascii_digits() -> None:
    with pytest.raises(PlanError, match="is not a device number"):
        parse_added(synth_inventory(2, 0), ["name=x,rows=10,dim=4,pooling=1,device=٣"])


@pytest.mark.parametrize("world_size", [0, -2, True])
def test_a_world_size_below_one_is_refused_not_suggested(tmp_path: Path, world_size: int) -> None:
    with pytest.raises(PlanError, match="world_size must be a whole number of ranks >= 1") as e:
        load_current_sharding_plan(str(tmp_path / "store"), object(), world_size)  # type: ignore[arg-type]
    assert "--devices" not in str(e.value)
    doc = {"format": "dreamshard-torchrec-plan", "world_size": 2, "tables": {}}
    with pytest.raises(PlanError, match="world_size must be"):
        document_from_data(doc, world_size=world_size)
