"""Pydantic flow parameters (the Prefect UI renders them as forms) and the pipeline workspace layout."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from dreamshard.io import read_structured


class Workspace(BaseModel):
    """Where one pipeline keeps its files; every path is derived from `root`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    root: str = "runs/pipeline"
    models: str | None = None  # where the trained model lives (default: <root>/models); make run uses ./models

    def path(self, *parts: str) -> Path:
        return Path(self.root).joinpath(*parts)

    @property
    def inventory(self) -> Path:
        return self.path("inventory.yaml")

    @property
    def tasks(self) -> Path:
        return self.path("tasks.json")

    @property
    def measurements(self) -> Path:
        return self.path("measurements.jsonl")

    @property
    def model_dir(self) -> Path:
        return Path(self.models) if self.models else self.path("models")

    @property
    def cost_metrics(self) -> Path:
        return self.path("metrics", "cost.json")

    @property
    def policy_metrics(self) -> Path:
        return self.path("metrics", "policy.json")

    @property
    def plans_dir(self) -> Path:
        return self.path("plans")

    @property
    def comparison(self) -> Path:
        return self.path("comparison.json")

    @property
    def lock(self) -> Path:
        return self.path(".lock")


class StageRequest(BaseModel):
    """Common parameters: the workspace and the params.yaml to read stage sections from."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    workspace: Workspace = Field(default_factory=Workspace)
    params_path: str = "params.yaml"

    def params(self) -> dict[str, Any]:
        data = read_structured(self.params_path)
        return data if isinstance(data, dict) else {}


class ProfileRequest(StageRequest):
    """Measure random feasible placements of every training task (resumable JSONL)."""

    tasks_per_batch: int = Field(default=2, ge=1, description="Training tasks measured per Prefect task.")
    backend: str | None = Field(default=None, description="Override profile.backend (cpu | cuda | simulator).")


class TrainRequest(StageRequest):
    """Train the cost network or the policy from the workspace files."""


class PublishRequest(StageRequest):
    """Plan with the trained model, compare with heuristics, gate and publish (or keep as rejected)."""

    store_uri: str | None = Field(default=None, description="Plan store: directory or s3://bucket/prefix.")
    endpoint_url: str | None = Field(default=None, description="S3 endpoint (SeaweedFS, MinIO); None: AWS/env.")
    backend: str | None = Field(default=None, description="Override profile.backend for the comparison.")
    require_human: bool | None = Field(default=None, description="Override publish.require_human.")


class OrchestratorRequest(StageRequest):
    """Run what the inventory fingerprint says is needed: profile + retrain, and/or plan + publish."""

    inventory_path: str | None = Field(default=None, description="Inventory file; None: the store's current one.")
    inventory_name: str | None = Field(default=None, description="Inventory in the store (with inventory_path=None).")
    store_uri: str | None = None
    endpoint_url: str | None = None
    backend: str | None = None
    force: bool = Field(default=False, description="Retrain and re-publish even if nothing changed.")
