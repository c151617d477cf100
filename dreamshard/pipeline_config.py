"""The whole params.yaml as one typed object: every section validated up front, typos rejected.

The CLI stage helpers, the DVC stages and the Prefect flows all read params through `load_pipeline_config`,
so a bad key fails in one line naming the section before any profiling or training starts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from dreamshard.config import section_from
from dreamshard.errors import ConfigError
from dreamshard.gate import PublishConfig
from dreamshard.io import read_structured
from dreamshard.learning.configs import (
    DEFAULT_CANDIDATES,
    CostTrainConfig,
    LoopConfig,
    PolicyTrainConfig,
    PretrainConfig,
    SearchConfig,
    TasksConfig,
    TopologyConfig,
)
from dreamshard.profiling import ProfileConfig
from dreamshard.sharders import ALL_SHARDERS
from dreamshard.types import Inventory


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class InventoryConfig(_Section):
    """Section `inventory`: the synthetic pool the pipeline starts from."""

    name: Annotated[str, Field(min_length=1)] = "pool"
    num_tables: Annotated[int, Field(ge=1)] = 120
    seed: int = 0
    dims: tuple[int, ...] = (16, 32, 64, 128)

    @field_validator("dims")
    @classmethod
    def _dims(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        from dreamshard.inventory.synth import check_dims

        try:
            return check_dims(v)
        except ConfigError as e:
            raise ValueError(str(e).removeprefix("dims: ")) from None

    def synthesize(self) -> Inventory:
        from dreamshard.inventory.synth import synth_inventory

        return synth_inventory(self.num_tables, self.seed, dims=self.dims, name=self.name)


class PlanConfig(_Section):
    """Section `plan`: how the published plan is made (`dreamshard plan --sharder dreamshard`: search on the
    learned cost, then the `verify` best candidates measured on the profile backend)."""

    samples: Annotated[int, Field(ge=0, le=4096)] = 4  # sampled policy rollouts besides the argmax
    risk: Annotated[float, Field(ge=0, le=10)] = 1.0  # ensemble mean + risk x spread
    candidates: tuple[str, ...] = DEFAULT_CANDIDATES
    verify: Annotated[int, Field(ge=0, le=64)] = 3  # measure this many best candidates (0 = trust predictions)
    verify_rounds: Annotated[int, Field(ge=1, le=100)] = 3

    @field_validator("candidates")
    @classmethod
    def _candidates(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        return SearchConfig(candidates=v).candidates  # names the unknown source

    def search(self, seed: int = 0) -> SearchConfig:
        return SearchConfig(risk=self.risk, samples=self.samples, candidates=self.candidates, seed=seed)
    num_devices: Annotated[int, Field(ge=1)] | None = None  # default: tasks.train_devices


class EvaluateConfig(_Section):
    """Section `evaluate`: the contenders measured against dreamshard and the interleaved rounds."""

    sharders: tuple[str, ...] = ALL_SHARDERS
    rounds: Annotated[int, Field(ge=1)] = 3

    @field_validator("sharders")
    @classmethod
    def _known(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        from dreamshard.sharders import sharder_names

        known = sharder_names()
        for name in v:
            if name not in known:
                raise ValueError(f"unknown sharder '{name}'; choose from {', '.join(known)}")
        return v


class PipelineSettings(_Section):
    """Section `pipeline`: where a workspace pushes its data and models (the DVC remote) and how profiling fans
    out to workers. Nothing here changes a result, so no DVC stage lists it as a param."""

    dvc_remote: Annotated[str, Field(min_length=1)] = "runs/dvc-remote"  # a directory, or s3://bucket/path
    dvc_remote_endpoint: str | None = None  # S3 endpoint (SeaweedFS, MinIO); None: AWS / environment
    items_per_batch: Annotated[int, Field(ge=1, le=100_000)] = 64  # planned measurements per profiling batch
    batch_attempts: Annotated[int, Field(ge=1, le=20)] = 3  # runs of one batch before the profile stage fails
    batch_timeout_s: Annotated[float, Field(gt=0, le=7 * 24 * 3600)] = 6 * 3600.0  # all batches, waiting included
    profile_deployment: Annotated[str, Field(pattern=r"^[^/]+/[^/]+$")] = "profile-batch/profile-batch"


class DriftConfig(_Section):
    """Section `drift`: the monitor re-measures the current published plan and flags it when its overall cost
    moved by more than `threshold` (a fraction) from the cost recorded at publishing."""

    threshold: Annotated[float, Field(gt=0, le=10)] = 0.2
    rounds: Annotated[int, Field(ge=1, le=100)] = 3
    history: Annotated[int, Field(ge=1, le=10_000)] = 200  # drift checks kept per inventory (the trend report)


class PipelineConfig(BaseModel):
    """Every section of params.yaml, typed."""

    model_config = ConfigDict(frozen=True)

    inventory: InventoryConfig = InventoryConfig()
    tasks: TasksConfig = TasksConfig()
    topology: TopologyConfig = TopologyConfig()
    profile: ProfileConfig = ProfileConfig()
    train_cost: CostTrainConfig = CostTrainConfig()
    train_policy: PolicyTrainConfig = PolicyTrainConfig()
    train: LoopConfig = LoopConfig()
    pretrain: PretrainConfig = PretrainConfig()
    plan: PlanConfig = PlanConfig()
    evaluate: EvaluateConfig = EvaluateConfig()
    publish: PublishConfig = PublishConfig()
    pipeline: PipelineSettings = PipelineSettings()
    drift: DriftConfig = DriftConfig()

    @property
    def plan_devices(self) -> int:
        return self.plan.num_devices or self.tasks.train_devices


_SECTIONS: dict[str, type[BaseModel]] = {
    name: field.annotation  # type: ignore[misc]
    for name, field in PipelineConfig.model_fields.items()
}


def load_pipeline_config(path: str | Path | None, backend: str | None = None) -> PipelineConfig:
    """Read and validate params.yaml (defaults when path is None); `backend` overrides profile.backend."""
    if path is None:
        cfg = PipelineConfig()
    else:
        data: Any = read_structured(path)
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: expected a mapping of sections at top level")
        unknown = sorted(set(data) - set(_SECTIONS))
        if unknown:
            raise ConfigError(f"{path}: unknown section '{unknown[0]}'; sections are {', '.join(_SECTIONS)}")
        cfg = PipelineConfig(**{name: section_from(data, name, model, path) for name, model in _SECTIONS.items()})
    if backend:
        try:
            profile = ProfileConfig.model_validate({**cfg.profile.model_dump(), "backend": backend})
        except Exception:
            raise ConfigError(f"unknown backend '{backend}'; choose from cpu, cuda, simulator") from None
        cfg = cfg.model_copy(update={"profile": profile})
    return cfg
