"""params.yaml is validated as a whole: typos and bad values fail in one line naming the section."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dreamshard.config.settings import resolve
from dreamshard.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def _params(tmp_path: Path, **changes: dict) -> Path:
    data = yaml.safe_load((ROOT / "params.yaml").read_text())
    for section, values in changes.items():
        data.setdefault(section, {}).update(values)
    p = tmp_path / "params.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def test_repo_params_load_and_plan_devices_default() -> None:
    cfg = resolve(ROOT / "params.yaml")
    assert cfg.plan_devices == (cfg.plan.num_devices or cfg.tasks.train_devices)
    assert "dreamshard" in cfg.evaluate.sharders
    assert resolve(ROOT / "params.yaml", {"profile.backend": "simulator"}).profile.backend == "simulator"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"publish": {"min_improvment": 0.5}}, "publish.min_improvment"),
        ({"evaluate": {"sharders": ["dim_gredy"]}}, "unknown sharder 'dim_gredy'"),
        ({"inventory": {"num_tabels": 3}}, "inventory.num_tabels"),
        ({"inventory": {"dims": [3]}}, "3 is not a positive multiple of 4"),
        ({"plan": {"samples": -1}}, "plan.samples"),
        ({"topology": {"memory_per_device_gb": float("inf")}}, "topology.memory_per_device_gb"),
    ],
)
def test_typos_and_bad_values_are_one_line_config_errors(tmp_path: Path, changes: dict, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        resolve(_params(tmp_path, **changes))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_unknown_section_and_backend(tmp_path: Path) -> None:
    p = _params(tmp_path)
    p.write_text(p.read_text() + "evalute:\n  rounds: 2\n")
    with pytest.raises(ConfigError, match="unknown section 'evalute'"):
        resolve(p)
    with pytest.raises(ConfigError, match="unknown backend 'gpu'"):
        resolve(ROOT / "params.yaml", {"profile.backend": "gpu"})
