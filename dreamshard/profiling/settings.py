"""The `profile` section of params.yaml (`ProfileConfig`, read with the others by dreamshard.config.settings): how
measurements are made, and `oracle()`, the measuring backend it describes (docs/architecture/measuring.md,
"Measuring")."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, field_validator

from dreamshard.profiling.names import BACKENDS, TYPE_KINDS
from dreamshard.profiling.oracle import Oracle, make_oracle
from dreamshard.profiling.simulator import SimulatorParams
from dreamshard.sharders import sharder_names
from dreamshard.values.base import StrictNumbers
from dreamshard.values.costs import Statistic

#: extra placement kinds measured per task besides the random ones (dreamshard.profiling.runner)
DEFAULT_KINDS: tuple[str, ...] = (
    "dim_greedy",
    "lookup_greedy",
    "size_lookup_greedy",
    "crowded",
    "row_wise",
    "data_parallel",
)


class ProfileConfig(StrictNumbers):
    """Profiling settings (params.yaml `profile:`); CLI flags override them."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    backend: Literal["cpu", "cuda", "simulator"] = "cpu"
    num_placements: Annotated[int, Field(ge=0)] = 4  # random placements per task
    # extra placements per task: heuristic plans (sharder names), `torchrec`, `crowded`, `row_wise`,
    # `data_parallel` (dreamshard.profiling.runner)
    kinds: tuple[str, ...] = DEFAULT_KINDS
    warmup: Annotated[int, Field(ge=0)] = 3
    repeats: Annotated[int, Field(ge=1)] = 7
    num_threads: Annotated[int, Field(ge=1)] = 1
    seed: int = 0
    row_cap: Annotated[int, Field(ge=1)] | None = None
    statistic: Statistic = "min"  # a device's figure from its repeats (dreamshard.values.costs.Statistic)
    # With a measurement corpus that already serves some train task entirely (a new version of an inventory it
    # has seen), at most this many of the tasks needing new device timings are measured (None: all of them);
    # the others are left out of this version's records (the warm-started model knows them). See
    # dreamshard.profiling.task_choice.limit_new_tasks.
    incremental_tasks: Annotated[int, Field(ge=1)] | None = 4
    # Only for backend `simulator` (tests of the pipeline around it): every cost times this, the named tables'
    # own share of a device's compute times theirs, and the wall time one device timing takes. See
    # dreamshard.profiling.simulator.
    simulator_slowdown: Annotated[float, Field(gt=0, le=1e6)] = 1.0
    simulator_table_slowdown: dict[str, Annotated[float, Field(gt=0, le=1e6)]] = Field(default_factory=dict)
    simulator_latency_ms: Annotated[float, Field(ge=0, le=60_000)] = 0.0

    @field_validator("backend", mode="before")
    @classmethod
    def _known_backend(cls, v: object) -> object:
        if v not in BACKENDS:
            raise ValueError(f"unknown backend '{v}'; choose from {', '.join(BACKENDS)}")
        return v

    @field_validator("kinds")
    @classmethod
    def _known_kinds(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        known = {"crowded", *TYPE_KINDS, *sharder_names()}
        for k in v:
            if k not in known:
                raise ValueError(
                    f"unknown placement kind '{k}'; choose from crowded, {', '.join(TYPE_KINDS)} or a sharder name"
                )
        return v

    def oracle(self) -> Oracle:
        """The measuring backend these settings describe, built by `make_oracle` (the one construction; the CLI,
        DVC stages and flows call this)."""
        return make_oracle(
            self.backend,
            warmup=self.warmup,
            repeats=self.repeats,
            num_threads=self.num_threads,
            seed=self.seed,
            row_cap=self.row_cap,
            statistic=self.statistic,
            simulator=SimulatorParams(
                slowdown=self.simulator_slowdown,
                table_slowdown=tuple(sorted(self.simulator_table_slowdown.items())),
                latency_ms=self.simulator_latency_ms,
            ),
        )
