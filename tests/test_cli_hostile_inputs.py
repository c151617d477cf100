"""Hostile CLI inputs: outputs that alias inputs, measurement files resumed, credentials in URLs, huge or mistyped
numbers, model cards, traces and names (the store's and the gate's attacks are tables in tests/attacks/).

Each drives the CLI in-process (`dreamshard.cli.app.main`) where the defect was user-visible, and checks the
contract: exit 2 with exactly one line and nothing written, or the documented recovery working.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from store_helpers import world

from dreamshard.cli.app import main
from dreamshard.documents import append_measurement, iter_measurements
from dreamshard.errors import ModelError


def run(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as e:
        main(argv)
    return int(e.value.code or 0)


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "Traceback" not in err[0]
    return err[0]


def snapshot(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    return world().write(tmp_path)


# -- outputs that alias inputs -----------------------------------------------------------------------------------------
def test_outputs_aliasing_inputs_are_refused(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    inv, plan, d = files["inventory"], files["good"], files["dir"]
    os.link(inv, d / "hard.yaml")
    (d / "soft.yaml").symlink_to(inv)
    before = snapshot(d)
    common = ["-d", "2", "-m", "1"]
    cases = [
        ["plan", "-i", str(inv), *common, "-s", "size_greedy", "-o", str(inv)],
        ["plan", "-i", str(inv), *common, "-s", "size_greedy", "-o", str(d / "hard.yaml")],
        [
            "plan",
            "-i",
            str(inv),
            *common,
            "-s",
            "size_greedy",
            "-o",
            str(d / "p.json"),
            "--torchrec-out",
            str(d / "soft.yaml"),
        ],
        [
            "plan",
            "-i",
            str(inv),
            *common,
            "-s",
            "size_greedy",
            "-o",
            str(d / "p.json"),
            "--torchrec-out",
            str(d / "p.json"),
        ],
        ["evaluate", "-i", str(inv), "-p", str(plan), "--backend", "simulator", "-o", str(plan)],
        ["evaluate", "-i", str(inv), "-p", str(plan), "--backend", "simulator", "-o", str(d / "./inv.yaml")],
        ["compare", "-i", str(inv), *common, "--backend", "simulator", "--rounds", "1", "--out", str(inv)],
        [
            "compare",
            "-i",
            str(inv),
            *common,
            "--backend",
            "simulator",
            "--rounds",
            "1",
            "--plan",
            str(plan),
            "--markdown-out",
            str(plan),
        ],
        ["profile", "-i", str(inv), *common, "--backend", "simulator", "-o", str(d / "hard.yaml")],
        ["inventory", "validate", str(inv), "-o", str(d / "soft.yaml")],
    ]
    for argv in cases:
        assert run(argv) == 2, argv
        line = one_error_line(capsys)
        assert "InputFileError" in line and ("same file" in line), line
    assert snapshot(d) == before


def test_compare_plan_and_plans_dir_never_clash(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    d, inv = files["dir"], files["inventory"]
    sharder = json.loads(files["good"].read_text())["sharder"]
    own = d / "pd" / f"{sharder}.json"  # where --plans-dir would write the --plan's contender
    own.parent.mkdir()
    shutil.copy(files["good"], own)
    common = ["-i", str(inv), "-d", "2", "-m", "1", "--batch-size", "512", "--backend", "simulator", "--rounds", "1"]
    before = snapshot(d)
    assert (
        run(["compare", *common, "--sharders", "dim_greedy", "--plan", str(own), "--plans-dir", str(own.parent)]) == 2
    )
    line = one_error_line(capsys)
    assert "same file as --plan " + str(own) in line and line.count(str(own)) == 2, line
    assert snapshot(d) == before
    # the --plan's sharder also runs: both contenders are kept, each under its plan id
    out = d / "out"
    assert (
        run(
            [
                "compare",
                *common,
                "--sharders",
                f"dim_greedy,{sharder}",
                "--plan",
                str(files["good"]),
                "--plans-dir",
                str(out),
                "--out",
                str(d / "cmp.json"),
            ]
        )
        == 0
    )
    written = sorted(p.name for p in out.iterdir())
    assert "dim_greedy.json" in written and len(written) == 3
    assert sum(1 for n in written if n.startswith(f"{sharder}.plan-")) == 2
    assert capsys.readouterr().out.count(f"{sharder} (…") == 2


# -- JSONL resume ------------------------------------------------------------------------------------------------------
def test_resume_keeps_a_complete_last_record_without_newline(tmp_path: Path) -> None:
    from dreamshard.profiling import make_oracle

    w = world()
    oracle = make_oracle("simulator")
    m1, m2, m3 = (oracle.measure(w.inventory, {t.name: 0}, w.topology, kind="single") for t in w.inventory.tables[:3])
    path = tmp_path / "m.jsonl"
    path.write_text(m1.model_dump_json() + "\n" + m2.model_dump_json())  # an editor dropped the final newline
    assert [m.measurement_id for m in iter_measurements(path)] == [m1.measurement_id, m2.measurement_id]
    append_measurement(path, m3)
    assert [m.measurement_id for m in iter_measurements(path)] == [
        m1.measurement_id,
        m2.measurement_id,
        m3.measurement_id,
    ]
    # A genuinely partial line (a killed writer) is still cut off.
    path.write_text(m1.model_dump_json() + "\n" + m2.model_dump_json()[:40])
    append_measurement(path, m3)
    assert [m.measurement_id for m in iter_measurements(path)] == [m1.measurement_id, m3.measurement_id]


def test_profile_cli_resume_does_not_drop_the_last_line(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    out = files["dir"] / "m.jsonl"
    argv = [
        "profile",
        "-i",
        str(files["inventory"]),
        "-d",
        "2",
        "-m",
        "1",
        "--backend",
        "simulator",
        "-o",
        str(out),
        "--no-progress",
    ]
    assert run([*argv, "-k", "1"]) == 0
    lines = out.read_text().splitlines()
    out.write_text("\n".join(lines))  # no trailing newline
    capsys.readouterr()
    assert run([*argv, "-k", "2"]) == 0
    again = out.read_text().splitlines()
    assert again[: len(lines)] == lines and len(again) == len(lines) + 1
    assert f"resumed (already present) {len(lines)}" in capsys.readouterr().out


# -- secrets in URLs ---------------------------------------------------------------------------------------------------
def test_credentials_in_urls_are_never_echoed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import subprocess

    from dreamshard.pipeline.dvc import find_dvc

    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run([find_dvc(), "init", "--no-scm", "-q"], cwd=repo, check=True)
    cases = [
        [
            "remote",
            "s3",
            "--name",
            "x",
            "--url",
            "s3://b/p",
            "--endpoint",
            "http://AKIAKEY:S3CRET@host:8333",
            "--repo",
            str(repo),
        ],
        [
            "remote",
            "s3",
            "--name",
            "x",
            "--url",
            "s3://b/p",
            "--endpoint",
            "http://host:8333/?X-Amz-Credential=S3CRET",
            "--repo",
            str(repo),
        ],
        ["remote", "s3", "--name", "x", "--url", "http://AKIAKEY:S3CRET@b/p", "--repo", str(repo)],
        [
            "plans",
            "list",
            "--store",
            "s3://bucket/p",
            "--endpoint-url",
            "http://host:1/?AWSAccessKeyId=AKIAKEY&Signature=S3CRET",
        ],
        ["plans", "list", "--store", "s3://bucket/p", "--endpoint-url", "http://AKIAKEY:S3CRET@127.0.0.1:1"],
    ]
    for argv in cases:
        assert run(argv) == 2, argv
        line = one_error_line(capsys)
        assert "S3CRET" not in line and "AKIAKEY" not in line, line
    assert "S3CRET" not in (repo / ".dvc" / "config").read_text()


# -- numeric options ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cmd", ["plan", "compare", "profile"])
def test_huge_memory_is_one_line(cmd: str, files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    extra = {
        "plan": ["-s", "size_greedy", "-o", str(files["dir"] / "p.json")],
        "compare": ["--backend", "simulator"],
        "profile": ["--backend", "simulator", "-o", str(files["dir"] / "m.jsonl")],
    }[cmd]
    for value in ("1e300", "inf", "nan", "0", "-1"):
        before = snapshot(files["dir"])
        assert run([cmd, "-i", str(files["inventory"]), "-d", "2", "-m", value, *extra]) == 2, value
        assert "memory" in one_error_line(capsys).lower()
        assert snapshot(files["dir"]) == before


# -- model card bounds -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("hidden", [10**9, -5, True, "64"])
def test_model_card_spec_is_bounded_before_allocation(tmp_path: Path, hidden: object) -> None:
    from dreamshard.learning.model_store import load_model

    src = Path(__import__("dreamshard").__file__).parent / "pretrained"
    shutil.copytree(src, tmp_path / "m")
    card = json.loads((tmp_path / "m" / "model.json").read_text())
    card["cost_spec"]["hidden"] = hidden
    (tmp_path / "m" / "model.json").write_text(json.dumps(card))
    with pytest.raises(ModelError, match="corrupt model card"):
        load_model(tmp_path / "m")


# -- traces ------------------------------------------------------------------------------------------------------------
def test_trace_negative_lengths_and_directories(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lengths = torch.tensor([[1, -1, 2]], dtype=torch.int64)
    offsets = torch.tensor([0, 1, 0, 2], dtype=torch.int64)
    torch.save((torch.tensor([0, 1], dtype=torch.int64), offsets, lengths), tmp_path / "neg.pt")
    (tmp_path / "dir.pt").mkdir()
    out = tmp_path / "out.yaml"
    assert run(["inventory", "from-trace", str(tmp_path / "neg.pt"), "-o", str(out)]) == 2
    assert "lengths[0, 1] = -1; lengths must be >= 0" in one_error_line(capsys)
    assert run(["inventory", "from-trace", str(tmp_path / "dir.pt"), "-o", str(out)]) == 2
    assert "is a directory" in one_error_line(capsys)
    assert not out.exists()


# -- strict numbers, safe names, inventory file suffixes ---------------------------------------------------------------
def test_bool_is_not_a_number(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "inv.yaml"
    bad.write_text("name: x\ntables:\n- {name: a, num_embeddings: true, embedding_dim: 4, pooling_factor: 1}\n")
    assert run(["inventory", "validate", str(bad)]) == 2
    assert "num_embeddings: must be a number, got bool True" in one_error_line(capsys)
    bad.write_text("name: x\ntables:\n- {name: a, num_embeddings: 10, embedding_dim: 4, pooling_factor: '2'}\n")
    assert run(["inventory", "validate", str(bad)]) == 2
    assert "pooling_factor: must be a number" in one_error_line(capsys)


@pytest.mark.parametrize("name", ["a/b", "..", "../x", ".hidden", "t@0:4", "a b", "", "x" * 201])
def test_unsafe_names_fail_at_validate(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for inv_name, table in ((name, "t0"), ("ok", name)):
        f = tmp_path / "inv.json"
        f.write_text(
            json.dumps(
                {
                    "name": inv_name,
                    "tables": [{"name": table, "num_embeddings": 10, "embedding_dim": 4, "pooling_factor": 1.0}],
                }
            )
        )
        assert run(["inventory", "validate", str(f)]) == 2, (inv_name, table)
        line = one_error_line(capsys)
        assert "InventoryError" in line or "InventoryNameError" in line, line


def test_an_inventory_is_written_only_as_yaml_or_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["inventory", "synth", "--num-tables", "4"], ["inventory", "preset", "criteo-kaggle"]):
        assert run([*argv, "-o", str(tmp_path / "inv.txt")]) == 2
        assert "name it .yaml, .yml or .json" in one_error_line(capsys)
    assert list(tmp_path.iterdir()) == []
    assert run(["inventory", "synth", "--num-tables", "4", "-o", str(tmp_path / "inv.JSON")]) == 0
