"""Measuring embedding cost: the oracle (docs/architecture.md, "Measuring").

``make_oracle("cpu"|"cuda"|"simulator")`` builds an :class:`Oracle`; ``Oracle.measure`` returns a
``Measurement`` of one placement; ``profile_inventory`` writes singles + random placements to JSONL, resumably.
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
