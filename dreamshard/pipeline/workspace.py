"""A pipeline workspace: a git + DVC repository in which the stages of dvc.yaml run (docs/architecture/pipeline.md,
"One stage graph").

    ws = PipelineWorkspace("runs/pipeline")
    ws.init(dvc_yaml_text, params_text, RemoteSpec(url="runs/dvc-remote"))   # git, DVC, remote, code link
    ws.write_inventory(inventory)                        # inputs/inventory.yaml, the input the stages start from
    ws.write_incumbent(plan, inventory.name, replace=True)  # inputs/incumbent.json, the plan the job runs now
    for stage in ws.stages(): if stage in ws.status(): ws.repro(stage)        # DVC's change detection only
    ws.commit("..."); ws.push(); ws.lineage(...)                               # dvc.lock in git, data in the remote

Stages depend on the package directories they run (`dreamshard/learning`, ...): in a workspace `dreamshard` is a
git-ignored link to the installed package (re-made by `init`), so a code change re-runs exactly the stages whose
code changed and dvc.lock records the code's hash next to the data's.

`reproduce` rebuilds a workspace from a published plan's lineage alone (dvc.yaml, params, dvc.lock, remote),
pulls exactly that data and model, and checks them against the lock.
"""

from __future__ import annotations

import configparser
import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

import dreamshard
from dreamshard.documents import atomic_write_text, load_inventory, model_json, save_inventory
from dreamshard.errors import ConfigError, DreamshardError, PipelineError, first_line, redact_url
from dreamshard.parsing import load_yaml
from dreamshard.pipeline.dvc import (
    configure_local_remote,
    configure_s3_remote,
    dvc_status,
    init_repo,
    run_dvc,
    stream_dvc,
)
from dreamshard.pipeline.incumbent import no_incumbent
from dreamshard.pipeline.stream import OnLine
from dreamshard.values import Inventory, Plan
from dreamshard.values.lineage import Lineage, dvc_md5, lock_outs, sha256_text
from dreamshard.values.remote import RemoteSpec

DVC_YAML = "dvc.yaml"
PARAMS = "params.yaml"
LOCK = "dvc.lock"
INPUT_INVENTORY = "inputs/inventory.yaml"
INPUT_INCUMBENT = (
    "inputs/incumbent.json"  # the plan current when the input inventory arrived (dreamshard.pipeline.incumbent)
)
INCUMBENT = "data/incumbent.json"  # its validated copy, a DVC output (what the plan stage reads)
INVENTORY = "data/inventory.yaml"
TASKS = "data/tasks.json"
MEASUREMENTS = "data/measurements.jsonl"
MODEL_DIR = "models/dreamshard"
PLAN = "data/plan.json"
COMPARISON = "data/comparison.json"
CODE_LINK = "dreamshard"
REMOTE_NAME = "storage"
GITIGNORE = f"/{CODE_LINK}\n/.pipeline.lock\n"
DVCIGNORE = "__pycache__/\n*.pyc\n"
_GIT_IDENTITY = ("-c", "user.name=dreamshard pipeline", "-c", "user.email=pipeline@dreamshard.invalid")


class ReproduceResult(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    directory: str
    plan_id: str
    model_md5: str
    measurements_md5: str
    git_revision: str


def installed_package_dir() -> Path:
    """The directory of the dreamshard package this process runs (what the workspace's code link points at)."""
    return Path(dreamshard.__file__).resolve().parent


def run_git(args: list[str], repo: str | Path) -> str:
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
    try:
        proc = subprocess.run(
            ["git", *_GIT_IDENTITY, *args], cwd=repo, env=env, capture_output=True, text=True, timeout=120, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise PipelineError(f"`git {args[0]}` could not run in {repo}: {first_line(e)}") from None
    if proc.returncode != 0:
        msg = (proc.stderr or proc.stdout).strip().splitlines()
        raise PipelineError(f"`git {' '.join(args[:2])}` failed in {repo}: {msg[-1] if msg else 'failed'}")
    return proc.stdout


class PipelineWorkspace:
    """One workspace repository; every path is relative to `root`."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def path(self, rel: str) -> Path:
        return self.root / rel

    def exists(self) -> bool:
        return (self.root / ".dvc").is_dir() and (self.root / ".git").exists()

    # ------------------------------------------------------------------------------------ creating

    def init(self, dvc_yaml: str, params: str, remote: RemoteSpec | None = None) -> bool:
        """Create the repository if needed (git, DVC, ignore files, dvc.yaml and params.yaml when missing, the
        remote, the code link) and commit it. Returns True when it was created now. Idempotent."""
        created = not self.exists()
        check_directory_path(self.root, "workspace")
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise PipelineError(f"cannot create the workspace {self.root}: {e.strerror or first_line(e)}") from None
        if not (self.root / ".git").exists():
            run_git(["init", "-q"], self.root)
        if not (self.root / ".dvc").is_dir():
            init_repo(self.root)
        for name, text in ((".gitignore", GITIGNORE), (".dvcignore", DVCIGNORE)):
            self._ensure_lines(name, text)
        for name, text in ((DVC_YAML, dvc_yaml), (PARAMS, params)):
            if not self.path(name).exists():
                atomic_write_text(self.path(name), text)
        if remote is not None:
            self.set_remote(remote)
        self.link_code()
        if created:
            self.commit("workspace: dvc.yaml, params.yaml, DVC remote")
        return created

    def _ensure_lines(self, rel: str, text: str) -> None:
        p = self.path(rel)
        have = p.read_text() if p.is_file() else ""
        missing = [ln for ln in text.splitlines() if ln not in have.splitlines()]
        if missing:
            atomic_write_text(p, have + ("" if not have or have.endswith("\n") else "\n") + "\n".join(missing) + "\n")

    def kept_text(self, rel: str) -> str:
        """The text of `rel` as the workspace keeps it; "" when it is missing or not UTF-8 text."""
        try:
            return self.path(rel).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return ""

    def sync_text(self, rel: str, text: str) -> bool:
        """Write `text` to `rel` if it differs; True when it changed."""
        p = self.path(rel)
        if p.is_file() and p.read_bytes() == text.encode():  # bytes: a file that is not UTF-8 is simply replaced
            return False
        atomic_write_text(p, text)
        return True

    def write_inventory(self, inventory: Inventory) -> bool:
        """The stages' input inventory (canonical YAML, so the inventory stage's validated copy is byte-equal)."""
        current = self.path(INPUT_INVENTORY)
        if current.is_file():
            try:
                if load_inventory(current).model_dump() == inventory.model_dump():
                    return False
            except DreamshardError:  # an unreadable or invalid input is simply replaced
                pass
        save_inventory(inventory, current)
        return True

    def write_incumbent(self, plan: Plan | None, inventory_name: str, replace: bool) -> bool:
        """The plan stage's incumbent (`plan`, or a note that none was current), written when `replace` (the input
        inventory changed: a new version is planned from the plan current now) or when there is none yet. An
        unchanged inventory keeps its incumbent, so a run that changes nothing re-runs nothing. True when written."""
        if self.path(INPUT_INCUMBENT).is_file() and not replace:
            return False
        return self.sync_text(INPUT_INCUMBENT, model_json(plan if plan is not None else no_incumbent(inventory_name)))

    def link_code(self, package_dir: Path | None = None) -> None:
        """Point `<root>/dreamshard` at the installed package (left alone when it is a real directory)."""
        link = self.path(CODE_LINK)
        target = (package_dir or installed_package_dir()).resolve()
        if link.is_symlink():
            if link.resolve() == target:
                return
            link.unlink()
        elif link.exists():
            return
        link.symlink_to(target, target_is_directory=True)

    # ------------------------------------------------------------------------------------ the DVC remote

    def remote(self) -> RemoteSpec | None:
        """The default DVC remote from .dvc/config (and config.local)."""
        cfg = configparser.ConfigParser()
        cfg.read([self.root / ".dvc" / "config", self.root / ".dvc" / "config.local"])
        name = cfg.get("core", "remote", fallback=None)
        section = next((s for s in (f'remote "{name}"', f"'remote \"{name}\"'") if cfg.has_section(s)), None)
        if not name or section is None:
            return None
        url = cfg.get(section, "url")
        if "://" not in url and not Path(url).is_absolute():
            url = str((self.root / ".dvc" / url).resolve())  # DVC keeps local paths relative to .dvc/
        return RemoteSpec(url=url, endpoint_url=cfg.get(section, "endpointurl", fallback=None))

    def set_remote(self, remote: RemoteSpec) -> None:
        spec = remote.resolved()
        if self.remote() == spec:
            return
        if spec.is_s3:
            configure_s3_remote(REMOTE_NAME, spec.url, spec.endpoint_url, self.root)
        else:
            configure_local_remote(REMOTE_NAME, spec.url, self.root)

    # ------------------------------------------------------------------------------------ stages

    def stages(self) -> list[str]:
        """Stage names in dvc.yaml order (the order they are run in)."""
        data: Any = load_yaml(self.path(DVC_YAML).read_text()) or {}
        return list((data.get("stages") or {}).keys())

    def status(self) -> dict[str, Any]:
        """`dvc status`: {stage: [what changed]} for stages that would run (empty: up to date)."""
        return {k: v for k, v in dvc_status(self.root).items() if v}

    def repro(
        self, stage: str, force: bool = False, env: Mapping[str, str] | None = None, on_line: OnLine | None = None
    ) -> str:
        """`dvc repro --single-item [--force] STAGE`; returns its output (each line also to `on_line` as it comes,
        with a heartbeat line when the stage is silent: `dvc.stream_dvc`)."""
        args = ["repro", "--single-item", *(["--force"] if force else []), stage]
        # Stage commands call `dreamshard`: the one next to this Python first (a venv need not be activated).
        path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
        if on_line is not None:
            return stream_dvc(args, self.root, {**(env or {}), "PATH": path}, on_line)
        return run_dvc(args, self.root, timeout_s=None, env={**(env or {}), "PATH": path})

    def push(self) -> str:
        return run_dvc(["push"], self.root, timeout_s=None)

    def pull(self) -> str:
        return run_dvc(["pull"], self.root, timeout_s=None)

    def lock_text(self) -> str:
        p = self.path(LOCK)
        if not p.is_file():
            raise PipelineError(f"{self.root} has no {LOCK}: no stage has run there yet")
        return p.read_text()

    # ------------------------------------------------------------------------------------ git

    def commit(self, message: str) -> str | None:
        """Commit everything git does not ignore (dvc.lock, params, inputs, small metrics); None if nothing changed."""
        run_git(["add", "-A"], self.root)
        if not self.dirty():
            return None
        run_git(["commit", "-q", "-m", message], self.root)
        return self.head()

    def dirty(self) -> bool:
        """Anything git does not ignore that is not committed (a new dvc.lock, params, inputs)."""
        return bool(run_git(["status", "--porcelain"], self.root).strip())

    def head(self) -> str | None:
        try:
            return run_git(["rev-parse", "HEAD"], self.root).strip() or None
        except PipelineError:
            return None  # no commit yet

    def tags(self, *names: str) -> list[str]:
        """Which of these tag names (or patterns) exist in the repository."""
        return run_git(["tag", "-l", *names], self.root).split() if self.head() else []

    def tag(self, name: str, message: str) -> None:
        run_git(["tag", "-f", "-a", name, "-m", message], self.root)

    # ------------------------------------------------------------------------------------ lineage

    def lineage(self, flow_run_id: str | None = None, extra: Mapping[str, str] | None = None) -> Lineage:
        """What produced the workspace's current outputs, from dvc.lock (call after committing the lock)."""
        lock = self.lock_text()
        outs = lock_outs(lock)
        params = self.path(PARAMS).read_text()
        card = self.path(MODEL_DIR) / "model.json"
        remote = self.remote()
        return Lineage(
            inventory_fingerprint=load_inventory(self.path(INVENTORY)).fingerprint(),
            params_hash=sha256_text(params),
            package_version=_package_version(),
            git_revision=self.head(),
            flow_run_id=flow_run_id,
            measurements_md5=outs.get(MEASUREMENTS),
            model_md5=outs.get(MODEL_DIR),
            model_version=str(json.loads(card.read_text()).get("version")) if card.is_file() else None,
            dvc_remote=redact_url(remote.url) if remote else None,
            dvc_remote_endpoint=remote.endpoint_url if remote else None,
            dvc_lock=lock,
            dvc_yaml=self.path(DVC_YAML).read_text(),
            params=params,
            workspace=str(self.root.resolve()),
            extra=dict(extra or {}),
        )


def _package_version() -> str | None:
    with contextlib.suppress(metadata.PackageNotFoundError):
        return metadata.version("dreamshard")
    return None


def check_directory_path(path: Path, option: str) -> None:
    """PipelineError unless `path` is or can be made a directory: it and its parents are no file or dead link."""
    for p in (path, *path.parents):
        if p.exists() or p.is_symlink():
            if not p.is_dir():
                raise PipelineError(
                    f"{option} {path}: {p} is {'a file' if p.exists() else 'a link to nowhere'}; give a directory"
                )
            return


@contextlib.contextmanager
def undo_on_failure(target: Path) -> Iterator[None]:
    """On failure remove what the block wrote: the directories it created (`target` or parents that did not
    exist), else the contents of `target`, a directory the user gave empty (which stays)."""
    made = next((p for p in (*reversed(target.parents), target) if not (p.exists() or p.is_symlink())), None)
    try:
        yield
    except BaseException:
        for child in [made] if made is not None else list(target.iterdir()) if target.is_dir() else []:
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink(missing_ok=True)
        raise


def reproduce(lineage: Lineage, into: str | Path, plan_id: str) -> ReproduceResult:
    """A fresh workspace in `into` holding exactly the data and model a plan was made from.

    Writes the plan's dvc.yaml, params.yaml and dvc.lock, configures its DVC remote, `dvc pull`s every output
    the lock names, restores the input inventory from its validated copy, commits, and checks the model's and
    the measurements' md5 against the lineage. PipelineError when something is missing or does not match.
    """
    if not (lineage.dvc_lock and lineage.dvc_yaml and lineage.params and lineage.dvc_remote):
        raise PipelineError(
            f"plan {plan_id} has no complete lineage (dvc.lock, dvc.yaml, params and remote): only plans published "
            f"by `dreamshard pipeline run` or its Prefect deployment can be reproduced"
        )
    target = Path(into)
    check_directory_path(target, "--into")
    if target.exists() and any(target.iterdir()):
        raise ConfigError(f"--into {target} already exists and is not empty; choose a new directory")
    ws = PipelineWorkspace(target)
    with undo_on_failure(target):  # nothing half-made or unverified is left behind; the user's directory stays
        ws.init(
            lineage.dvc_yaml,
            lineage.params,
            RemoteSpec(url=lineage.dvc_remote, endpoint_url=lineage.dvc_remote_endpoint),
        )
        atomic_write_text(ws.path(LOCK), lineage.dvc_lock)
        ws.pull()
        for validated, given in ((INVENTORY, INPUT_INVENTORY), (INCUMBENT, INPUT_INCUMBENT)):
            if ws.path(validated).is_file():  # the inputs, restored from their validated (byte-equal) copies
                ws.path(given).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(ws.path(validated), ws.path(given))
        rev = ws.commit(f"reproduce plan {plan_id} (workspace revision {lineage.git_revision or 'unknown'})") or ""
        got = {
            name: dvc_md5(ws.path(rel)) if ws.path(rel).exists() else "missing"
            for name, rel in (("model", MODEL_DIR), ("measurements", MEASUREMENTS))
        }
        want = {"model": lineage.model_md5, "measurements": lineage.measurements_md5}
        for name in ("model", "measurements"):
            if got[name] != want[name]:
                raise PipelineError(
                    f"{name} pulled into {target} has md5 {got[name]}, the plan's lineage says {want[name]}: "
                    f"the remote {lineage.dvc_remote} does not hold what produced plan {plan_id}"
                )
    return ReproduceResult(
        directory=str(target),
        plan_id=plan_id,
        model_md5=got["model"],
        measurements_md5=got["measurements"],
        git_revision=rev,
    )
