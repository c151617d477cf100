"""Configure DVC remotes by command: a local directory (default) or an S3-compatible bucket.

Only the URL and the endpoint go into .dvc/config; credentials stay in the environment or boto3's
chain (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / a profile), so nothing secret is ever committed.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from dreamshard.errors import ConfigError, PipelineError, first_line, redact_url, redact_urls
from dreamshard.pipeline.stream import OnLine, stream_command

_SECRET_HINTS = ("access_key", "secret", "session_token", "password")


def find_dvc() -> str:
    """The `dvc` executable next to this Python (the venv), else on PATH."""
    here = Path(sys.executable).parent / "dvc"
    if here.is_file() and os.access(here, os.X_OK):
        return str(here)
    found = shutil.which("dvc")
    if found is None:
        raise ConfigError("`dvc` not found: install dreamshard's dependencies (make install)")
    return found


def run_dvc(
    args: list[str], repo_dir: str | Path, timeout_s: float | None = 120, env: Mapping[str, str] | None = None
) -> str:
    """Run `dvc ARGS` in repo_dir (telemetry off; `env` added to the environment, e.g. for a stage's command);
    a failure is one ConfigError line with DVC's own error."""
    full_env = {**os.environ, **(env or {}), "DVC_NO_ANALYTICS": "1"}
    try:
        proc = subprocess.run(
            [find_dvc(), *args],
            cwd=repo_dir,
            env=full_env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ConfigError(f"`dvc {' '.join(args[:2])}` could not run in {repo_dir}: {e}") from None
    if proc.returncode != 0:
        raise _failure(args, repo_dir, proc.stderr or proc.stdout)
    return proc.stdout


def _failure(args: list[str], repo_dir: str | Path, output: str) -> ConfigError:
    """DVC's own error line (the first ERROR line, else the last line) as one ConfigError."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    msg = next((ln for ln in lines if ln.upper().startswith("ERROR")), lines[-1] if lines else "failed")
    return ConfigError(f"`dvc {' '.join(args[:2])}` failed in {repo_dir}: {redact_urls(msg)}")


def stream_dvc(
    args: list[str], repo_dir: str | Path, env: Mapping[str, str], on_line: OnLine, heartbeat_s: float | None = None
) -> str:
    """`run_dvc` for a long command: every line of output (a stage's own included) goes to `on_line` as it is
    written, and a heartbeat line after each `heartbeat_s` (stream.HEARTBEAT_S) of silence; returns the output."""
    label = f"dvc {' '.join(args)}"
    try:
        done = stream_command(
            [find_dvc(), *args], repo_dir, {**env, "DVC_NO_ANALYTICS": "1"}, on_line, label, heartbeat_s
        )
    except OSError as e:
        raise ConfigError(f"`dvc {' '.join(args[:2])}` could not run in {repo_dir}: {e}") from None
    if done.returncode != 0:
        raise _failure(args, repo_dir, done.output)
    return done.output


def dvc_status(repo_dir: str | Path) -> dict[str, Any]:
    """What `dvc status --json` prints in `repo_dir`, computed in this process with DVC's API (the repository locked
    as the command locks it): {stage: [what changed]}, unchanged stages included. A `dvc` process per call costs
    about a second, and the orchestrator asks after every stage. DVC names a stage of a dvc.yaml outside the current
    directory `<path>/dvc.yaml:<stage>`; the keys here are what the command prints in `repo_dir`, the stage names.
    A failure is one PipelineError line with DVC's error."""
    # DVC's API loads dvc (0.4 s): only here, so the light commands that import this module never pay for it
    from dvc.exceptions import DvcException
    from dvc.repo import Repo, lock_repo

    try:
        with Repo(str(repo_dir)) as repo, lock_repo(repo):
            found = repo.status()
    except DvcException as e:
        why = first_line(e) + (f": {first_line(e.__cause__)}" if e.__cause__ is not None else "")
        raise PipelineError(f"`dvc status` failed in {repo_dir}: {redact_urls(why)}") from None
    return {key.rpartition("dvc.yaml:")[2]: value for key, value in found.items()}  # a key without it: whole


def init_repo(repo_dir: Path) -> None:
    """`dvc init` in a git repository, with DVC's usage analytics off in its config (`dvc config core.analytics
    false`): in this process, as two DVC processes cost 0.6 s of CPU a workspace. A failure is one ConfigError line
    with DVC's error."""
    # DVC's API loads dvc (0.4 s): only here, so the light commands that import this module never pay for it
    from dvc.exceptions import DvcException
    from dvc.repo import Repo

    dvc_log = logging.getLogger("dvc")
    level = dvc_log.level
    dvc_log.setLevel(logging.WARNING)  # as `dvc init -q`: not DVC's "Initialized DVC repository." on our stdout
    try:
        with Repo.init(str(repo_dir)) as repo, repo.config.edit() as conf:
            conf["core"]["analytics"] = "false"  # the text `dvc config` writes
    except DvcException as e:
        raise ConfigError(f"`dvc init` failed in {repo_dir}: {redact_urls(first_line(e))}") from None
    finally:
        dvc_log.setLevel(level)


def _check_repo(repo_dir: str | Path) -> Path:
    p = Path(repo_dir)
    if not (p / ".dvc").is_dir():
        raise ConfigError(f"{p.resolve()} is not a DVC repository (no .dvc/): run `dvc init` there first")
    return p


def configure_s3_remote(
    name: str, url: str, endpoint_url: str | None = None, repo_dir: str | Path = ".", default: bool = True
) -> list[list[str]]:
    """`dvc remote add -f [-d] NAME s3://bucket/path` + `dvc remote modify NAME endpointurl URL`.

    Returns the dvc commands run (for display). Never writes credentials.
    """
    repo = _check_repo(repo_dir)
    parsed = urlparse(url)
    if parsed.scheme != "s3" or not parsed.netloc:
        raise ConfigError(f"--url must look like s3://bucket/path, got '{redact_url(url)}'")
    if "@" in parsed.netloc or parsed.query or any(h in url.lower() for h in _SECRET_HINTS):
        raise ConfigError("do not put credentials in the remote URL; export AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY")
    cmds = [["remote", "add", "-f", *(["-d"] if default else []), name, url]]
    if endpoint_url:
        ep = urlparse(endpoint_url)
        if ep.scheme not in {"http", "https"} or not ep.netloc or "@" in ep.netloc or ep.query or ep.fragment:
            raise ConfigError(
                f"--endpoint must be an http(s) URL without credentials or query, got '{redact_url(endpoint_url)}'; "
                f"credentials go in AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY"
            )
        cmds.append(["remote", "modify", name, "endpointurl", endpoint_url])
    for c in cmds:
        run_dvc(c, repo)
    return cmds


def configure_local_remote(
    name: str, path: str | Path, repo_dir: str | Path = ".", default: bool = True
) -> list[list[str]]:
    """`dvc remote add -f [-d] NAME DIR` (the directory is created)."""
    repo = _check_repo(repo_dir)
    target = Path(path).expanduser()
    try:
        (target if target.is_absolute() else repo / target).mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"cannot create remote directory {target}: {e.strerror}") from None
    cmds = [["remote", "add", "-f", *(["-d"] if default else []), name, str(target)]]
    for c in cmds:
        run_dvc(c, repo)
    return cmds
