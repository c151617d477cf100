"""`dreamshard inventory ...`: outputs, one-line errors with exit code 2, no partial outputs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from dreamshard.cli.app import main
from dreamshard.documents import load_inventory
from dreamshard.inventory.synth import synth_inventory

DREAMSHARD = Path(sys.executable).parent / "dreamshard"
BAD_INV = "name: bad\ntables:\n  - {name: x, num_embeddings: 100, embedding_dim: -8, pooling_factor: 1.0}\n"


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as e:
        main(argv)
    out, err = capsys.readouterr()
    return int(e.value.code or 0), out, err


def test_inventory_app_importable() -> None:
    from dreamshard.cli.inventory_cmd import inventory_app

    names = {c.name for c in inventory_app.registered_commands}
    assert {"synth", "from-trace", "validate", "fingerprint"} <= names


def test_synth_validate_fingerprint(tmp_path: Path, capsys) -> None:
    out_file = tmp_path / "inv.yaml"
    code, out, err = run(
        [
            "inventory",
            "synth",
            "--num-tables",
            "12",
            "--seed",
            "4",
            "--dims",
            "8,16",
            "--name",
            "pool",
            "-o",
            str(out_file),
        ],
        capsys,
    )
    assert code == 0 and err == ""
    inv = load_inventory(out_file)
    assert inv == synth_inventory(12, 4, dims=(8, 16), name="pool")
    assert inv.fingerprint() in out

    code, out, _ = run(["inventory", "validate", str(out_file)], capsys)
    total_gb = sum(t.size_gb for t in inv.tables)
    assert code == 0
    assert out.splitlines() == [
        "name: pool",
        "tables: 12",
        f"total_gb: {total_gb:.4f}",
        f"fingerprint: {inv.fingerprint()}",
    ]

    code, out, _ = run(["inventory", "fingerprint", str(out_file)], capsys)
    assert code == 0 and out == inv.fingerprint() + "\n"


def test_validate_writes_normalised_copy(tmp_path: Path, capsys) -> None:
    src = tmp_path / "inv.yaml"
    src.write_text("name: n\ntables:\n  - {pooling_factor: 2, embedding_dim: 4, num_embeddings: 9, name: a}\n")
    dst = tmp_path / "out" / "inv.json"
    code, _, _ = run(["inventory", "validate", str(src), "-o", str(dst)], capsys)
    assert code == 0 and load_inventory(dst) == load_inventory(src)


def test_from_trace(tmp_path: Path, capsys) -> None:
    rng = np.random.default_rng(0)
    lengths = torch.tensor(rng.integers(1, 3, size=(4, 32)), dtype=torch.int64)
    offsets = torch.zeros(4 * 32 + 1, dtype=torch.int64)
    offsets[1:] = torch.cumsum(lengths.flatten(), 0)
    indices = torch.tensor(rng.integers(0, 20, size=int(offsets[-1])), dtype=torch.int64)
    trace = tmp_path / "trace.pt"
    torch.save((indices, offsets, lengths), trace)
    out_file = tmp_path / "inv.json"
    code, out, _ = run(
        ["inventory", "from-trace", str(trace), "--name", "tr", "--max-tables", "3", "-o", str(out_file)], capsys
    )
    assert code == 0 and "3 tables" in out
    inv = load_inventory(out_file)
    assert inv.name == "tr" and inv.table_names == ["t0000", "t0001", "t0002"]
    assert inv.tables[1].pooling_factor == pytest.approx(lengths[1].float().mean().item())


def test_invalid_inventory_one_line_exit_2(tmp_path: Path, capsys) -> None:
    src = tmp_path / "bad.yaml"
    src.write_text(BAD_INV)
    dst = tmp_path / "normalised.yaml"
    code, out, err = run(["inventory", "validate", str(src), "-o", str(dst)], capsys)
    assert code == 2 and out == ""
    lines = err.splitlines()
    assert len(lines) == 1 and "table 'x'" in lines[0] and "embedding_dim" in lines[0]
    assert "Traceback" not in err
    assert not dst.exists()
    code, out, err = run(["inventory", "fingerprint", str(src)], capsys)
    assert code == 2 and out == "" and len(err.splitlines()) == 1 and "embedding_dim" in err


def test_invalid_inventory_console_script(tmp_path: Path) -> None:
    """The real console script: exit 2, exactly one stderr line, no traceback, no output file."""
    src = tmp_path / "bad.yaml"
    src.write_text(BAD_INV)
    dst = tmp_path / "normalised.yaml"
    env = {**os.environ, "DO_NOT_TRACK": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    r = subprocess.run(
        [str(DREAMSHARD), "inventory", "validate", str(src), "-o", str(dst)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert r.returncode == 2 and r.stdout == ""
    assert len(r.stderr.splitlines()) == 1, r.stderr
    assert "table 'x'" in r.stderr and "embedding_dim" in r.stderr and "Traceback" not in r.stderr
    assert not dst.exists()


@pytest.mark.parametrize("command", ["validate", "fingerprint"])
def test_missing_file_one_line(tmp_path: Path, capsys, command: str) -> None:
    code, out, err = run(["inventory", command, str(tmp_path / "missing.yaml")], capsys)
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and "not found" in err and "missing.yaml" in err


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["inventory", "synth", "--num-tables", "3", "--dims", "16,10"], "10 is not a positive multiple of 4"),
        (["inventory", "synth", "--num-tables", "3", "--dims", "16,abc"], "'abc' is not an integer"),
        (["inventory", "synth", "--num-tables", "0"], "--num-tables"),
        (["inventory", "synth"], "--num-tables"),
    ],
)
def test_bad_synth_options(tmp_path: Path, capsys, argv: list[str], needle: str) -> None:
    dst = tmp_path / "inv.yaml"
    code, out, err = run([*argv, "-o", str(dst)], capsys)
    assert code == 2 and len(err.splitlines()) == 1 and needle in err
    assert not dst.exists()


def test_bad_trace_one_line(tmp_path: Path, capsys) -> None:
    src = tmp_path / "notatrace.pt"
    src.write_text("hello")
    dst = tmp_path / "inv.yaml"
    code, _, err = run(["inventory", "from-trace", str(src), "-o", str(dst)], capsys)
    assert code == 2 and len(err.splitlines()) == 1 and "not a torch file" in err
    assert not dst.exists()


def test_inventory_push_stores_in_the_params_store_and_says_it_starts_the_replan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --store, `inventory push` stores where the pipeline and the replan read (publish.store_uri of
    ./params.yaml); its help names the replan it starts, not the orchestrator."""
    from dreamshard.cli.app import invoke
    from dreamshard.documents import save_inventory
    from dreamshard.inventory.synth import synth_inventory
    from dreamshard.store import open_store
    from dreamshard.store.inventories import get_current_inventory

    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text("publish: {store_uri: team-store}\n")
    save_inventory(synth_inventory(4, seed=0, name="clicks"), tmp_path / "inv.yaml")
    code, out, err = invoke(["inventory", "push", "inv.yaml", "--no-event"])
    assert code == 0, err
    found = get_current_inventory(open_store(str(tmp_path / "team-store")), "clicks")
    assert found is not None and "team-store" in out
    code, out, _ = invoke(["inventory", "push", "--help"])
    text = " ".join(out.split())
    assert code == 0 and "re-plans with the production model" in text and "orchestrator" not in text, text
    assert "default: params.yaml publish.store_uri" in text
