"""Attacks on `dreamshard release` (the release gate for a packaged model, the end of `make pretrain`): a candidate
whose card lists no checksums, the simulator's costs without release.allow_simulated, a shipped directory that
cannot be replaced. Each is refused in one line before the bench measures anything (a guard fails the case if the
bench runs), and the shipped model stays byte-identical. A release into a link: tests/test_release_switch.py.

The files: `shipped` and `cand`, copies of the packaged model, and `afile`, a regular file."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

from harness import Case, Refused, Setup, Table


def world(d: Path) -> None:
    from dreamshard.learning.model_store import PACKAGED_DIR

    shutil.copytree(PACKAGED_DIR, d / "shipped")
    shutil.copytree(PACKAGED_DIR, d / "cand")
    (d / "afile").write_text("not a folder\n")


def _card_files(keep: tuple[str, ...]) -> Setup:
    """The candidate's card listing the checksums of the files in `keep` only."""

    def setup(work: Path) -> None:
        card = json.loads((work / "cand/model.json").read_text())
        card["files"] = {k: v for k, v in card["files"].items() if k in keep}
        (work / "cand/model.json").write_text(json.dumps(card))

    return setup


def _loop(work: Path) -> None:
    (work / "loop").symlink_to("loop")


@contextmanager
def no_bench() -> Iterator[None]:
    """The release bench must not run: every refusal comes before anything is measured."""
    with mock.patch("dreamshard.usecases.release.run_bench", side_effect=AssertionError("the bench ran")):
        yield


CASES: list[Case] = [
    Refused(
        'a candidate card with "files": {}',
        "release cand --into shipped --backend cpu",
        ("cand/cost_net.pt", "records no checksum for cost_net.pt"),
        setup=_card_files(()),
        guard=no_bench,
    ),
    Refused(
        "a candidate card that lists the policy's checksum only",
        "release cand --into shipped --backend cpu",
        "records no checksum for cost_net.pt",
        setup=_card_files(("policy.pt",)),
        guard=no_bench,
    ),
    Refused(
        "--backend simulator without --allow-simulated",
        "release cand --into shipped --backend simulator",
        ("profile.backend is simulator", "release.allow_simulated (--allow-simulated)"),
        guard=no_bench,
    ),
    Refused(
        "--into under a regular file",
        "release cand --into afile/pretrained --backend cpu",
        ("cannot be replaced", "afile is not a directory", "nothing was measured"),
        guard=no_bench,
    ),
    Refused(
        "--into a link to itself",
        "release cand --into loop --backend cpu",
        ("--into loop cannot be followed", "loop"),
        setup=_loop,
        guard=no_bench,
    ),
]

TABLE = Table("release", CASES, world)
