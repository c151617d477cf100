"""`dreamshard plans ...` and `dreamshard remote local` against a local store (exit codes, output)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from store_helpers import make_plan

from dreamshard.cli.app import main
from dreamshard.dvc_remote import find_dvc
from dreamshard.io import save_plan
from dreamshard.store import get_current, list_plans, open_store


def run(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as e:
        main(argv)
    return int(e.value.code or 0)


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    good, bad, worse = make_plan(overall=8.0), make_plan(overall=9.8), make_plan(overall=12.0)
    out = {"dir": tmp_path, "store": tmp_path / "store"}
    for name, plan in (("good", good), ("bad", bad), ("worse", worse)):
        out[name] = save_plan(plan, tmp_path / f"{name}.json")
    out["flat"] = tmp_path / "flat.json"
    out["flat"].write_text(json.dumps({"size_greedy": 10.0, "random": 20.0}))
    return out


def test_publish_exit_codes_and_reasons(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--store", str(files["store"]), "--baselines", str(files["flat"])]
    assert run(["plans", "publish", str(files["good"]), *base]) == 0
    assert "now current" in capsys.readouterr().out
    # 9.8 beats 10.0 by 2%, not by the 5% asked for
    assert run(["plans", "publish", str(files["bad"]), *base, "--min-improvement", "0.05"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("rejected ") and "5.0%" in err and "size_greedy 10 ms" in err
    assert run(["plans", "publish", str(files["worse"]), *base]) == 1
    store = open_store(str(files["store"]))
    assert get_current(store, "inv").plan_id == json.loads(files["good"].read_text())["plan_id"]
    assert [r.status for r in list_plans(store, "inv")] == ["approved", "rejected", "rejected"]


def test_publish_usage_errors_exit_2(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["plans", "publish", str(files["good"]), "--store", str(files["store"])]) == 2
    assert "--baselines" in capsys.readouterr().err
    assert run(["plans", "publish", str(files["dir"] / "nope.json"), "--store", str(files["store"]),
                "--baselines", str(files["flat"])]) == 2
    assert "file not found" in capsys.readouterr().err
    assert not files["store"].exists()


def test_store_and_margin_default_from_params(
    files: dict[str, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    params = files["dir"] / "params.yaml"
    params.write_text(f"publish:\n  min_improvement: 0.05\n  store_uri: {files['dir'] / 'from-params'}\n")
    monkeypatch.chdir(files["dir"])
    assert run(["plans", "publish", str(files["bad"]), "--baselines", str(files["flat"])]) == 1
    assert run(["plans", "publish", str(files["good"]), "--baselines", str(files["flat"])]) == 0
    assert len(list_plans(open_store(str(files["dir"] / "from-params")))) == 2


def test_list_show_rollback(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    store = ["--store", str(files["store"])]
    assert run(["plans", "publish", str(files["bad"]), *store, "--baselines", str(files["flat"])]) == 0
    assert run(["plans", "publish", str(files["good"]), *store, "--baselines", str(files["flat"])]) == 0
    good_id = json.loads(files["good"].read_text())["plan_id"]
    bad_id = json.loads(files["bad"].read_text())["plan_id"]
    capsys.readouterr()
    assert run(["plans", "list", *store, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["plan_id"]: r["is_current"] for r in rows} == {bad_id: False, good_id: True}
    assert run(["plans", "list", *store, "--inventory", "inv"]) == 0
    assert good_id[:12] in capsys.readouterr().out
    assert run(["plans", "show", "current", *store, "--inventory", "inv", "--torchrec"]) == 0
    tr = json.loads(capsys.readouterr().out)
    assert tr["t0"] == {"sharding_type": "table_wise", "compute_kernel": "fused", "ranks": [0]}
    assert run(["plans", "rollback", *store, "--inventory", "inv"]) == 0
    assert bad_id in capsys.readouterr().out
    assert run(["plans", "show", "current", *store, "--inventory", "inv"]) == 0
    assert json.loads(capsys.readouterr().out)["plan_id"] == bad_id
    assert run(["plans", "rollback", *store, "--inventory", "inv"]) == 2
    assert "no previous version" in capsys.readouterr().err
    assert run(["plans", "rollback", *store, "--inventory", "inv", "--to", good_id]) == 0
    assert run(["plans", "show", "current", *store]) == 2


def test_remote_local(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    assert run(["remote", "local", "--name", "store", "--path", str(tmp_path / "remote"), "--repo", str(repo)]) == 2
    assert "not a DVC repository" in capsys.readouterr().err
    subprocess.run([find_dvc(), "init", "--no-scm", "-q"], cwd=repo, check=True)
    assert run(["remote", "local", "--name", "store", "--path", str(tmp_path / "remote"), "--repo", str(repo)]) == 0
    config = (repo / ".dvc" / "config").read_text()
    assert "remote = store" in config and str(tmp_path / "remote") in config
    assert (tmp_path / "remote").is_dir()
    assert run(["remote", "s3", "--name", "x", "--url", "http://not-s3", "--repo", str(repo)]) == 2
    assert "s3://bucket/path" in capsys.readouterr().err


def test_publish_rechecks_memory_against_the_inventory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A plan whose own memory figures understate what its placement needs is refused with --inventory."""
    from dreamshard.io import save_inventory
    from dreamshard.sharders import get_sharder
    from dreamshard.types import Inventory, Table, Topology

    inv = Inventory(name="mem", tables=tuple(
        Table(name=f"t{i}", num_embeddings=4_000_000, embedding_dim=64, pooling_factor=1.0) for i in range(4)))
    plan = get_sharder("size_greedy").shard(inv, Topology(num_devices=2, memory_per_device_gb=2.0))
    crowded = {name: 0 for name in plan.placement}  # 3.8 GB on device 0, figures left as they were
    tampered = plan.model_copy(update={"placement": crowded})
    save_inventory(inv, tmp_path / "inv.yaml")
    save_plan(tampered, tmp_path / "plan.json")
    (tmp_path / "base.json").write_text(json.dumps({"random": 100.0}))
    rc = run(["plans", "publish", str(tmp_path / "plan.json"), "--store", str(tmp_path / "store"),
              "--baselines", str(tmp_path / "base.json"), "--inventory", str(tmp_path / "inv.yaml")])
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "device 0 holds" in err[0] and "memory limit" in err[0]
    assert not (tmp_path / "store").exists()
