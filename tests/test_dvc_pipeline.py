"""dvc.yaml in a throwaway copy of the repo's pipeline files (never in the working repo): a clean
`dvc repro` works offline; a changed policy param re-runs only the policy and later stages; one changed
table re-profiles and retrains; `dvc push` fills the default local remote."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from flows_support import TINY_PARAMS

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
ALL_STAGES = ["inventory", "tasks", "profile", "train_cost", "train_policy", "plan", "evaluate"]


def _run(args: list[str], cwd: Path) -> str:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "DVC_NO_ANALYTICS": "1"}
    res = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, f"{' '.join(args)} failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return res.stdout


def _dry_stages(repo: Path) -> list[str]:
    out = _run([str(BIN / "dvc"), "repro", "--dry"], repo)
    return [line.split("'")[1] for line in out.splitlines() if line.startswith("Running stage '")]


def _ran_stages(out: str) -> list[str]:
    return [line.split("'")[1] for line in out.splitlines() if line.startswith("Running stage '")]


def _status(repo: Path) -> dict[str, object]:
    return json.loads(_run([str(BIN / "dvc"), "status", "--json"], repo) or "{}")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A fresh git repo with the pipeline files of this checkout and tiny simulator params."""
    r = tmp_path / "clone"
    (r / ".dvc").mkdir(parents=True)
    for name in ("dvc.yaml", ".dvcignore", ".gitignore"):
        shutil.copy(ROOT / name, r / name)
    for name in ("config", ".gitignore"):
        shutil.copy(ROOT / ".dvc" / name, r / ".dvc" / name)
    (r / "params.yaml").write_text(yaml.safe_dump(TINY_PARAMS, sort_keys=False))
    _run(["git", "init", "-q"], r)
    _run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "add", "-A"], r)
    _run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "pipeline"], r)
    return r


def test_dvc_pipeline_reruns_only_what_changed(repo: Path) -> None:
    dvc = str(BIN / "dvc")
    assert _ran_stages(_run([dvc, "repro"], repo)) == ALL_STAGES
    assert _status(repo) == {}
    for out in ("data/inventory.yaml", "data/measurements.jsonl", "models/dreamshard/model.json", "data/plan.json",
                "metrics/cost_model.json", "metrics/evaluation.json", "plots/cost_per_sharder.json",
                "plots/cost_model_error.json"):
        assert (repo / out).is_file(), out
    evaluation = json.loads((repo / "metrics/evaluation.json").read_text())
    assert set(evaluation["sharders"]) == {"round_robin", "dreamshard"}
    assert evaluation["backend"] == "simulator"
    _run([dvc, "push"], repo)
    pushed = [p for p in (repo / ".dvc-remote").rglob("*") if p.is_file()]
    assert len(pushed) >= 4, pushed  # inventory, tasks, measurements, model files reached the local remote

    # A policy param: only train_policy (and what consumes the new policy) re-runs.
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["train_policy"]["episodes"] = 20
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    assert set(_status(repo)) == {"train_policy"}
    ran = _ran_stages(_run([dvc, "repro"], repo))
    assert ran[0] == "train_policy" and set(ran) <= {"train_policy", "plan", "evaluate"}
    assert "profile" not in ran and "train_cost" not in ran

    # One table changes (a user-managed inventory: frozen stage): profile and everything downstream.
    _run([dvc, "freeze", "inventory"], repo)
    inv = yaml.safe_load((repo / "data/inventory.yaml").read_text())
    inv["tables"][0]["pooling_factor"] = float(inv["tables"][0]["pooling_factor"]) + 3.0
    (repo / "data/inventory.yaml").write_text(yaml.safe_dump(inv, sort_keys=False))
    stale = _status(repo)
    assert {"tasks", "profile", "train_cost", "train_policy", "plan", "evaluate"} <= set(stale)
    assert _dry_stages(repo) == ALL_STAGES[1:]
