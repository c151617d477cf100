"""One drift check of a published plan (`DriftCheck`): a value the drift check produces
(dreamshard.evaluation.drift), the store keeps as history and the doors show.

A check is a paired measurement (docs/architecture/pipeline.md, "Drift"): the plan and a reference plan measured
interleaved in the same rounds, so whatever load the host carries hits both; drift is how far the ratio
plan / reference moved from the same ratio when the plan was published, judged on the ratio's confidence
interval. Checks written before the paired measurement have no `reference`: their `drift` compared absolute
milliseconds with the recorded cost.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from dreamshard.values.ids import utcnow

#: What a drift calls for: nothing, the fast path (re-plan with the production model: only the measured costs
#: moved) or a retrain (re-profile and train: the hardware or the model's training ranges changed).
DriftPath = Literal["none", "replan", "retrain"]
#: Where the reference plan comes from: the baseline the gate judged the plan against (re-planned: the heuristics
#: are deterministic), or a fixed heuristic's plan of the same inventory (`drift.reference_sharders`).
ReferenceKind = Literal["baseline", "calibration"]
#: Where the published ratio comes from: the gate's decision, or the first paired check of the plan against a
#: calibration reference (the gate never measured that one).
RatioSource = Literal["gate", "anchor"]


class DriftCheck(BaseModel):
    """One re-measurement of a published plan, paired with its reference and compared with the published ratio."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    plan_id: str
    inventory_name: str
    inventory_fingerprint: str
    backend: str
    rounds: int
    now_ms: float  # the plan's overall cost now (median over rounds): shown for the trend, never decisive
    measured_ms: float | None  # recorded when the plan was published
    predicted_ms: float | None  # the cost model's figure in the plan
    basis: Literal["measured", "predicted"]  # which recorded figure `host_change` is relative to
    # the decisive figure: (plan / reference now) / (plan / reference when published) - 1 (positive: the plan lost
    # ground against its reference); a check without a reference: now / recorded - 1
    drift: float
    drift_vs_predicted: float | None
    threshold: float
    drifted: bool  # the whole interval of `drift` lies beyond +-threshold (a check without a reference: |drift|)
    reference: str | None = None  # the reference plan's sharder; None: a check written before paired checks
    reference_kind: ReferenceKind | None = None
    reference_ms: float | None = None  # the reference's overall cost now (median over rounds)
    ratio: float | None = None  # plan / reference now: geometric mean of the per-round ratios
    ratio_low: float | None = None  # its `confidence` interval (Student t on the per-round log ratios)
    ratio_high: float | None = None
    confidence: float | None = None
    published_ratio: float | None = None  # plan / reference when published (or at the anchoring check)
    ratio_source: RatioSource | None = None
    drift_low: float | None = None  # the interval of `drift`
    drift_high: float | None = None
    host_change: float | None = None  # now_ms / recorded - 1: what comparing absolute ms would say (the host's load)
    path: DriftPath = "none"  # what the drift calls for ("none" when it did not drift)
    path_reason: str = ""  # why that path (or, for an anchoring check, that it anchored)
    checked_at: datetime = Field(default_factory=utcnow)

    @property
    def paired(self) -> bool:
        """A paired check (measured against a reference), not one written before them."""
        return self.reference is not None and self.ratio is not None
