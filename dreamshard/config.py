"""Reading one section of params.yaml into a typed config model, through the one params loader."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from dreamshard.errors import ConfigError
from dreamshard.io import describe_validation_error

C = TypeVar("C", bound=BaseModel)


def section_from(data: Any, section: str, model: type[C], source: str | Path) -> C:
    """`model` built from `section` of already-parsed params data (a missing section means defaults)."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping of sections at top level")
    raw = data.get(section) or {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: section '{section}' must be a mapping")
    try:
        return model.model_validate(raw)
    except ValidationError as e:
        raise ConfigError(f"{source}: {section}.{describe_validation_error(e)}") from None


def load_section(path: str | Path | None, section: str, model: type[C]) -> C:
    """Return `model` built from `section` of the params file at `path` (defaults if path is None).

    The file goes through the one params loader, dreamshard.pipeline_config.load_pipeline_config: the whole file
    is validated (every section, unknown sections rejected), so a stage never runs on a params file another
    stage would refuse.
    """
    if path is None:
        return model()
    from dreamshard.pipeline_config import load_pipeline_config

    cfg = load_pipeline_config(path)
    value = getattr(cfg, section, None)
    if not isinstance(value, BaseModel):
        raise ConfigError(f"{path}: no params section '{section}'")
    if isinstance(value, model):
        return value
    try:
        return model.model_validate(value.model_dump())
    except ValidationError as e:
        raise ConfigError(f"{path}: {section}.{describe_validation_error(e)}") from None
