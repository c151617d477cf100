"""Measuring embedding cost: the oracle (docs/architecture.md, "Measuring").

``ProfileConfig(...).oracle()`` (or ``make_oracle("cpu"|"cuda"|"simulator", ...)``, the one construction it
calls) builds an :class:`Oracle`; ``Oracle.measure`` returns a ``Measurement`` of one placement;
``profile_inventory`` writes singles + random placements to JSONL, resumably.

This module only re-exports; the submodules import from each other directly, never from here.
"""

from dreamshard.profiling.config import ProfileConfig
from dreamshard.profiling.oracle import BACKENDS, Oracle, make_oracle
from dreamshard.profiling.runner import ProfileSummary, profile_inventory, single_table_costs_from
from dreamshard.types import BackendInfo, CommModel, Measurement

__all__ = [
    "BACKENDS",
    "BackendInfo",
    "CommModel",
    "Measurement",
    "Oracle",
    "ProfileConfig",
    "ProfileSummary",
    "make_oracle",
    "profile_inventory",
    "single_table_costs_from",
]
