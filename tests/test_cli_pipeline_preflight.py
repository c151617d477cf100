"""`dreamshard pipeline run` rejects bad input in one line before Prefect starts or anything is written.

The CLI runs in-process (`dreamshard.cli.app.invoke`): a process per command would import Prefect each time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from dreamshard.cli.app import invoke

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str, cwd: Path) -> SimpleNamespace:
    """`dreamshard ARGS` in `cwd`: returncode, stdout, stderr."""
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(cwd)
        code, out, err = invoke(list(args))
    return SimpleNamespace(returncode=code, stdout=out, stderr=err)


def test_bad_inventory_fails_before_the_flow(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\ntables:\n  - {name: x, num_embeddings: 10, embedding_dim: -1, pooling_factor: 1}\n")
    ws = tmp_path / "ws"
    res = _run(
        "pipeline",
        "run",
        "--inventory",
        str(bad),
        "--workspace",
        str(ws),
        "--params",
        str(ROOT / "params.yaml"),
        "--store",
        str(tmp_path / "store"),
        cwd=tmp_path,
    )
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert "table 'x'" in lines[0] and "embedding_dim" in lines[0]
    assert "Traceback" not in res.stderr + res.stdout
    assert not ws.exists()  # no workspace was created


def test_unreachable_store_fails_before_the_flow(tmp_path: Path, monkeypatch) -> None:
    inv = tmp_path / "inv.yaml"
    inv.write_text("name: ok\ntables:\n  - {name: a, num_embeddings: 100, embedding_dim: 8, pooling_factor: 1}\n")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    res = _run(
        "pipeline",
        "run",
        "--inventory",
        str(inv),
        "--workspace",
        str(tmp_path / "ws"),
        "--params",
        str(ROOT / "params.yaml"),
        "--store",
        "s3://bucket/x",
        "--endpoint-url",
        "http://127.0.0.1:9",
        cwd=tmp_path,
    )
    assert res.returncode == 2
    assert len(res.stderr.strip().splitlines()) == 1
    assert "cannot reach S3 endpoint" in res.stderr
    assert not (tmp_path / "ws").exists()


def test_bad_dispatch_and_params_fail_in_one_line(tmp_path: Path) -> None:
    res = _run(
        "pipeline",
        "run",
        "--workspace",
        str(tmp_path / "ws"),
        "--params",
        str(ROOT / "params.yaml"),
        "--store",
        str(tmp_path / "store"),
        "--dispatch",
        "gpu",
        cwd=tmp_path,
    )
    assert res.returncode == 2 and res.stderr.strip().splitlines() == [
        "error: ConfigError: --dispatch must be auto, local or workers, got 'gpu'"
    ]
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("PREFECT_API_URL", raising=False)
        env_less = _run(
            "pipeline",
            "run",
            "--workspace",
            str(tmp_path / "ws"),
            "--params",
            str(ROOT / "params.yaml"),
            "--dispatch",
            "workers",
            cwd=tmp_path,
        )
    assert env_less.returncode == 2 and "needs a Prefect server" in env_less.stderr
    bad = tmp_path / "params.yaml"
    bad.write_text("drift: {threshold: 0}\n")
    res = _run("pipeline", "run", "--workspace", str(tmp_path / "ws"), "--params", str(bad), cwd=tmp_path)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1 and "drift" in res.stderr
    assert not (tmp_path / "ws").exists()


def test_drift_on_another_backend_fails_in_one_line_before_the_flow(tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    inv = tmp_path / "inv.yaml"
    assert (
        _run(
            "inventory", "synth", "--num-tables", "6", "--seed", "0", "--name", "tiny", "-o", str(inv), cwd=tmp_path
        ).returncode
        == 0
    )
    assert (
        _run(
            "plan", "-i", str(inv), "-d", "2", "-m", "1", "-s", "lookup_greedy", "-o", "plan.json", cwd=tmp_path
        ).returncode
        == 0
    )
    pub = _run(
        "plans",
        "publish",
        "plan.json",
        "-i",
        str(inv),
        "--measure",
        "--backend",
        "simulator",
        "--sharders",
        "random",
        "--rounds",
        "1",
        "--min-improvement",
        "0",
        "--allow-simulated",
        "--store",
        store,
        cwd=tmp_path,
    )
    assert pub.returncode == 0, pub.stderr
    # A process of its own: Prefect's log lines would not reach an in-process caller's captured streams.
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "dreamshard.cli.app",
            "pipeline",
            "drift",
            "--inventory-name",
            "tiny",
            "--params",
            str(ROOT / "params.yaml"),
            "--store",
            store,
            "--backend",
            "cpu",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 2 and "Traceback" not in res.stderr + res.stdout
    assert res.stderr.strip().splitlines() == [
        "error: ConfigError: plan " + _current_id(store) + " was measured on backend 'simulator', the monitor would "
        "measure on 'cpu': use --backend simulator (or profile.backend: simulator) so the costs are comparable"
    ]
    assert "Starting temporary server" not in res.stdout + res.stderr  # Prefect never started


def _current_id(store: str) -> str:
    from dreamshard.store import get_current, open_store

    return get_current(open_store(store), "tiny").plan_id
