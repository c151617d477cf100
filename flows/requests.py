"""Pydantic flow parameters (the Prefect UI renders them as forms and validates them)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from dreamshard.config.job import MAX_DEVICES
from dreamshard.values import MAX_DEVICE_GB

#: How the profile stage runs its batches: `workers` = one run of the profile-batch deployment per batch (a
#: work pool's workers pull them), `local` = in the stage's own process, `auto` = workers when a Prefect server
#: is configured and the deployment exists, else local.
Dispatch = Literal["auto", "local", "workers"]


class _Request(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class OrchestratorRequest(_Request):
    """Run the stages of dvc.yaml that DVC says changed, push, and gate + publish the plan."""

    workspace: str = Field(
        default="runs/pipeline", description="The workspace repository (git + DVC); created if missing."
    )
    params_path: str | None = Field(
        default="params.yaml",
        description="params.yaml, layered over the installed one, into the workspace; None: keep the workspace's.",
    )
    inventory_path: str | None = Field(
        default=None, description="Inventory file; None: the store's current version of inventory_name."
    )
    inventory_name: str | None = Field(
        default=None, description="Inventory in the store (when inventory_path is None)."
    )
    store_uri: str | None = Field(
        default=None, description="Plan store: directory or s3://bucket/prefix (default: publish.store_uri)."
    )
    endpoint_url: str | None = Field(
        default=None, description="S3 endpoint of the plan store (SeaweedFS, MinIO); None: AWS/env."
    )
    dvc_remote: str | None = Field(
        default=None, description="DVC remote: directory or s3://bucket/path (default: pipeline.dvc_remote)."
    )
    dvc_remote_endpoint: str | None = Field(
        default=None, description="S3 endpoint of the DVC remote (default: pipeline.dvc_remote_endpoint)."
    )
    backend: str | None = Field(
        default=None, description="Override profile.backend (cpu | cuda | simulator) in the workspace params."
    )
    allow_simulated: bool = Field(
        default=False,
        description="Let a plan measured on the simulator become current (publish.allow_simulated); without it a "
        "simulator backend is refused before any stage runs.",
    )
    world: str | None = Field(
        default=None,
        description="The job's world (world.name: fast, nvlink-ib, host, measured) in the workspace params, replacing "
        "their world section whole; an unknown name is refused before any stage runs. None: the params'.",
    )
    dispatch: Dispatch = Field(default="auto", description="Where profiling batches run: workers, local, or auto.")
    force: bool = Field(default=False, description="Re-run every stage even if DVC says nothing changed.")
    reprofile: bool = Field(
        default=False, description="Measure afresh (the backend drifted): re-run profile and what follows."
    )
    require_human: bool | None = Field(
        default=None, description="True asks a reviewer even where publish.require_human is off; never removes one."
    )
    reason: str = Field(
        default="manual run",
        description="Why this run started: the schedule, a retrain that is due, drift (shown in the UI).",
    )


class BatchRequest(_Request):
    """One profiling batch: its spec is an object in the store (dreamshard.profiling.batches)."""

    store_uri: str
    endpoint_url: str | None = None
    spec_key: str


class DriftRequest(_Request):
    """Measure the current published plan of each inventory (or the one named) interleaved with its reference plan
    and compare plan / reference with the ratio at publishing; an inventory without a current plan is skipped with
    the reason."""

    inventory_name: str | None = Field(
        default=None, description="Whose current plan to check; None: every inventory with a current plan."
    )
    params_path: str = Field(
        default="params.yaml",
        description="params.yaml, layered over the installed one: profile (the backend) and drift sections.",
    )
    store_uri: str | None = Field(default=None, description="Plan store (default: publish.store_uri).")
    endpoint_url: str | None = None
    workspace: str | None = Field(
        default=None,
        description="A workspace whose data/inventory.yaml may hold the plan's inventory; its model is the production "
        "model a drifted plan's path is chosen for.",
    )
    model: str | None = Field(
        default=None, description="The production model (default: the workspace's, else the packaged model)."
    )
    backend: str | None = Field(default=None, description="Override profile.backend.")


class WorkspacePublishRequest(_Request):
    """Gate the workspace's data/plan.json against data/comparison.json, attach lineage, publish (or reject)."""

    workspace: str = Field(default="runs/pipeline", description="The workspace repository the plan was made in.")
    store_uri: str | None = Field(default=None, description="Plan store (default: the workspace's publish.store_uri).")
    endpoint_url: str | None = None
    require_human: bool | None = Field(
        default=None, description="True asks a reviewer even where publish.require_human is off; never removes one."
    )
    flow_run_id: str | None = Field(default=None, description="Flow run recorded in the lineage (default: this one).")


class ReplanRequest(_Request):
    """The fast path for a new inventory version: plan with the current production model, gate, publish."""

    inventory_name: str = Field(description="Inventory whose current version (in the store) to re-plan.")
    params_path: str = Field(
        default="params.yaml", description="params.yaml: plan, profile, evaluate and publish sections."
    )
    store_uri: str | None = Field(default=None, description="Plan store (default: publish.store_uri).")
    endpoint_url: str | None = None
    workspace: str = Field(
        default="runs/pipeline", description="The pipeline workspace: its models/dreamshard is the production model."
    )
    model: str | None = Field(
        default=None, description="Model directory (default: the workspace's, else the packaged model)."
    )
    backend: str | None = Field(default=None, description="Override profile.backend.")
    # the topology to plan for, when not the job the inventory records (`dreamshard replan --devices ...`)
    devices: int | None = Field(default=None, ge=1, le=MAX_DEVICES, description="Devices (default: the job's).")
    hosts: int | None = Field(default=None, ge=1, le=MAX_DEVICES, description="Hosts of devices_per_host devices each.")
    devices_per_host: int | None = Field(default=None, ge=1, le=MAX_DEVICES, description="Devices per host.")
    memory_gb: float | None = Field(
        default=None, gt=0, le=MAX_DEVICE_GB, description="Memory per device in GB (default: the job's)."
    )
    world: str | None = Field(
        default=None,
        description="The job's world (world.name: fast, nvlink-ib, host, measured; default: the job's recorded "
        "world, else the params').",
    )
    reason: str = Field(default="manual run", description="Why this run started (shown in the UI).")
    force: bool = Field(
        default=False,
        description="Re-plan a version the gate already decided on (replan-on-drift: the plan is current, the costs "
        "it was chosen on moved).",
    )
