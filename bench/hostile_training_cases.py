"""The training hostile cases (issue 18 items 6, 14, 7 and 16, the training part), run by bench/hostile_cases.py.

Each case is the defect's command on a 6-table inventory profiled on the simulator; it holds when training now
refuses the input (one-line exit 2, nothing written) or the model directory's hostile file is one line at once.
The same cases, as tests: tests/test_hardening_training.py."""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from hardening_support import model_with_weights  # noqa: E402 - tests/ is not a package
from hostile_cases import one_line_2  # bench/ is the script's directory

from dreamshard.cli.app import invoke as cli
from dreamshard.documents import save_inventory
from dreamshard.inventory.synth import synth_inventory
from dreamshard.learning.model_store import CARD_FILE, COST_FILE, PACKAGED_DIR, load_model

Case = Callable[[str, str, str], Callable[[Callable[[], Any]], None]]
Records = list[dict[str, Any]]

PARAMS = (
    "profile: {backend: simulator}\n"
    "train_cost: {steps: 2, ensemble_size: 1}\n"
    "train_policy: {episodes: 2, episodes_per_update: 2}\n"
    "train: {iterations: 1, placements_per_iteration: 1, search_per_iteration: 0, perturb_per_iteration: 0, "
    "init: none}\n"
)


def _scaled(rec: dict[str, Any], f: float) -> dict[str, Any]:
    out = json.loads(json.dumps(rec))
    out["costs"]["per_device"] = [{k: v * f for k, v in dev.items()} for dev in out["costs"]["per_device"]]
    out["costs"]["overall_ms"] *= f
    return out


def _huge(recs: Records) -> None:
    recs[-1]["costs"]["per_device"][0]["fwd_compute"] = 1e308


def _device(recs: Records) -> None:
    recs[-1]["placement"][next(iter(recs[-1]["placement"]))] = 5


def _same_id(recs: Records) -> None:
    recs.append(_scaled(recs[-1], 3.0))


def _other_inventory(recs: Records) -> None:
    recs[-1]["inventory_fingerprint"] = "ab" * 32


def _overall(recs: Records) -> None:
    recs[-1]["costs"]["overall_ms"] = 0.001


def _whole(recs: Records) -> tuple[dict[str, Any], str]:
    """The last placement record and a table it places whole."""
    rec = next(r for r in reversed(recs) if r["kind"] == "placement")
    return rec, next(t for t in rec["placement"] if "@" not in t)


def _unit_past_the_table(recs: Records) -> None:
    rec, t = _whole(recs)
    rec["placement"][f"{t}@r0:999999999"] = rec["placement"].pop(t)


def _whole_and_unit(recs: Records) -> None:
    rec, t = _whole(recs)
    rec["placement"][f"{t}@r0:2"] = 0


def _replica_elsewhere(recs: Records) -> None:
    rec = next(r for r in reversed(recs) if any("@dp" in u for u in r["placement"]))
    unit = next(u for u in rec["placement"] if "@dp" in u)
    rec["placement"][unit] = 1 - rec["placement"][unit]


#: defect, what, edit of the profile's records, a word the error must hold
EDITS: tuple[tuple[str, str, Callable[[Records], None], str], ...] = (
    ("18.6", "one measurement of 1e308 ms", _huge, "fwd_compute"),
    ("18.7", "a placement on device 5 of a 2-device topology", _device, "device 5"),
    ("18.14", "one measurement id with two different costs", _same_id, "already used"),
    ("18.14", "a record of another inventory", _other_inventory, "inventory_fingerprint"),
    ("18.14", "overall_ms contradicting the per-device costs", _overall, "overall_ms"),
    ("16.4", "a row-shard unit past its table's rows", _unit_past_the_table, "is not a unit of table"),
    ("16.4", "a table placed whole and as a row shard", _whole_and_unit, "whole and as unit"),
    ("16.4", "a replica on another device than its name says", _replica_elsewhere, "a replica sits on the device"),
)


def _loads_within(model: Path, seconds: float) -> str:
    """load_model in a thread: 'hang' if it is still reading after `seconds`, else what it raised (or 'ok')."""
    got: list[str] = []

    def load() -> None:
        try:
            load_model(model)
            got.append("ok")
        except BaseException as e:  # noqa: BLE001 - reported, not raised
            got.append(f"{type(e).__name__}: {e}")

    t = threading.Thread(target=load, daemon=True)
    t.start()
    t.join(seconds)
    return got[0] if got else "hang"


def cases(d: Path, case: Case) -> None:  # noqa: C901 - one flat list of cases reads best
    d.mkdir(parents=True, exist_ok=True)
    invf = save_inventory(synth_inventory(6, 0, name="inv"), d / "inv.yaml")
    params, meas, tasks = d / "params.yaml", d / "m.jsonl", d / "tasks.json"
    params.write_text(PARAMS)
    cli(
        [
            "profile",
            "-i",
            str(invf),
            "-d",
            "2",
            "-m",
            "1",
            "--backend",
            "simulator",
            "-o",
            str(meas),
            "--no-progress",
            "-k",
            "4",
        ]
    )
    cli(["tasks", "-i", str(invf), "--params", str(params), "-o", str(tasks)])

    def argv(cmd: str, measurements: Path, model_dir: Path) -> list[str]:
        a = [
            cmd,
            "-i",
            str(invf),
            "--measurements",
            str(measurements),
            "--params",
            str(params),
            "--model-dir",
            str(model_dir),
            "--no-progress",
        ]
        return a + (["--tasks", str(tasks)] if cmd == "train" else [])

    for defect, what, edit, needle in EDITS:
        for cmd in ("train-cost", "train"):

            @case(defect, f"{cmd}: {what}", f"{cmd} --measurements edited.jsonl")
            def _(edit: Callable[[Records], None] = edit, needle: str = needle, cmd: str = cmd) -> tuple[bool, str]:
                work = d / f"{cmd}-{edit.__name__}"
                work.mkdir()
                recs = [json.loads(line) for line in meas.read_text().splitlines()]
                edit(recs)
                edited = work / "edited.jsonl"
                edited.write_text("".join(json.dumps(r) + "\n" for r in recs))
                r = cli(argv(cmd, edited, work / "model"))
                written = sorted(p.name for p in work.iterdir()) != ["edited.jsonl"]
                return one_line_2(r, "TrainingDataError", needle) and not written, r[2].strip()[:80]

    @case("18.6", "a model with NaN weights (plan put every table on device 0 at 0.000 ms)", "plan --model nan/")
    def _() -> tuple[bool, str]:
        state = torch.load(PACKAGED_DIR / COST_FILE, weights_only=True)
        buf = io.BytesIO()
        torch.save({k: v * float("nan") if v.is_floating_point() else v for k, v in state.items()}, buf)
        m = model_with_weights(d / "nan-model", buf.getvalue())
        r = cli(["plan", "-i", str(invf), "-d", "2", "-m", "1", "--model", str(m), "-o", str(d / "p-nan.json")])
        return one_line_2(r, "not finite") and not (d / "p-nan.json").exists(), r[2].strip()[:80]

    for cmd in ("train-cost", "train"):

        @case("18.7", f"{cmd} --model-dir FILE", f"{cmd} --model-dir afile")
        def _(cmd: str = cmd) -> bool:
            f = d / f"afile-{cmd}"
            f.write_text("keep")
            r = cli(argv(cmd, meas, f))
            return one_line_2(r, "not a directory") and f.read_text() == "keep"

    for name in (COST_FILE, CARD_FILE):

        @case("18.7", f"a FIFO as the model's {name}", "plan --model fifo/")
        def _(name: str = name) -> tuple[bool, str]:
            m = d / f"fifo-{name}"
            shutil.copytree(PACKAGED_DIR, m)
            (m / name).unlink()
            os.mkfifo(m / name)
            got = _loads_within(m, 20.0)
            if got == "hang":
                os.close(os.open(m / name, os.O_WRONLY | os.O_NONBLOCK))  # let the blocked reader go
            return got.startswith("ModelError") and "not a regular file" in got, got[:80]

    @case("18.16", "a TorchScript archive as cost_net.pt: one line, no torch warning", "plan --model jit/")
    def _() -> tuple[bool, str]:
        class Identity(torch.nn.Module):
            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return x

        buf = io.BytesIO()
        torch.jit.save(torch.jit.script(Identity()), buf)
        m = model_with_weights(d / "jit-model", buf.getvalue())
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            r = cli(["plan", "-i", str(invf), "-d", "2", "-m", "1", "--model", str(m), "-o", str(d / "p-jit.json")])
        return one_line_2(r, "cannot load weights") and not caught and "\x1b" not in r[2], r[2].strip()[:80]
