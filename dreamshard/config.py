"""Reading one section of a params.yaml-shaped file into a typed config model."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from dreamshard.errors import ConfigError
from dreamshard.io import describe_validation_error, read_structured

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
    """Return `model` built from `section` of the YAML file at `path` (defaults if path is None)."""
    if path is None:
        return model()
    return section_from(read_structured(path), section, model, path)
