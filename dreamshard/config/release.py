"""Section `release`: the release gate a new packaged model passes before it replaces the shipped one (`make
pretrain` ends with `dreamshard release`; docs/architecture/gate.md, "The release gate for models").

The gate plans each held-out task (dreamshard.inventory.heldout: families no training family resembles, some
without access histograms) with the candidate and the shipped model (search only: the model out of the box) and
the heuristics, measures the plans interleaved for `rounds` rounds, and bootstraps a paired confidence interval
(over tasks, then rounds) of the candidate's geomean ratio to the shipped model and to each task's best heuristic.
The candidate ships only if the upper ends are <= `max_vs_shipped` and <= `max_vs_best`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from dreamshard.config.learning import _Config


class ReleaseTask(_Config):
    """One held-out task: `tables` tables of `family` (seeded) on `devices` devices, with or without histograms."""

    family: Literal["ctr", "lognormal"]
    tables: Annotated[int, Field(ge=2, le=2000)]
    seed: Annotated[int, Field(ge=0)] = 0
    devices: Annotated[int, Field(ge=2, le=64)]
    histograms: bool = True

    @property
    def label(self) -> str:
        return f"{self.family}-{self.tables}/{self.devices}{'' if self.histograms else ' nohist'}"


#: The held-out tasks of the release gate and of bench/heldout.py: both families, 26-120 tables on 2-8 devices,
#: half without access histograms.
DEFAULT_RELEASE_TASKS: tuple[ReleaseTask, ...] = (
    ReleaseTask(family="ctr", tables=26, seed=1, devices=2),
    ReleaseTask(family="ctr", tables=60, seed=2, devices=4, histograms=False),
    ReleaseTask(family="ctr", tables=120, seed=3, devices=8),
    ReleaseTask(family="lognormal", tables=30, seed=4, devices=3, histograms=False),
    ReleaseTask(family="lognormal", tables=80, seed=5, devices=6),
    ReleaseTask(family="lognormal", tables=120, seed=6, devices=8, histograms=False),
)


class ReleaseConfig(_Config):
    """Section `release` (module docstring)."""

    tasks: tuple[ReleaseTask, ...] = DEFAULT_RELEASE_TASKS
    rounds: Annotated[int, Field(ge=2, le=50)] = 5
    confidence: Annotated[float, Field(ge=0.5, lt=1.0)] = 0.95  # two-sided; the gate reads the upper end
    bootstrap: Annotated[int, Field(ge=100, le=100_000)] = 2000
    max_vs_shipped: Annotated[float, Field(gt=0.0, le=2.0)] = 1.0
    max_vs_best: Annotated[float, Field(gt=0.0, le=2.0)] = 0.97
    memory_per_device_gb: Annotated[float, Field(gt=0.0)] = 16.0
    seed: Annotated[int, Field(ge=0)] = 0
    # may a model be released on the analytic simulator's costs (tests, scale studies)? Never for a shipped model:
    # the simulator's costs say nothing of hardware
    allow_simulated: bool = False

    @model_validator(mode="after")
    def _tasks(self) -> ReleaseConfig:
        if not self.tasks:
            raise ValueError("release.tasks must name at least one held-out task")
        labels = [(t.label, t.seed) for t in self.tasks]
        if len(set(labels)) != len(labels):
            raise ValueError("release.tasks lists a task twice")
        return self
