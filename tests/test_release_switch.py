"""A release that fails or is killed at any step leaves the shipped model byte-identical: everything is staged
beside it and switched over once (dreamshard.release.promote)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from dreamshard.learning.model_store import PACKAGED_DIR, load_card, load_model
from dreamshard.release import promote as promote_mod
from dreamshard.release.report import ReleaseReport
from dreamshard.release.stats import RatioInterval
from dreamshard.values import BackendInfo
from dreamshard.values.model_files import CARD_FILE, COST_FILE


def digest(directory: Path) -> dict[str, str]:
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        for p in sorted(directory.rglob("*"))
    }


def report() -> ReleaseReport:
    iv = RatioInterval(estimate=0.9, low=0.85, high=0.95, confidence=0.95, tasks=4)
    info = BackendInfo(
        name="cpu", operator="fbgemm_tbe", device="cpu", num_threads=1, batch_size=512, warmup=1, repeats=1
    )
    return ReleaseReport(
        candidate="cand",
        shipped="old",
        backend=info,
        rounds=5,
        tasks=[],
        vs_shipped=iv,
        vs_best=iv,
        max_vs_shipped=1.0,
        max_vs_best=1.2,
        released=True,
        reasons=[],
    )


@pytest.fixture()
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    """(candidate, shipped): the packaged model, and a copy whose card names another version."""
    shipped = tmp_path / "pretrained"
    shutil.copytree(PACKAGED_DIR, shipped)
    candidate = tmp_path / "candidate"
    shutil.copytree(PACKAGED_DIR, candidate)
    state = torch.load(candidate / COST_FILE, weights_only=True)
    first = next(k for k, v in state.items() if torch.is_tensor(v) and v.is_floating_point())
    state[first] = state[first] + 0.5  # other weights: a partial release would show in the bytes
    torch.save(state, candidate / COST_FILE)
    card = json.loads((candidate / CARD_FILE).read_text())
    card["version"] = "candidate-2"
    card["files"][COST_FILE] = hashlib.sha256((candidate / COST_FILE).read_bytes()).hexdigest()
    (candidate / CARD_FILE).write_text(json.dumps(card))
    return candidate, shipped


def crash(message: str) -> Callable[..., object]:
    def fail(*a: object, **k: object) -> object:
        raise OSError(28, f"No space left on device ({message})")

    return fail


@pytest.mark.parametrize(
    "step",
    ["copy the shipped files", "copy the weights", "write the report", "write the card", "switch"],
)
def test_a_failure_at_each_step_leaves_the_shipped_model_byte_identical(
    step: str, dirs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    candidate, shipped = dirs
    before = digest(shipped)
    if step == "copy the shipped files":
        monkeypatch.setattr(promote_mod.shutil, "copytree", crash(step))
    elif step == "copy the weights":
        monkeypatch.setattr(promote_mod.shutil, "copyfile", crash(step))
    elif step == "write the report":
        monkeypatch.setattr(promote_mod, "write_report", crash(step))
    elif step == "write the card":
        real = promote_mod.atomic_write_text
        monkeypatch.setattr(
            promote_mod,
            "atomic_write_text",
            lambda p, t: crash(step)() if Path(p).name == CARD_FILE else real(p, t),
        )
    else:
        monkeypatch.setattr(promote_mod, "_exchange", crash(step))
    with pytest.raises(OSError, match="No space left"):
        promote_mod.promote(candidate, shipped, report())
    assert digest(shipped) == before
    load_model(shipped)  # every later plan still loads it
    assert not list(shipped.parent.glob(".pretrained.release-*"))  # nothing staged is left


def test_a_report_target_that_is_a_directory_changes_nothing(dirs: tuple[Path, Path]) -> None:
    candidate, shipped = dirs
    (shipped / "release.md").mkdir()
    before = digest(shipped)
    with pytest.raises(Exception, match="is a directory"):
        promote_mod.promote(candidate, shipped, report())
    assert digest(shipped) == before


def test_a_killed_release_leaves_it_byte_identical_and_the_next_one_cleans_up(dirs: tuple[Path, Path]) -> None:
    candidate, shipped = dirs
    before = digest(shipped)
    script = (
        "import os, sys; from pathlib import Path\n"
        "from dreamshard.release import promote as m\n"
        "real = m.atomic_write_text\n"
        "def killed(p, t):\n"
        "    if Path(p).name == 'model.json': os._exit(137)  # as SIGKILL: no cleanup runs\n"
        "    return real(p, t)\n"
        "m.atomic_write_text = killed\n"
        "report = m.ReleaseReport.model_validate_json(sys.argv[1])\n"
        f"m.promote(Path({str(candidate)!r}), Path({str(shipped)!r}), report)\n"
    )
    done = subprocess.run([sys.executable, "-c", script, report().model_dump_json()], check=False)
    assert done.returncode == 137
    assert digest(shipped) == before
    assert list(shipped.parent.glob(".pretrained.release-*"))  # the killed one's stage is left ...
    path = promote_mod.promote(candidate, shipped, report())
    assert not list(shipped.parent.glob(".pretrained.release-*"))  # ... until the next release
    assert path == shipped / "release.md" and path.is_file()
    assert load_card(shipped).version == "candidate-2"
    assert (shipped / COST_FILE).read_bytes() == (candidate / COST_FILE).read_bytes()
    load_model(shipped)
    assert os.path.isdir(shipped)


def test_a_release_into_a_link_replaces_the_directory_it_names_and_keeps_the_link(dirs: tuple[Path, Path]) -> None:
    """`release --into cur` with `cur -> pretrained`: the directory is switched, `cur` stays a link to it, and nothing
    staged is left beside either (the link was replaced by a directory and `.cur.release-*` was left before)."""
    candidate, shipped = dirs
    link = shipped.parent / "cur"
    link.symlink_to(shipped.name)
    path = promote_mod.promote(candidate, link, report())
    assert link.is_symlink() and os.readlink(link) == shipped.name
    assert path == link / "release.md" and path.is_file()
    assert load_card(shipped).version == "candidate-2"
    assert (shipped / COST_FILE).read_bytes() == (candidate / COST_FILE).read_bytes()
    assert sorted(p.name for p in shipped.parent.iterdir()) == ["candidate", "cur", "pretrained"]
    load_model(link)
