"""Measuring embedding cost: the oracle (docs/architecture/measuring.md, "Measuring").

``ProfileConfig(...).oracle()`` (or ``make_oracle("cpu"|"cuda"|"simulator", ...)``, the one construction it
calls) builds an :class:`Oracle`; ``Oracle.measure`` returns a ``Measurement`` of one placement;
``profile_inventory`` writes singles + random placements to JSONL, resumably.

This module only re-exports; the submodules import from each other directly, never from here.
"""

from dreamshard.lazy import lazy_exports
from dreamshard.values import BackendInfo, CommModel, Measurement

# each submodule is imported when one of its names is first used (dreamshard/lazy.py)
__getattr__, __dir__, _LAZY = lazy_exports(
    __name__,
    {
        ".settings": ("ProfileConfig",),
        ".oracle": ("BACKENDS", "Oracle", "make_oracle"),
        ".runner": ("ProfileSummary", "profile_inventory", "single_table_costs_from"),
    },
)

__all__ = [*_LAZY, "BackendInfo", "CommModel", "Measurement"]
