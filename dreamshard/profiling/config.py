"""The `profile` section of params.yaml."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field


class ProfileConfig(BaseModel):
    """Profiling settings (params.yaml `profile:`); CLI flags override them."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    backend: Literal["cpu", "cuda", "simulator"] = "cpu"
    num_placements: Annotated[int, Field(ge=0)] = 4
    warmup: Annotated[int, Field(ge=0)] = 3
    repeats: Annotated[int, Field(ge=1)] = 7
    num_threads: Annotated[int, Field(ge=1)] = 1
    seed: int = 0
    row_cap: Annotated[int, Field(ge=1)] | None = None
