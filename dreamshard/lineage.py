"""Lineage of a published plan: which data, model, params and code produced it.

A plan that reaches the store carries one; `dreamshard plans show` prints it and `dreamshard plans reproduce`
uses it to fetch exactly that data and model from the DVC remote. This module imports nothing else of
dreamshard so the value objects in `dreamshard.types` can refer to it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Lineage(BaseModel):
    """Everything needed to trace a plan back to what produced it (all optional: a plan made by hand has none)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    inventory_fingerprint: str
    params_hash: str | None = None  # sha256 of the params.yaml the pipeline ran with
    package_version: str | None = None  # dreamshard version
    git_revision: str | None = None  # of the workspace repository, when there is one
    flow_run_id: str | None = None  # Prefect flow run that published the plan
    measurements_md5: str | None = None  # from dvc.lock
    model_md5: str | None = None  # from dvc.lock (DVC's md5 of the model directory)
    model_version: str | None = None  # the model card's version (hash of the weights)
    dvc_remote: str | None = None  # the DVC remote the data and model were pushed to (credentials redacted)
    dvc_lock: str | None = None  # the dvc.lock text of the run (what `plans reproduce` checks out)
    params: str | None = None  # the params.yaml text of the run
    extra: dict[str, str] = Field(default_factory=dict)
