"""The strict base of every value object and the strict number type (docs/architecture/data-model.md, "Data model")."""

from __future__ import annotations

from types import UnionType
from typing import Annotated, Any, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

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


def _alternatives(annotation: Any) -> list[Any]:
    """The types a field's annotation accepts: Annotated unwrapped, a union's members except None."""
    if get_origin(annotation) is Annotated:
        return _alternatives(get_args(annotation)[0])
    if get_origin(annotation) in (Union, UnionType):
        return [t for a in get_args(annotation) if a is not type(None) for t in _alternatives(a)]
    return [annotation]


def _numeric(annotation: Any) -> bool:
    """Whether a field's type is a number (int / float, optionally None or Annotated): no bool, no str."""
    kinds = _alternatives(annotation)
    return bool(kinds) and all(k in (int, float) for k in kinds)


def _boolean(annotation: Any) -> bool:
    """Whether a field's type is a boolean (optionally None or Annotated): "false" and 0 are not read as false."""
    kinds = _alternatives(annotation)
    return bool(kinds) and all(k is bool for k in kinds)


def _numeric_items(annotation: Any) -> bool:
    """Whether a field's type is a list / tuple of numbers."""

    def items(kind: Any) -> list[Any]:
        return [a for a in get_args(kind) if a is not Ellipsis] if get_origin(kind) in (list, tuple) else []

    kinds = _alternatives(annotation)
    return bool(kinds) and all(items(k) and all(_numeric(a) for a in items(k)) for k in kinds)


class StrictNumbers(BaseModel):
    """A settings section whose number fields take numbers only and whose boolean fields booleans only: pydantic's
    lax mode would read `true` as 1, '3' as 3 and "yes" as true (a params.yaml typo then changes a run silently)."""

    @model_validator(mode="before")
    @classmethod
    def _numbers_only(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        for name, value in data.items():
            field = cls.model_fields.get(name) if isinstance(name, str) else None
            if field is None:
                continue
            if _boolean(field.annotation) and not isinstance(value, bool) and value is not None:
                message = f"must be true or false, got {type(value).__name__} {value!r}"
                raise located(cls.__name__, name, value, message)
            bad = [value] if _numeric(field.annotation) else []
            if _numeric_items(field.annotation) and isinstance(value, (list, tuple)):
                bad = list(value)
            for item in bad:
                try:
                    number_only(item)
                except ValueError as e:
                    raise located(cls.__name__, name, item, str(e)) from None
        return data


def located(title: str, field: str, value: object, message: str) -> ValidationError:
    """A refusal as a ValidationError located at the field (a model validator has no location of its own)."""
    error = InitErrorDetails(type=PydanticCustomError("number_type", message), loc=(field,), input=value)
    return ValidationError.from_exception_data(title, [error])
