"""Run names as the UI lists them: `<inventory>-<stage>-<version>` (a stage's task run, a flow run once its
inventory version is known), never Prefect's random adjective-animal. A version is an inventory fingerprint (its
first 12 characters) or, for a run that is not about one version (a drift round), the UTC minute it started."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from dreamshard.values.run_names import run_name

__all__ = ["minute_version", "rename_flow_run", "request_field", "run_name"]


def minute_version() -> str:
    """The version of a run that is not about one inventory version: the UTC minute, `20250101t0300`."""
    return datetime.now(timezone.utc).strftime("%Y%m%dt%H%M")


def request_field(field: str) -> Any:
    """A field of the running flow's `request` parameter (a model or, from a deployment, its dict); None outside
    a flow run or when absent."""
    from prefect.runtime import flow_run

    request = flow_run.parameters.get("request")
    if isinstance(request, dict):
        return request.get(field)
    return getattr(request, field, None)


def rename_flow_run(name: str) -> None:
    """Rename the running flow run (its version became known inside the run); nothing outside a flow run."""
    from prefect.client.orchestration import get_client
    from prefect.runtime import flow_run

    if flow_run.id is None:
        return
    with get_client(sync_client=True) as client:
        client.update_flow_run(flow_run.id, name=name)
