"""Training data is checked like input, non-finite weights are never saved, and a hostile model directory is one
line (dreamshard.learning.records, model_store).

Each test drives the defect's command where it was user-visible: exit 2 with exactly one line, no traceback,
nothing written."""

from __future__ import annotations

import io
import json
import os
import shutil
import threading
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from hardening_support import model_with_weights

from dreamshard.cli.app import invoke
from dreamshard.config.learning import CostTrainConfig
from dreamshard.documents import load_measurements, save_inventory
from dreamshard.errors import ModelError, TrainingDataError
from dreamshard.inventory.synth import synth_inventory
from dreamshard.learning.cost_model import CostEnsemble, CostNetSpec
from dreamshard.learning.model_store import PACKAGED_DIR, load_model, save_model
from dreamshard.learning.records import MAX_RECORD_MS, check_training_records
from dreamshard.learning.train_cost import train_cost_model
from dreamshard.values.model_files import CARD_FILE, COST_FILE

PARAMS = (
    "profile: {backend: simulator}\n"
    "train_cost: {steps: 2, ensemble_size: 1}\n"
    "train_policy: {episodes: 2, episodes_per_update: 2}\n"
    "train: {iterations: 1, placements_per_iteration: 1, search_per_iteration: 0, perturb_per_iteration: 0, "
    "init: none}\n"
)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A 6-table inventory, its simulator profile (15 records on 2 devices: 6 singles, 4 random placements and the
    default kinds' 5), tasks and params."""
    d = tmp_path_factory.mktemp("training")
    inv = synth_inventory(6, 0, name="inv")
    files = {
        "dir": d,
        "inventory": save_inventory(inv, d / "inv.yaml"),
        "params": d / "params.yaml",
        "measurements": d / "m.jsonl",
        "tasks": d / "tasks.json",
    }
    files["params"].write_text(PARAMS)
    assert (
        invoke(
            [
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
                str(files["measurements"]),
                "--no-progress",
                "-k",
                "4",
            ]
        )[0]
        == 0
    )
    assert (
        invoke(["tasks", "-i", str(files["inventory"]), "--params", str(files["params"]), "-o", str(files["tasks"])])[0]
        == 0
    )
    return files


def _records(world: dict[str, Path]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in world["measurements"].read_text().splitlines()]


def _write(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _argv(cmd: str, world: dict[str, Path], measurements: Path, model_dir: Path) -> list[str]:
    argv = [
        cmd,
        "-i",
        str(world["inventory"]),
        "--measurements",
        str(measurements),
        "--params",
        str(world["params"]),
        "--model-dir",
        str(model_dir),
        "--no-progress",
    ]
    return argv + (["--tasks", str(world["tasks"])] if cmd == "train" else [])


def _one_line_2(r: tuple[int, str, str], *needles: str) -> str:
    lines = r[2].strip().splitlines()
    assert r[0] == 2 and len(lines) == 1 and "Traceback" not in r[2], r
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def _scaled(rec: dict[str, Any], f: float) -> dict[str, Any]:
    """`rec` with every cost times f (still consistent)."""
    out = json.loads(json.dumps(rec))
    out["costs"]["per_device"] = [{k: v * f for k, v in dev.items()} for dev in out["costs"]["per_device"]]
    out["costs"]["overall_ms"] *= f
    return out


def _huge(recs: list[dict[str, Any]]) -> None:
    recs[-1]["costs"]["per_device"][0]["fwd_compute"] = 1e308


def _device(recs: list[dict[str, Any]]) -> None:
    recs[-1]["placement"][next(iter(recs[-1]["placement"]))] = 5


def _same_id(recs: list[dict[str, Any]]) -> None:
    recs.append(_scaled(recs[-1], 3.0))


def _other_inventory(recs: list[dict[str, Any]]) -> None:
    recs[-1]["inventory_fingerprint"] = "ab" * 32


def _overall(recs: list[dict[str, Any]]) -> None:
    recs[-1]["costs"]["overall_ms"] = 0.001


HOSTILE = {
    "1e308 ms": (_huge, ["costs.per_device[0].fwd_compute", f"{MAX_RECORD_MS:g}", "record {last}"]),
    "device 5 of 2": (_device, ["placement['t0000'] = device 5", "num_devices 2"]),
    "same id, other costs": (_same_id, ["record {extra}", "already used by record {last}", "costs"]),
    "another inventory": (_other_inventory, ["inventory_fingerprint", "abababababab"]),
    "overall vs per-device": (_overall, ["costs.overall_ms = 0.001", "bottleneck"]),
}


@pytest.mark.parametrize("cmd", ["train-cost", "train"])
@pytest.mark.parametrize("what", list(HOSTILE))
def test_hostile_training_records_are_one_line_and_write_nothing(world: dict[str, Path], cmd: str, what: str) -> None:
    """1e308 ms, a device past the topology, one id with two costs, another inventory's record,
    an overall contradicting the per-device costs: exit 2, one line naming the record and the field."""
    edit, needles = HOSTILE[what]
    recs = _records(world)
    edit(recs)
    d = world["dir"] / f"{cmd}-{what.replace(' ', '_')}"
    d.mkdir()
    m = _write(d / "m.jsonl", recs)
    n = len(_records(world))  # the profile's records; an edit appends at most one
    needles = [x.format(last=n, extra=n + 1) for x in needles]
    line = _one_line_2(invoke(_argv(cmd, world, m, d / "model")), "TrainingDataError", str(m), *needles)
    assert "measurement '" in line
    assert sorted(p.name for p in d.iterdir()) == ["m.jsonl"]  # no model dir, no state dir


def test_records_of_two_inventories_are_refused_without_an_inventory(world: dict[str, Path]) -> None:
    """the library check alone (no inventory given) holds the records to the first record's inventory."""
    recs = load_measurements(world["measurements"])
    other = recs[-1].model_copy(update={"inventory_fingerprint": "cd" * 32, "measurement_id": "x"})
    with pytest.raises(TrainingDataError, match=rf"record {len(recs) + 1} .*cdcdcdcdcdcd.*record 1"):
        check_training_records([*recs, other])


def test_an_exact_repeat_is_kept_once_and_good_records_pass(world: dict[str, Path]) -> None:
    recs = load_measurements(world["measurements"])
    inv = synth_inventory(6, 0, name="inv")
    assert check_training_records([*recs, recs[3]], inv) == recs
    r = invoke(_argv("train-cost", world, world["measurements"], world["dir"] / "good-model"))
    assert r[0] == 0, r


def test_a_record_naming_a_table_outside_the_inventory_is_refused(world: dict[str, Path]) -> None:
    recs = load_measurements(world["measurements"])
    ghost = recs[-1].model_copy(update={"placement": {**recs[-1].placement, "ghost": 0}})
    with pytest.raises(TrainingDataError, match="'ghost', which is not in inventory 'inv'"):
        check_training_records([*recs[:-1], ghost], synth_inventory(6, 0, name="inv"))


def test_the_cost_trainer_checks_every_record_it_sees(world: dict[str, Path]) -> None:
    """The loop's own records (its cache file can be edited) go through the same per-record check."""
    recs = load_measurements(world["measurements"])
    bad = recs[-1].model_copy(update={"costs": recs[-1].costs.model_copy(update={"overall_ms": 1e300})})
    with pytest.raises(TrainingDataError, match="costs.overall_ms = 1e\\+300"):
        train_cost_model(synth_inventory(6, 0, name="inv"), [*recs[:-1], bad], CostTrainConfig(steps=1), progress=False)


def test_a_diverging_fit_is_a_typed_error(world: dict[str, Path]) -> None:
    """non-finite weights never leave the trainer (nor reach planning or the policy)."""
    recs = load_measurements(world["measurements"])
    with pytest.raises(ModelError, match="diverged"):
        train_cost_model(
            synth_inventory(6, 0, name="inv"), recs, CostTrainConfig(steps=5, lr=1e30, ensemble_size=1), progress=False
        )


def test_non_finite_weights_are_never_saved(tmp_path: Path) -> None:
    net = CostEnsemble(CostNetSpec(hidden=4, latent=4, head_hidden=4), 1)
    with torch.no_grad():
        next(net.parameters()).fill_(float("nan"))
    with pytest.raises(ModelError, match="not finite.*nothing written"):
        save_model(tmp_path / "m", net, None)
    assert not (tmp_path / "m").exists()


def test_a_model_with_nan_weights_is_refused_at_load(world: dict[str, Path], tmp_path: Path) -> None:
    """`plan` with a NaN model put every table on device 0 at 0.000 ms; now a one-line ModelError."""
    state = torch.load(PACKAGED_DIR / COST_FILE, weights_only=True)
    buf = io.BytesIO()
    torch.save({k: v * float("nan") if v.is_floating_point() else v for k, v in state.items()}, buf)
    m = model_with_weights(tmp_path / "nan", buf.getvalue())
    r = invoke(
        ["plan", "-i", str(world["inventory"]), "-d", "2", "-m", "1", "--model", str(m), "-o", str(tmp_path / "p.json")]
    )
    _one_line_2(r, "ModelError", "not finite")
    assert not (tmp_path / "p.json").exists()


@pytest.mark.parametrize("cmd", ["train-cost", "train"])
def test_model_dir_that_is_a_file_is_one_line(world: dict[str, Path], tmp_path: Path, cmd: str) -> None:
    """`--model-dir FILE` was a FileExistsError / NotADirectoryError traceback."""
    f = tmp_path / "afile"
    f.write_text("keep me")
    _one_line_2(invoke(_argv(cmd, world, world["measurements"], f)), "InputFileError", "not a directory")
    assert f.read_text() == "keep me" and sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


@pytest.mark.parametrize("name", [COST_FILE, CARD_FILE])
def test_a_fifo_in_a_model_directory_does_not_hang(tmp_path: Path, name: str) -> None:
    """a FIFO as model file blocked `plan --model` forever; now a ModelError at once."""
    m = tmp_path / "fifo"
    shutil.copytree(PACKAGED_DIR, m)
    (m / name).unlink()
    os.mkfifo(m / name)
    got: list[BaseException | None] = []

    def load() -> None:
        try:
            load_model(m)
            got.append(None)
        except BaseException as e:  # noqa: BLE001 - the thread reports what it raised
            got.append(e)

    t = threading.Thread(target=load, daemon=True)
    t.start()
    t.join(timeout=30)
    if t.is_alive():  # unblock the reader of the old code before failing
        os.close(os.open(m / name, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail(f"loading a model whose {name} is a FIFO hangs")
    assert isinstance(got[0], ModelError) and "not a regular file" in str(got[0])


def test_model_load_errors_come_without_torch_warnings(tmp_path: Path) -> None:
    """a TorchScript archive as cost_net.pt made torch print a two-line UserWarning before the error;
    torch's own terminal escapes never reach the message either."""

    class M(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x

    buf = io.BytesIO()
    torch.jit.save(torch.jit.script(M()), buf)
    np_buf = io.BytesIO()
    torch.save({"a": __import__("numpy").zeros(3)}, np_buf)
    for name, data in (("jit", buf.getvalue()), ("numpy", np_buf.getvalue())):
        m = model_with_weights(tmp_path / name, data)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with pytest.raises(ModelError, match="cannot load weights") as e:
                load_model(m)
        assert not caught, [str(w.message) for w in caught]
        assert "\x1b" not in str(e.value) and "\n" not in str(e.value)
