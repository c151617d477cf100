"""The DVC remote of a repository (`dreamshard remote s3 | local`): a local directory or an S3-compatible store;
credentials stay in the AWS_* environment / boto3 chain, never in .dvc/config."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from dreamshard.pipeline.dvc import configure_local_remote, configure_s3_remote
from dreamshard.usecases.base import Request, Result


class RemoteRequest(Request):
    kind: Literal["s3", "local"]
    name: str
    url: str  # s3://bucket/path, or a directory
    endpoint_url: str | None = None  # S3 only
    repo: Path = Path(".")
    default: bool = True  # make it the default remote


class RemoteResult(Result):
    commands: list[list[str]]  # the `dvc` commands run (arguments after `dvc`)


def configure(request: RemoteRequest) -> RemoteResult:
    """Point the repository's DVC at the remote (an s3://bucket/path, or a local directory)."""
    if request.kind == "s3":
        done = configure_s3_remote(request.name, request.url, request.endpoint_url, request.repo, request.default)
    else:
        done = configure_local_remote(request.name, Path(request.url), request.repo, request.default)
    return RemoteResult(commands=[list(c) for c in done])
