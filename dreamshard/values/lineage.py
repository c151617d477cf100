"""Lineage of a published plan: which data, model, params and code produced it (docs/architecture/pipeline.md,
"Lineage").

A plan the pipeline publishes carries one: `plans show` prints it, `plans reproduce` fetches that data and model
into a fresh workspace. `dvc_md5` and `lock_outs` compute DVC's own hashes (what dvc.lock records), so a pulled
model is checked against the lock without DVC.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

#: Directory entries DVC never hashes in this project (see .dvcignore).
IGNORED_NAMES = ("__pycache__",)


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
    dvc_remote_endpoint: str | None = None  # its S3 endpoint, when not AWS
    dvc_lock: str | None = None  # the dvc.lock text of the run (what `plans reproduce` checks out)
    dvc_yaml: str | None = None  # the dvc.yaml text of the run (the stage graph that lock belongs to)
    params: str | None = None  # the params.yaml text of the run
    workspace: str | None = None  # where the workspace repository lives (host path), for humans
    extra: dict[str, str] = Field(default_factory=dict)

    def summary(self) -> list[tuple[str, str]]:
        """(field, value) rows for display: the hashes and ids, not the embedded file texts."""
        skip = {"dvc_lock", "dvc_yaml", "params", "extra"}
        rows = [(k, str(v)) for k, v in self.model_dump().items() if k not in skip and v is not None]
        rows += [(k, v) for k, v in sorted(self.extra.items())]
        rows += [
            (f"{k} (text)", f"{len(v.splitlines())} lines")
            for k, v in (("dvc_lock", self.dvc_lock), ("dvc_yaml", self.dvc_yaml), ("params", self.params))
            if v
        ]
        return rows

    def markdown(self) -> str:
        rows = "\n".join(f"| {k} | `{v}` |" for k, v in self.summary())
        return f"| lineage | value |\n|---|---|\n{rows}\n"


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _md5_file(path: Path) -> str:
    h = hashlib.md5()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def dvc_md5(path: str | Path) -> str:
    """DVC 3's md5 of a file, or of a directory ("<md5>.dir"), as dvc.lock records it."""
    p = Path(path)
    if p.is_file():
        return _md5_file(p)
    if not p.is_dir():
        raise FileNotFoundError(str(p))
    entries: list[dict[str, Any]] = []
    for root, dirs, files in os.walk(p, followlinks=True):
        dirs[:] = [d for d in dirs if d not in IGNORED_NAMES]
        for name in files:
            full = Path(root) / name
            entries.append({"md5": _md5_file(full), "relpath": full.relative_to(p).as_posix()})
    entries.sort(key=lambda e: e["relpath"])
    return hashlib.md5(json.dumps(entries, sort_keys=True).encode()).hexdigest() + ".dir"


def lock_outs(lock_text: str) -> dict[str, str]:
    """{output path: md5} of every stage output recorded in a dvc.lock text."""
    data = yaml.safe_load(lock_text) or {}
    out: dict[str, str] = {}
    for stage in (data.get("stages") or {}).values():
        for o in stage.get("outs") or ():
            if isinstance(o, dict) and "path" in o and "md5" in o:
                out[str(o["path"])] = str(o["md5"])
    return out
