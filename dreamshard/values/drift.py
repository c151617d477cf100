"""One re-measurement of a published plan (`DriftCheck`): a value the drift check produces
(dreamshard.evaluation.drift), the store keeps as history and the doors show."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from dreamshard.values.ids import utcnow


class DriftCheck(BaseModel):
    """One re-measurement of a published plan, compared with what the plan recorded."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    plan_id: str
    inventory_name: str
    inventory_fingerprint: str
    backend: str
    rounds: int
    now_ms: float  # overall cost measured now (median over rounds)
    measured_ms: float | None  # recorded when the plan was published
    predicted_ms: float | None  # the cost model's figure in the plan
    basis: Literal["measured", "predicted"]  # which recorded figure the drift is relative to
    drift: float  # now / recorded - 1 (positive: slower now)
    drift_vs_predicted: float | None
    threshold: float
    drifted: bool
    checked_at: datetime = Field(default_factory=utcnow)
