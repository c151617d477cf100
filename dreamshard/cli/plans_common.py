"""What the `plans` commands share: their options and where they read the settings from."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dreamshard.config.settings import Settings, resolve

StoreOpt = Annotated[
    str | None,
    typer.Option(
        "--store", help="Plan store: a directory or s3://bucket/prefix (default: params.yaml publish.store_uri)."
    ),
]
EndpointOpt = Annotated[
    str | None,
    typer.Option(
        "--endpoint", "--endpoint-url", help="S3 endpoint URL (default: $DREAMSHARD_S3_ENDPOINT / $AWS_ENDPOINT_URL)."
    ),
]
ParamsOpt = Annotated[
    Path | None, typer.Option("--params", help="params.yaml to read the publish section from (default: ./params.yaml).")
]
InventoryNameOpt = Annotated[str, typer.Option("--inventory", help="Inventory name the plans belong to.")]


def plans_settings(params: Path | None, overrides: dict[str, object] | None = None) -> Settings:
    """The plans commands read ./params.yaml when --params is not given (publish.store_uri, the gate's margin)."""
    return resolve(params, overrides, lookup="local")
