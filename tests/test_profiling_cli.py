"""`dreamshard profile`: params defaults, flags win, summary lines, resume, one-line infeasibility error."""

from __future__ import annotations

from pathlib import Path

import pytest

from dreamshard.cli.app import main
from dreamshard.documents import load_measurements, save_inventory
from dreamshard.values import Inventory, Table


def _run(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as e:
        main(argv)
    return int(e.value.code or 0)


@pytest.fixture()
def inv_path(tmp_path: Path) -> Path:
    inv = Inventory(
        name="cli",
        tables=tuple(Table(name=f"t{i}", num_embeddings=10_000, embedding_dim=32, pooling_factor=4) for i in range(5)),
    )
    return save_inventory(inv, tmp_path / "inv.yaml")


def test_profile_cli_params_flags_and_resume(
    tmp_path: Path, inv_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    params = tmp_path / "params.yaml"
    params.write_text(
        "profile:\n  backend: simulator\n  num_placements: 4\n  warmup: 1\n  repeats: 2\n  seed: 3\n  kinds: []\n"
    )
    out = tmp_path / "m.jsonl"
    base = ["profile", "-i", str(inv_path), "-d", "2", "-m", "1", "-o", str(out), "--params", str(params)]
    assert _run(base) == 0
    text = capsys.readouterr().out
    assert "measured 9" in text and "resumed (already present) 0" in text
    assert "backend simulator, operator analytic" in text and "SIMULATED" in text
    recs = load_measurements(out)
    assert len(recs) == 9 and recs[0].backend.repeats == 2 and recs[0].backend.warmup == 1
    # Explicit flags win over params: one more placement wanted -> only the new ones are measured.
    assert _run([*base, "--num-placements", "6"]) == 0
    assert "measured 2, resumed (already present) 9" in capsys.readouterr().out
    assert _run(base) == 0
    assert "measured 0, resumed (already present) 9" in capsys.readouterr().out
    assert len(load_measurements(out)) == 11


def test_profile_cli_infeasible_is_one_line_exit_2(
    tmp_path: Path, inv_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _run(
        [
            "profile",
            "-i",
            str(inv_path),
            "-d",
            "2",
            "-m",
            "0.0001",
            "-k",
            "1",
            "-o",
            str(tmp_path / "m.jsonl"),
            "--backend",
            "simulator",
        ]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "table 't" in err and "fits on no device" in err


def test_profile_cli_unknown_backend(tmp_path: Path, inv_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = _run(
        ["profile", "-i", str(inv_path), "-d", "2", "-m", "1", "-o", str(tmp_path / "m.jsonl"), "--backend", "tpu"]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "backend" in err
