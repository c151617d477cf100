"""`dreamshard remote ...`: point DVC at a local directory or an S3-compatible remote."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dreamshard.usecases import remote as remote_uc

remote_app = typer.Typer(help="Configure the DVC remote (local directory or S3-compatible).", no_args_is_help=True)


@remote_app.command("s3")
def remote_s3_cmd(
    name: Annotated[str, typer.Option("--name", help="DVC remote name.")],
    url: Annotated[str, typer.Option("--url", help="s3://bucket/path")],
    endpoint: Annotated[str | None, typer.Option("--endpoint", help="S3 endpoint URL (SeaweedFS, MinIO, ...).")] = None,
    repo: Annotated[Path, typer.Option("--repo", help="DVC repository directory.")] = Path("."),
    default: Annotated[bool, typer.Option("--default/--no-default", help="Make it the default remote.")] = True,
) -> None:
    """Point DVC at an S3-compatible remote. Credentials stay in AWS_* env / boto3 chain, never in .dvc/config."""
    request = remote_uc.RemoteRequest(kind="s3", name=name, url=url, endpoint_url=endpoint, repo=repo, default=default)
    for cmd in remote_uc.configure(request).commands:
        typer.echo("dvc " + " ".join(cmd))


@remote_app.command("local")
def remote_local_cmd(
    name: Annotated[str, typer.Option("--name", help="DVC remote name.")] = "local",
    path: Annotated[Path, typer.Option("--path", help="Directory holding the DVC cache copy.")] = Path(
        "../dreamshard-dvc-store"
    ),
    repo: Annotated[Path, typer.Option("--repo", help="DVC repository directory.")] = Path("."),
    default: Annotated[bool, typer.Option("--default/--no-default", help="Make it the default remote.")] = True,
) -> None:
    """Point DVC at a local directory remote (the default setup)."""
    request = remote_uc.RemoteRequest(kind="local", name=name, url=str(path), repo=repo, default=default)
    for cmd in remote_uc.configure(request).commands:
        typer.echo("dvc " + " ".join(cmd))


def register(app: typer.Typer) -> None:
    """Add `remote` to the main app."""
    app.add_typer(remote_app, name="remote")
