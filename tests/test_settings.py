"""Settings resolved once (dreamshard.config.settings): CLI > params > defaults, the section fill-ins and the
default-file lookup, and the same precedence through each door: the CLI, a DVC stage's command, a Prefect task."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import yaml
from flows_support import TINY_PARAMS, tiny_inventory, write_params

from dreamshard.cli.app import invoke
from dreamshard.config.settings import installed_pipeline_file, params_file, params_text, resolve
from dreamshard.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def _params(tmp_path: Path, data: dict) -> Path:
    p = tmp_path / "params.yaml"
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    return p


# -- the rule itself ---------------------------------------------------------------------------------------------


def test_defaults_then_params_then_overrides(tmp_path: Path) -> None:
    p = _params(tmp_path, {"topology": {"batch_size": 4096}, "plan": {"verify": 2}})
    assert resolve(None).topology.batch_size == 2048 and resolve(None).plan.verify == 0  # defaults
    s = resolve(p)
    assert s.topology.batch_size == 4096 and s.plan.verify == 2 and s.source == p  # params over defaults
    assert s.topology.memory_per_device_gb == 4.0  # a key the file does not set: the default
    s = resolve(p, {"topology.batch_size": 512, "plan.verify": None})
    assert s.topology.batch_size == 512  # the override wins
    assert s.plan.verify == 2  # None = not given: the file's value stands


def test_train_sections_are_filled_in_from_train_cost_and_train_policy(tmp_path: Path) -> None:
    repo = resolve(ROOT / "params.yaml")
    assert repo.train.cost == repo.train_cost and repo.train.cost.steps == 1500  # what the loop runs
    assert repo.train.policy == repo.train_policy
    own = resolve(_params(tmp_path, {"train_cost": {"steps": 40}, "train": {"cost": {"steps": 9}}}))
    assert own.train.cost.steps == 9 and own.train_cost.steps == 40  # a train section's own cost is kept
    over = resolve(ROOT / "params.yaml", {"train_cost.steps": 7})
    assert over.train.cost.steps == 7  # an override of the section reaches the loop


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"profile.backend": "tpu"}, "unknown backend 'tpu'"),
        ({"topology.batch_size": 0}, "topology.batch_size"),
        ({"plan.verfy": 1}, "plan.verfy"),
        ({"evalute.rounds": 1}, "override 'evalute.rounds'"),
        ({"rounds": 1}, "override 'rounds'"),
        ({"topology.memory_per_device_gb": float("inf")}, "topology.memory_per_device_gb"),
    ],
)
def test_bad_overrides_are_one_line_errors_naming_the_key(overrides: dict, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        resolve(ROOT / "params.yaml", overrides)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_topology_section_has_the_topology_bounds(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="topology.batch_size"):
        resolve(_params(tmp_path, {"topology": {"batch_size": 2**40}}))
    with pytest.raises(ConfigError, match="topology.memory_per_device_gb"):
        resolve(_params(tmp_path, {"topology": {"memory_per_device_gb": 2.0**30}}))


def test_the_pipeline_check_needs_every_baseline_in_the_evaluate_comparison(tmp_path: Path) -> None:
    rounds = {"rounds": 5}
    named = resolve(_params(tmp_path, {"evaluate": {**rounds, "sharders": ["dreamshard", "torchrec"]}}))
    with pytest.raises(ConfigError, match="lacks the required baseline"):
        named.check_pipeline()
    every = resolve(_params(tmp_path, {"evaluate": rounds}))
    assert every.evaluate.sharders is None
    every.check_pipeline()  # unset: every contender is measured, the baselines among them


def test_default_file_lookup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert params_file(None, "given") is None
    assert params_file(None, "local") is None
    assert params_file(None, "installed") == installed_pipeline_file("params.yaml")
    _params(tmp_path, {"plan": {"verify": 5}})
    assert params_file(None, "local") == Path("params.yaml") == params_file(None, "installed")
    assert resolve(None, lookup="local").plan.verify == 5 and resolve(None).plan.verify == 0
    assert params_file(tmp_path / "other.yaml", "installed") == tmp_path / "other.yaml"  # given beats lookup


def test_params_text_keeps_the_file_or_sets_the_overrides(tmp_path: Path) -> None:
    src = ROOT / "params.yaml"
    assert params_text(src) == src.read_text()  # comments kept
    data = yaml.safe_load(params_text(src, {"profile.backend": "simulator", "plan.verify": 0}))
    assert data["profile"]["backend"] == "simulator" and data["plan"]["verify"] == 0
    assert data["train"] == yaml.safe_load(src.read_text())["train"]  # no fill-ins written into the file


# -- the CLI door -------------------------------------------------------------------------------------------------


def _plan(tmp_path: Path, *args: str) -> dict:
    out = tmp_path / "plan.json"
    code, _, err = invoke(["plan", "-i", str(tmp_path / "inv.yaml"), "-s", "dim_greedy", "-o", str(out), *args])
    assert code == 0, err
    return json.loads(out.read_text())


def test_cli_precedence(tmp_path: Path) -> None:
    tiny_inventory(tmp_path / "inv.yaml")
    p = _params(tmp_path, {"topology": {"batch_size": 4096, "memory_per_device_gb": 2.0}, "plan": {"num_devices": 3}})
    topo = _plan(tmp_path)["topology"]  # defaults
    assert (topo["batch_size"], topo["num_devices"], topo["memory_per_device_gb"]) == (2048, 4, 4.0)
    topo = _plan(tmp_path, "--params", str(p))["topology"]  # params over defaults
    assert (topo["batch_size"], topo["num_devices"], topo["memory_per_device_gb"]) == (4096, 3, 2.0)
    topo = _plan(tmp_path, "--params", str(p), "--batch-size", "1024", "-d", "2")["topology"]  # CLI over params
    assert (topo["batch_size"], topo["num_devices"], topo["memory_per_device_gb"]) == (1024, 2, 2.0)


# -- the DVC stage door: dvc.yaml's own command lines -----------------------------------------------------------


def _stage_argv(stage: str) -> list[str]:
    cmd = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"][stage]["cmd"]
    argv = shlex.split(cmd)
    assert argv[0] == "dreamshard"
    return argv[1:]


def test_dvc_stage_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    tiny_inventory(tmp_path / "data" / "inventory.yaml")
    argv = _stage_argv("tasks")
    code, _, err = invoke(argv[: argv.index("--params")] + ["-o", "data/tasks.json"])  # the stage without params
    assert code == 0, err
    assert len(json.loads((tmp_path / "data/tasks.json").read_text())["train"]) == 16  # tasks.train_num_tasks default
    write_params(tmp_path / "params.yaml")
    code, _, err = invoke(argv)  # the stage as dvc.yaml runs it: params over defaults
    assert code == 0, err
    tasks = json.loads((tmp_path / "data/tasks.json").read_text())
    assert len(tasks["train"]) == TINY_PARAMS["tasks"]["train_num_tasks"]
    # the plan stage reads the device count and template from params; an option on its command line wins
    write_params(tmp_path / "params.yaml", plan={"verify": 0, "num_devices": 3})
    incumbent_argv = [str(ROOT / a) if a.startswith("inputs/") else a for a in _stage_argv("incumbent")]
    code, _, err = invoke(incumbent_argv)  # the incumbent stage on the repository's input (no plan current)
    assert code == 0, err
    plan_argv = _stage_argv("plan")
    plan_argv[plan_argv.index("--model") + 1] = str(ROOT / "dreamshard" / "pretrained")
    code, _, err = invoke(plan_argv)
    assert code == 0, err
    plan = json.loads((tmp_path / "data/plan.json").read_text())
    assert (
        plan["topology"]["num_devices"] == 3 and plan["topology"]["batch_size"] == TINY_PARAMS["topology"]["batch_size"]
    )
    code, _, err = invoke([*plan_argv, "--devices", "2"])
    assert code == 0, err
    assert json.loads((tmp_path / "data/plan.json").read_text())["topology"]["num_devices"] == 2


# -- the Prefect door: a flow request's fields are the overrides ----------------------------------------------


def test_prefect_task_precedence(tmp_path: Path) -> None:
    from dreamshard_flows.drift import library_request
    from dreamshard_flows.requests import DriftRequest

    p = write_params(tmp_path / "params.yaml", drift={"threshold": 0.5})
    lib = library_request(DriftRequest(inventory_name="tiny", params_path=str(p)))
    assert lib.settings.profile.backend == "simulator" and lib.settings.drift.threshold == 0.5  # params
    assert lib.settings.drift.rounds == 5  # default (the file has no drift.rounds)
    lib = library_request(DriftRequest(inventory_name="tiny", params_path=str(p), backend="cpu"))
    assert lib.settings.profile.backend == "cpu"  # the request's override wins
    assert Path(lib.store or "").is_absolute()  # publish.store_uri made absolute for the tasks


def test_prefect_workspace_params_carry_the_override(tmp_path: Path) -> None:
    from dreamshard.pipeline.workspace import RemoteSpec
    from dreamshard.usecases.pipeline_steps import prepare_workspace

    p = write_params(tmp_path / "params.yaml")
    inv = tiny_inventory(tmp_path / "inv.yaml")
    root = tmp_path / "ws"
    text = params_text(p, {"profile.backend": "cpu"})
    prepare_workspace(str(root), text, inv, RemoteSpec(url=str(tmp_path / "remote")))
    ws_settings = resolve(root / "params.yaml")  # what the DVC stages in the workspace will read
    assert ws_settings.profile.backend == "cpu" and ws_settings.topology.batch_size == 256


def test_a_workspace_older_than_a_params_section_gets_it_at_its_defaults(tmp_path: Path) -> None:
    """DVC refuses a stage whose params name a section the file lacks; a workspace made before `world` existed
    keeps every line its team wrote and gets the section appended at its defaults."""
    from dreamshard.pipeline.params_sections import missing_sections
    from dreamshard.pipeline.workspace import RemoteSpec
    from dreamshard.usecases.pipeline_steps import prepare_workspace

    inv = tiny_inventory(tmp_path / "inv.yaml")
    root = tmp_path / "ws"
    remote = RemoteSpec(url=str(tmp_path / "remote"))
    prepare_workspace(str(root), None, inv, remote)
    ws_params = root / "params.yaml"
    old = yaml.safe_load(ws_params.read_text())
    old.pop("world")
    old["topology"]["batch_size"] = 512  # the team's own edit
    ws_params.write_text("# our workspace\n" + yaml.safe_dump(old, sort_keys=False))
    changed = prepare_workspace(str(root), None, inv, remote)
    assert "params.yaml: added world at the defaults" in changed
    text = ws_params.read_text()
    assert text.startswith("# our workspace\n") and missing_sections(text, text) == []
    settings = resolve(ws_params)
    assert settings.topology.batch_size == 512 and yaml.safe_load(text)["world"]["name"] is None
    assert prepare_workspace(str(root), None, inv, remote) == []  # once
    assert missing_sections("[1, 2]", text) == [] and missing_sections(": :", text) == []  # left to the stages


def test_the_plan_stage_times_a_contender_with_its_own_repeats(tmp_path: Path) -> None:
    """A race round repeats less than a profile (plan.stage_repeats / stage_warmup); null keeps the profile's."""
    told = resolve(write_params(tmp_path / "a.yaml", profile={"warmup": 3, "repeats": 7}, plan={"stage_repeats": 2}))
    stage = told.plan_stage_oracle()
    assert (stage.repeats, stage.warmup) == (2, 1) and (told.oracle().repeats, told.oracle().warmup) == (7, 3)
    kept = resolve(
        write_params(
            tmp_path / "b.yaml", profile={"warmup": 3, "repeats": 7}, plan={"stage_repeats": None, "stage_warmup": None}
        )
    )
    assert (kept.plan_stage_oracle().repeats, kept.plan_stage_oracle().warmup) == (7, 3)
