"""The workspace repository on its own (a stand-in stage graph, local DVC remote): DVC's change detection over
data and code, commit, push, lineage from dvc.lock, and `reproduce` pulling exactly what a lineage names."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from flows_support import tiny_inventory

from dreamshard.errors import ConfigError, PipelineError
from dreamshard.pipeline.workspace import (
    INPUT_INVENTORY,
    MEASUREMENTS,
    MODEL_DIR,
    PipelineWorkspace,
    RemoteSpec,
    reproduce,
)
from dreamshard.values.lineage import dvc_md5, lock_outs

pytestmark = pytest.mark.integration

# A stage graph with the workspace's file names whose commands are plain shell (no training): what is under test is
# the repository around the stages, not the stages.
DVC_YAML = yaml.safe_dump(
    {
        "stages": {
            "inventory": {
                "cmd": "mkdir -p data && cp inputs/inventory.yaml data/inventory.yaml",
                "deps": ["inputs/inventory.yaml"],
                "outs": ["data/inventory.yaml"],
            },
            "train": {
                "cmd": "mkdir -p models/dreamshard/checkpoints && cp data/inventory.yaml models/dreamshard/model.bin"
                ' && echo \'{"version": "v1"}\' > models/dreamshard/model.json'
                " && echo 1 > models/dreamshard/checkpoints/a"
                " && wc -c data/inventory.yaml > data/measurements.jsonl",
                "deps": ["data/inventory.yaml", "dreamshard/sharders"],
                "params": ["train"],
                "outs": ["models/dreamshard", "data/measurements.jsonl"],
            },
        }
    },
    sort_keys=False,
)


@pytest.fixture
def ws(tmp_path: Path) -> PipelineWorkspace:
    code = tmp_path / "code"
    shutil.copytree(
        Path(__file__).resolve().parents[1] / "dreamshard" / "sharders",
        code / "sharders",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    w = PipelineWorkspace(tmp_path / "ws")
    assert w.init(DVC_YAML, "train: {seed: 0}\n", RemoteSpec(url=str(tmp_path / "remote")))
    w.link_code(code)
    w.write_inventory(tiny_inventory(tmp_path / "inv.yaml"))
    return w


def _run_changed(w: PipelineWorkspace) -> list[str]:
    ran = []
    status = w.status()
    for stage in w.stages():
        if stage in status:
            w.repro(stage)
            ran.append(stage)
            status = w.status()
    return ran


def test_stages_rerun_on_data_params_and_code_changes_only(ws: PipelineWorkspace, tmp_path: Path) -> None:
    assert _run_changed(ws) == ["inventory", "train"]
    assert ws.status() == {} and _run_changed(ws) == []
    assert not ws.write_inventory(tiny_inventory(tmp_path / "same.yaml"))  # same inventory: nothing to write
    ws.path("params.yaml").write_text("train: {seed: 1}\n")
    assert list(ws.status()) == ["train"] and _run_changed(ws) == ["train"]
    code = tmp_path / "code" / "sharders"
    (code / "__pycache__").mkdir()
    (code / "__pycache__" / "x.pyc").write_bytes(b"compiled")
    assert ws.status() == {}  # bytecode is not code (.dvcignore)
    (code / "base.py").write_text((code / "base.py").read_text() + "\n# changed\n")
    assert list(ws.status()) == ["train"]  # the stage lists the code it runs


def test_commit_push_lineage_and_reproduce(ws: PipelineWorkspace, tmp_path: Path) -> None:
    _run_changed(ws)
    rev = ws.commit("run 1")
    assert rev and ws.head() == rev and ws.commit("nothing new") is None
    ws.tag("published/plan-x", "approved")
    assert ws.tags("published/*") == ["published/plan-x"] and ws.tags("rejected/*") == []
    ws.push()
    lineage = ws.lineage("flow-run-1")
    outs = lock_outs(ws.lock_text())
    assert lineage.model_md5 == outs[MODEL_DIR] == dvc_md5(ws.path(MODEL_DIR))  # our md5 is DVC's
    assert lineage.measurements_md5 == outs[MEASUREMENTS] == dvc_md5(ws.path(MEASUREMENTS))
    assert lineage.git_revision == rev and lineage.flow_run_id == "flow-run-1" and lineage.model_version == "v1"
    assert lineage.dvc_remote == str((tmp_path / "remote").resolve()) and lineage.dvc_lock == ws.lock_text()
    assert lineage.params == "train: {seed: 0}\n" and len(lineage.params_hash or "") == 64

    into = tmp_path / "clone"
    got = reproduce(lineage, into, "plan-x")
    assert got.model_md5 == lineage.model_md5 and got.measurements_md5 == lineage.measurements_md5
    assert (into / MODEL_DIR / "checkpoints" / "a").read_text() == "1\n"
    assert (into / INPUT_INVENTORY).read_bytes() == ws.path(INPUT_INVENTORY).read_bytes()
    clone = PipelineWorkspace(into)
    clone.link_code(tmp_path / "code")
    assert clone.status() == {}  # the clone is exactly the run: nothing to re-run

    with pytest.raises(ConfigError, match="already exists and is not empty"):
        reproduce(lineage, into, "plan-x")
    with pytest.raises(PipelineError, match="model pulled into .* has md5 .* the plan's lineage says 0+.dir"):
        reproduce(lineage.model_copy(update={"model_md5": "0" * 32 + ".dir"}), tmp_path / "other", "plan-x")
    with pytest.raises(PipelineError, match="has no complete lineage"):
        reproduce(lineage.model_copy(update={"dvc_lock": None}), tmp_path / "third", "plan-x")
    assert not (tmp_path / "third").exists()


def test_pipeline_init_and_status_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dreamshard.cli.app import invoke  # in-process: a process per command would import Prefect each time

    tiny_inventory(tmp_path / "inv.yaml")
    ws = tmp_path / "ws"
    monkeypatch.chdir(tmp_path)
    code, _, err = invoke(
        [
            "pipeline",
            "init",
            str(ws),
            "--inventory",
            str(tmp_path / "inv.yaml"),
            "--dvc-remote",
            str(tmp_path / "remote"),
        ]
    )
    assert code == 0, err
    w = PipelineWorkspace(ws)
    assert w.exists() and w.remote() == RemoteSpec(url=str((tmp_path / "remote").resolve()))
    assert (ws / "dreamshard").resolve() == (Path(__file__).resolve().parents[1] / "dreamshard")
    assert w.stages() == ["inventory", "incumbent", "tasks", "profile", "train", "plan", "evaluate"] and not w.dirty()
    code, out, err = invoke(["pipeline", "status", "-w", str(ws)])
    assert code == 0, err
    assert out.splitlines()[0].startswith("inventory  changed") and "no plan decided yet" in out
    code, out, err = invoke(["pipeline", "status", "-w", str(ws), "--json"])
    assert code == 0, err
    doc = json.loads(out)
    assert [s["stage"] for s in doc["stages"]] == w.stages() and doc["stages"][0]["changes"]
    assert doc["plan_id"] is None and doc["decision"] is None and doc["revision"] == w.head()
    assert doc["incumbent_file"] == "inputs/incumbent.json" and doc["incumbent"].startswith("none: ")
    code, _, err = invoke(["pipeline", "status", "-w", str(tmp_path / "nope")])
    assert code == 2 and "is not a pipeline workspace" in err and len(err.splitlines()) == 1


def test_status_is_dvcs_own_answer_named_by_stage_wherever_the_caller_is(
    ws: PipelineWorkspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`status` reads DVC's API in this process: the stages under their own names (not `<path>/dvc.yaml:<stage>`
    as DVC names them from another directory), what `dvc status --json` prints; a broken dvc.yaml is one line."""
    import json
    import subprocess
    import sys

    monkeypatch.chdir(tmp_path)  # not the workspace
    cli = subprocess.run(
        [str(Path(sys.executable).parent / "dvc"), "status", "--json"],
        cwd=ws.root,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert ws.status() == json.loads(cli.stdout) and set(ws.status()) == {"inventory", "train"}
    ws.path("dvc.yaml").write_text("stages:\n  train: {deps: [x]}\n")  # no cmd
    with pytest.raises(PipelineError, match=r"^`dvc status` failed in .*ws: .*cmd") as e:
        ws.status()
    assert "\n" not in str(e.value)


def test_dvc_init_in_process_writes_what_the_cli_did_quietly_and_fails_in_one_line(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """A workspace's `dvc init` runs through DVC's API (pipeline.dvc.init_repo): the config `dvc init -q` and
    `dvc config core.analytics false` wrote, nothing on stdout; outside a git repository, DVC's reason in one line."""
    import subprocess

    from dreamshard.pipeline.dvc import init_repo

    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    init_repo(repo)
    assert (repo / ".dvc" / "config").read_text() == "[core]\n    analytics = false\n"
    assert (repo / ".dvcignore").is_file() and capfd.readouterr().out == ""
    with pytest.raises(ConfigError, match=r"`dvc init` failed in .*\.dvc' exists") as again:
        init_repo(repo)
    assert "\n" not in str(again.value)
    bare = tmp_path / "bare"
    bare.mkdir()
    with pytest.raises(ConfigError, match="is not tracked by any supported SCM tool"):
        init_repo(bare)
