"""The paths a deployment records in its parameters (params file, workspace, plan store, DVC remote), as the worker
that runs it must find them.

A worker runs each flow in a temporary directory, so a relative path names nothing there: every path is recorded
absolute. By default they are this (registering) host's paths: a worker on another host finds them only at the same
paths or on a shared filesystem. With `root` (`python -m dreamshard_flows.deploy --root DIR`) relative paths are
recorded under DIR, the directory the worker hosts hold (their copy of params.yaml, the workspace they create),
and nothing of this host's filesystem is named; an s3:// store or DVC remote is recorded as it is. A store or
remote that is a directory stays a filesystem path every worker host must share (`host_bound` says which)."""

from __future__ import annotations

import posixpath
from pathlib import Path

from dreamshard.config.settings import pipeline_base, resolve
from dreamshard.errors import ConfigError, InputFileError
from dreamshard.usecases.pipeline_steps import absolute_uri
from dreamshard.values.remote import RemoteSpec


def _object_storage(uri: str) -> bool:
    return "://" in uri and not uri.startswith("file://")


def on_host(root: str, path: str) -> str:
    """`path` as the worker hosts name it: absolute as given, relative under `root` (normalised, no lookup on this
    host: its links and its home directory are not the worker's)."""
    path = path.removeprefix("file://")
    return posixpath.normpath(path if posixpath.isabs(path) else posixpath.join(root, path))


def check_root(root: str) -> str:
    """`--root` must be absolute: it names a directory on the worker hosts, not one under this process's cwd."""
    if not posixpath.isabs(root) or "\n" in root:
        raise ConfigError(f"--root must be an absolute path on the worker hosts, got '{root}'")
    return posixpath.normpath(root)


def local_params(params_path: str) -> Path:
    """The params file on this host, read to validate it and find the store (refused here, not by the first run)."""
    params = Path(params_path).expanduser().resolve()
    if not params.is_file():
        raise InputFileError(f"params file not found: {params}")
    return params


def registered_paths(
    params_path: str, workspace: str, store_uri: str | None, root: str | None = None
) -> tuple[str, str, str]:
    """The params file, the workspace and the plan store as a deployment records them: absolute, taken from this
    process's working directory, or under `root` when given. The store defaults to the params'
    `publish.store_uri`. A missing or invalid params file is refused here, at registration, not by the first run."""
    params = local_params(params_path)
    store = store_uri or resolve(params, base=pipeline_base()).publish.store_uri
    if root is None:
        return str(params), str(Path(workspace).expanduser().resolve()), absolute_uri(store)
    root = check_root(root)
    recorded_store = store if _object_storage(store) else on_host(root, store)
    return on_host(root, params_path), on_host(root, workspace), recorded_store


def registered_remote(params_path: str, root: str | None = None) -> str:
    """The params' DVC remote (`pipeline.dvc_remote`, the file layered over the pipeline's own as a run reads
    it) as the retrain deployments record it: a local directory absolute, taken from this process's working
    directory or under `root`; an s3:// remote as it is."""
    remote = resolve(local_params(params_path), base=pipeline_base()).pipeline.dvc_remote
    if root is None or _object_storage(remote):
        return RemoteSpec(url=remote).resolved().url
    return on_host(check_root(root), remote)


def host_bound(store_uri: str, dvc_remote: str) -> list[str]:
    """What a worker on another host cannot reach without a shared filesystem: a store or remote that is a
    directory (one line each)."""
    found = [("plan store", store_uri), ("DVC remote", dvc_remote)]
    return [
        f"the {what} {where} is a directory: each worker host needs it at that path (a shared filesystem); "
        f"use s3:// for a worker on another host"
        for what, where in found
        if not _object_storage(where)
    ]
