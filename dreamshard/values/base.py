"""The strict base of every value object and the strict number type (docs/architecture.md, "Data model")."""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict

#: Bytes in a gigabyte as every memory figure counts it (GiB).
GB = float(1024**3)

_V = TypeVar("_V")


def number_only(v: _V) -> _V:
    """Reject bools and strings where a number is expected (pydantic's lax mode reads `true` as 1, "3" as 3)."""
    if isinstance(v, (bool, str, bytes)):
        raise ValueError(f"must be a number, got {type(v).__name__} {v!r}")
    return v


#: Numbers as users write them in inventories, plans and params: int/float only, never bool or string.
Number = BeforeValidator(number_only)


class StrictModel(BaseModel):
    """Base of the value objects: unknown fields are errors, values are frozen, no inf/nan."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, allow_inf_nan=False)
