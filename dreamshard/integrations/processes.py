"""Child processes that do not outlive their command, and the folders a killed command leaves (docs/torchrec.md,
"Rewriting a checkpoint").

A rank process started by a command calls `die_with_parent` first: on Linux the kernel sends it SIGKILL when the
command dies, however it dies (``prctl(PR_SET_PDEATHSIG)``); elsewhere a watchdog thread exits when its parent
changes. A folder a command writes before renaming it into place is named `owned_name` (``<prefix><pid>-<hex>``),
so a later run removes those of commands no longer alive (`remove_stale`). Only the standard library here: a rank
calls it before importing torch.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import sys
import threading
import time
import uuid
from pathlib import Path

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int) -> None:
    """Make this process die with `parent` (its parent's pid, as the parent saw it); exit at once when the parent
    is already gone."""
    armed = False
    if sys.platform.startswith("linux"):
        try:
            armed = ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL) == 0
        except (OSError, AttributeError):
            armed = False
    if os.getppid() != parent:
        os._exit(1)
    if not armed:
        threading.Thread(target=_watch, args=(parent,), daemon=True, name="die-with-parent").start()


def _watch(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(1)


def alive(pid: int) -> bool:
    """Whether a process `pid` exists (one of another user counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def owned_name(prefix: str) -> str:
    """A folder name `remove_stale` can tell the owner of: ``<prefix><pid>-<hex>``."""
    return f"{prefix}{os.getpid()}-{uuid.uuid4().hex[:8]}"


def remove_stale(parent: Path, prefix: str) -> list[Path]:
    """Remove the folders `owned_name(prefix)` named in `parent` whose command is no longer alive; the removed."""
    removed: list[Path] = []
    with contextlib.suppress(OSError):
        for path in parent.iterdir():
            pid, _, rest = path.name[len(prefix) :].partition("-") if path.name.startswith(prefix) else ("", "", "")
            if not (pid.isdigit() and rest) or path.is_symlink() or not path.is_dir():
                continue
            if hasattr(os, "getuid") and path.stat().st_uid != os.getuid():
                continue
            if int(pid) != os.getpid() and not alive(int(pid)):
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
    return removed
