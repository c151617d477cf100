"""What a plan assumed about access statistics an inventory does not declare (docs/architecture/learning.md, "Planning
without statistics"): a report, never an input of the gate."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from dreamshard.values.base import Number, StrictModel


class AccessAssumptions(StrictModel):
    """Tables without a declared access histogram were planned for each assumed id distribution (Zipf exponents;
    0 = uniform); the plan kept is the one with the least worst-case regret over them (its cost under a
    distribution / the best candidate's under it), predicted and, when verified, measured."""

    tables: Annotated[int, Number, Field(ge=1)]  # tables that declare no access histogram
    examples: tuple[str, ...]  # the first few of them, by name
    skews: tuple[Annotated[float, Number, Field(ge=0)], ...]  # the Zipf exponents planned for
    predicted_regret: Annotated[float, Number, Field(ge=1)]  # the kept plan's worst predicted regret
    predicted_ms: dict[str, Annotated[float, Number, Field(ge=0)]]  # per skew (its str) the kept plan's prediction
    measured_regret: Annotated[float, Number, Field(ge=1)] | None = None  # verified: the worst measured regret
    measured_ms: dict[str, Annotated[float, Number, Field(ge=0)]] = {}  # verified: per skew the kept plan's median

    def summary(self) -> str:
        """One line for the plan's report."""
        skews = ", ".join("uniform" if s == 0 else f"Zipf {s:g}" for s in self.skews)
        measured = (
            f", measured worst regret {self.measured_regret:.3f}"
            if self.measured_regret is not None
            else ", unverified"
        )
        return (
            f"{self.tables} table(s) declare no access statistics ({', '.join(self.examples)}"
            f"{', ...' if self.tables > len(self.examples) else ''}): planned for ids {skews}; "
            f"predicted worst regret {self.predicted_regret:.3f}{measured}"
        )
