"""The repository's own dvc.yaml as an engineer runs it (`dvc repro`, in an environment where Prefect cannot be
imported), in a throwaway copy of the
pipeline files with tiny simulator params: a clean repro runs every stage, `dvc push` fills the default local
remote, a training param re-runs training and makes what follows stale, a code change re-runs exactly the stages that
list that code, a changed table re-runs everything."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from flows_support import TINY_PARAMS, change_one_table, tiny_inventory

from dreamshard.documents import load_inventory
from dreamshard.pipeline.workspace import PipelineWorkspace

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
ALL_STAGES = ["inventory", "incumbent", "tasks", "profile", "train", "plan", "evaluate"]


def _no_prefect(cwd: Path) -> str:
    """A directory whose `prefect` package fails to import, as in an installation without Prefect: the stages
    are library commands and must not need it."""
    fake = cwd.parent / "no-prefect" / "prefect"
    fake.mkdir(parents=True, exist_ok=True)
    (fake / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'prefect'\", name='prefect')\n")
    return str(fake.parent)


def _run(args: list[str], cwd: Path) -> str:
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "DVC_NO_ANALYTICS": "1",
        "PYTHONPATH": _no_prefect(cwd),
    }
    res = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, f"{' '.join(args)} failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return res.stdout


def _ran_stages(out: str) -> list[str]:
    return [line.split("'")[1] for line in out.splitlines() if line.startswith("Running stage '")]


def _status(repo: Path) -> dict[str, object]:
    """The stale stages, as the orchestrator reads them (DVC's API in-process, the same answer as `dvc status`
    prints: checked once against the command below; a process per check cost a second)."""
    return PipelineWorkspace(repo).status()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repo holding this checkout's pipeline files, tiny params, a tiny input inventory and the code link."""
    r = tmp_path / "clone"
    (r / ".dvc").mkdir(parents=True)
    for name in ("dvc.yaml", ".dvcignore", ".gitignore"):
        shutil.copy(ROOT / name, r / name)
    for name in ("config", ".gitignore"):
        shutil.copy(ROOT / ".dvc" / name, r / ".dvc" / name)
    (r / "params.yaml").write_text(yaml.safe_dump(TINY_PARAMS, sort_keys=False))
    tiny_inventory(r / "inputs" / "inventory.yaml")
    shutil.copy(ROOT / "inputs" / "incumbent.json", r / "inputs" / "incumbent.json")  # no plan current yet
    PipelineWorkspace(r).link_code(ROOT / "dreamshard")  # in the checkout itself this is the package directory
    with open(r / ".gitignore", "a") as f:
        f.write("/dreamshard\n")
    _run(["git", "init", "-q"], r)
    _run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "add", "-A"], r)
    _run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "pipeline"], r)
    return r


def test_dvc_pipeline_reruns_only_what_changed(repo: Path, tmp_path: Path) -> None:
    dvc = str(BIN / "dvc")
    assert _ran_stages(_run([dvc, "repro"], repo)) == ALL_STAGES
    assert json.loads(_run([str(BIN / "dvc"), "status", "--json"], repo) or "{}") == {} == _status(repo)
    for out in (
        "data/inventory.yaml",
        "data/measurements.jsonl",
        "models/dreamshard/model.json",
        "data/plan.json",
        "data/comparison.json",
        "reports/comparison.md",
        "metrics/evaluation.json",
        "plots/cost_per_sharder.json",
    ):
        assert (repo / out).is_file(), out
    evaluation = json.loads((repo / "metrics/evaluation.json").read_text())
    assert (
        set(evaluation["sharders"]) == {"round_robin", "torchrec", "dreamshard"}
        and evaluation["backend"] == "simulator"
    )
    plan = json.loads((repo / "data/plan.json").read_text())
    assert any(
        r["plan"]["plan_id"] == plan["plan_id"]
        for r in json.loads((repo / "data/comparison.json").read_text())["results"]
    )
    _run([dvc, "push"], repo)
    pushed = [p for p in (repo / ".dvc-remote").rglob("*") if p.is_file()]
    assert len(pushed) >= 6, pushed  # inventory, tasks, measurements, model files, plan, comparison, reports

    # Code: the stages that list dreamshard/sharders (train: its loop measures the search's plans; plan, evaluate),
    # and nothing else, become stale.
    code = tmp_path / "code" / "dreamshard"
    shutil.copytree(ROOT / "dreamshard", code, ignore=shutil.ignore_patterns("__pycache__"))
    PipelineWorkspace(repo).link_code(code)
    assert _status(repo) == {}  # same code, another place: nothing to do
    heuristics = code / "sharders" / "heuristics.py"
    heuristics.write_text(heuristics.read_text() + "\n# a change to the heuristics\n")
    assert set(_status(repo)) == {"train", "plan", "evaluate"}
    PipelineWorkspace(repo).link_code(ROOT / "dreamshard")
    assert _status(repo) == {}

    # The job's world: the stages that charge the collectives in it (params world) become stale, nothing else.
    before = (repo / "params.yaml").read_text()
    params = yaml.safe_load(before)
    params["world"] = {"name": "fast"}
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    assert set(_status(repo)) == {"profile", "train", "plan"}
    (repo / "params.yaml").write_text(before)
    assert _status(repo) == {}

    # A training param: train re-runs, and what consumes the new model becomes stale; profile does not.
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["train_policy"]["episodes"] = 20
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    assert set(_status(repo)) == {"train"}
    assert _ran_stages(_run([dvc, "repro", "--single-item", "train"], repo)) == ["train"]
    assert set(_status(repo)) == {"plan", "evaluate"}

    # The plan the job runs now becomes the incumbent: the stages that read it, nothing upstream.
    shutil.copy(repo / "data" / "plan.json", repo / "inputs" / "incumbent.json")
    assert set(_status(repo)) == {"incumbent", "plan", "evaluate"}
    assert _ran_stages(_run([dvc, "repro", "--single-item", "incumbent"], repo)) == ["incumbent"]
    assert (repo / "data" / "incumbent.json").read_bytes() == (repo / "inputs" / "incumbent.json").read_bytes()
    assert set(_status(repo)) == {"plan", "evaluate"}

    # One table changes in the input inventory: everything downstream of it.
    change_one_table(load_inventory(repo / "inputs" / "inventory.yaml"), repo / "inputs" / "inventory.yaml")
    assert set(_status(repo)) == {"inventory", "plan", "evaluate"}  # plan, evaluate: still the new model's
    assert _ran_stages(_run([dvc, "repro", "--single-item", "inventory"], repo)) == ["inventory"]
    assert set(_status(repo)) == set(ALL_STAGES) - {"inventory", "incumbent"}  # the new inventory feeds the rest
