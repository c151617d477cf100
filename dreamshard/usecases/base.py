"""What every use case's Request and Result share."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from dreamshard.config.settings import Settings
from dreamshard.documents import describe_validation_error as describe_validation_error  # a bad request, one line


class Request(BaseModel):
    """A use case's input: files and choices of this call, plus the resolved settings."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    settings: Settings = Field(default_factory=Settings)


class Result(BaseModel):
    """A use case's output; `warnings` are for the user (the CLI prints them, a flow logs them)."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    warnings: list[str] = Field(default_factory=list)
