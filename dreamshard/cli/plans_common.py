"""What the `plans` commands share: their options, where they read the settings from, and the line on an orphan."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated

import typer

from dreamshard.config.settings import Settings, resolve
from dreamshard.usecases.plans import ListRequest, orphan_age
from dreamshard.values.records import Orphan

#: The use case's default grace for a leftover (`ListRequest.grace_minutes`), shown by --help.
GRACE_MINUTES: float = ListRequest.model_fields["grace_minutes"].default

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
GraceOpt = Annotated[
    float,
    typer.Option(
        "--grace-minutes",
        help="A leftover of a publish younger than this may be a publish in flight: listed as 'in flight or orphan', "
        f"never removed (default {ListRequest.model_fields['grace_minutes'].default:g}).",
    ),
]


def plans_settings(params: Path | None, overrides: dict[str, object] | None = None) -> Settings:
    """The plans commands read ./params.yaml when --params is not given (publish.store_uri, the gate's margin)."""
    return resolve(params, overrides, lookup="local")


def orphan_line(orphan: Orphan, gc: str) -> str:
    """One line on an orphan of an interrupted publish (dreamshard.store.orphans) naming its repair, `gc` (the
    `plans gc` command line)."""
    written = f"written {orphan_age(orphan)} ago"
    if orphan.in_flight:
        return (
            f"in flight or orphan: {orphan.key}: {orphan.what}, {written}, within the grace period (a publish may "
            f"still be writing it); if none is, `{gc}` removes it once the grace period is over"
        )
    return f"orphan: {orphan.key}: {orphan.what}, left by an interrupted publish, {written}; remove it: `{gc}`"


def gc_command(store: str | None, inventory: str | None) -> str:
    """The `plans gc` command line for this store and inventory (as the user gave them)."""
    parts = ["dreamshard plans gc"]
    if store:
        parts.append(f"--store {shlex.quote(store)}")
    if inventory:
        parts.append(f"--inventory {shlex.quote(inventory)}")
    return " ".join(parts)
