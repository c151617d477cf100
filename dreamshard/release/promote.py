"""What the gate's decision does to the files: a released candidate's weights, card and report replace the
shipped model's directory in one atomic switch (the new directory is staged whole beside it, then the two are
exchanged), so a release that fails or is killed at any step leaves the shipped model byte-identical; a refused
one leaves the shipped model's directory byte-identical and its report beside the candidate."""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import tempfile
from pathlib import Path

from dreamshard.documents import atomic_write_text
from dreamshard.learning.model_store import load_card
from dreamshard.release.report import ReleaseReport, render
from dreamshard.values.model_files import CARD_FILE, COST_FILE, POLICY_FILE

REPORT_MD, REPORT_JSON = "release.md", "release.json"
#: Staged directories are named `.<target>.release-*` beside the target; a killed release's leftovers are removed
#: by the next release.
STAGE_PREFIX = ".{name}.release-"
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def write_report(directory: Path, report: ReleaseReport) -> Path:
    """The report's two files into `directory`; returns the Markdown one."""
    atomic_write_text(directory / REPORT_JSON, report.model_dump_json(indent=1) + "\n")
    return atomic_write_text(directory / REPORT_MD, render(report))


def shipped_directory(into: Path) -> Path:
    """The directory a release replaces for `--into into`: the directory itself, or the one a link names (the link
    stays a link, to the released model); OSError on a link loop."""
    return into.resolve(strict=False) if into.is_symlink() else into.absolute()


def unwritable(target: Path) -> str | None:
    """Why a release could not stage its directory beside `target` (the nearest existing folder above it cannot
    be written: permissions, an immutable or read-only folder, a file on the way), or None. Probed by creating
    and removing a staging-like folder, so it holds for root and for attributes as well as modes."""
    here = target.parent
    while not here.exists() and here != here.parent:
        here = here.parent
    if not here.is_dir():
        return f"{here} is not a directory"
    try:
        probe = tempfile.mkdtemp(prefix=STAGE_PREFIX.format(name=target.name) + "probe-", dir=here)
    except OSError as e:
        return f"{here} cannot be written ({e.strerror})"
    os.rmdir(probe)
    return None


def promote(candidate: Path, target: Path, report: ReleaseReport) -> Path:
    """Replace the model in `target` by the one in `candidate`, with the report: everything is staged in a sibling
    directory first (the target's other files, the candidate's weights, the report, the card naming it), then the
    staged directory and the target are switched in one step (`switch`). A link as `target` is followed
    (`shipped_directory`): the directory it names is replaced and the link is left as it is. Returns the report's
    path."""
    card = load_card(candidate)
    provenance = {**card.provenance, "release": {"report": REPORT_MD, "summary": report.summary()}}
    released = card.model_copy(update={"provenance": provenance})
    link = target.absolute() if target.is_symlink() else None
    target = shipped_directory(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_leftovers(target)
    stage = Path(tempfile.mkdtemp(prefix=STAGE_PREFIX.format(name=target.name), dir=target.parent))
    try:
        if target.is_dir():
            shutil.copytree(target, stage, dirs_exist_ok=True, symlinks=True)
        names = [n for n in (COST_FILE, POLICY_FILE) if (candidate / n).is_file()]
        for name in names:
            shutil.copyfile(candidate / name, stage / name)
        if POLICY_FILE not in names:
            (stage / POLICY_FILE).unlink(missing_ok=True)
        write_report(stage, report)
        atomic_write_text(stage / CARD_FILE, released.model_dump_json(indent=2) + "\n")
        switch(stage, target)
    finally:
        shutil.rmtree(stage, ignore_errors=True)  # after the switch: the old model
    return (link or target) / REPORT_MD


def remove_leftovers(target: Path) -> None:
    """Remove staged directories a killed release left beside `target` (never `target` itself)."""
    for path in target.parent.glob(STAGE_PREFIX.format(name=target.name) + "*"):
        if path.is_dir() and path != target:
            shutil.rmtree(path, ignore_errors=True)


def switch(stage: Path, target: Path) -> None:
    """Make `stage` the `target` directory in one step: an atomic exchange of the two where the OS has one (Linux
    renameat2), else two renames with the old directory put back if the second fails. Afterwards `stage` holds the
    old directory (or nothing, when there was no target)."""
    if not target.exists():
        os.rename(stage, target)
        return
    if _exchange(stage, target):
        return
    backup = stage.with_name(stage.name + ".old")
    os.rename(target, backup)
    try:
        os.rename(stage, target)
    except OSError:
        os.rename(backup, target)
        raise
    os.rename(backup, stage)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (renameat2 RENAME_EXCHANGE); False where the OS or filesystem has no such call."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    rc = renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(b))
