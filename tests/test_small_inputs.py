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


@pytest.mark.parametrize(
    "body, message",
    [
        ("import sys\ndef build():\n    sys.exit(0)\n", "build() called sys.exit(0)"),
        ("import sys\nsys.exit(3)\ndef build():\n    pass\n", "called sys.exit(3)"),
        ("def build():\n    raise RuntimeError('boom')\n", "build() failed (RuntimeError: boom)"),
        ("def build():\n    return 42\n", "build() returned int, not a torch module"),
    ],
    ids=["exit-in-build", "exit-on-import", "raises", "not-a-module"],
)
def test_a_model_builder_that_exits_or_fails_is_one_line(tmp_path: Path, body: str, message: str) -> None:
    from dreamshard.cli.app import invoke

    model = tmp_path / "model.py"
    model.write_text(body)
    out = tmp_path / "inv.yaml"
    code, _, err = invoke(["inventory", "from-torchrec", "--model", f"{model}:build", "-o", str(out)])
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, (code, err)
    assert not out.exists()
