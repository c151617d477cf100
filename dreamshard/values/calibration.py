"""What calibration at plan time did, as a plan records it (docs/architecture/learning.md, "Calibration")."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from dreamshard.values.base import Number, StrictModel


class CalibrationReport(StrictModel):
    """The probes measured before searching and the correction fitted from them (dreamshard.measured.calibrate):
    a report, never an input of the gate."""

    backend: str
    probes: Annotated[int, Number, Field(ge=0)]  # device timings (groups of tables)
    placements: Annotated[int, Number, Field(ge=0)]  # probe placements (the first: each table alone)
    seconds: Annotated[float, Number, Field(ge=0)]
    scale_fwd: Annotated[float, Number, Field(gt=0)]
    scale_bwd: Annotated[float, Number, Field(gt=0)]
    # mean absolute percentage error of the held-out probe placement's compute, before / after the correction
    mape_before: Annotated[float, Number, Field(ge=0)]
    mape_after: Annotated[float, Number, Field(ge=0)]
    # the form of the correction the held-out probes chose (dreamshard.measured.calibrate.FORMS)
    fit: str = "scale+bias"
