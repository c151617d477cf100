"""The profiler's vocabulary (backends, typed placement kinds), read by the `profile` settings
(dreamshard.profiling.settings) without loading the profiler."""

from __future__ import annotations

#: The measuring backends (dreamshard.profiling.oracle.make_oracle builds each).
BACKENDS: tuple[str, ...] = ("cpu", "cuda", "simulator")
#: Placement kinds that convert one table to another sharding type (dreamshard.profiling.runner measures them).
TYPE_KINDS: tuple[str, ...] = ("row_wise", "data_parallel")
