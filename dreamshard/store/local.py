"""A plan store in a local directory: atomic writes by temp file + rename, CAS under an fcntl lock.

Containment (the one place it lives): every path the store reads, writes or lists is resolved first, and one that
resolves outside the store's root (a link to a folder or file elsewhere, anywhere on the way) is refused with a
StorePathError naming the link; so is a file where a folder belongs and a folder (or FIFO, socket, device) where
an object belongs. `path_problems` reports all of these, plus links to folders inside the store (never walked,
so their objects are not listed) and empty folders, for `plans fsck`.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import stat
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

from dreamshard.documents import atomic_write_bytes
from dreamshard.errors import StoreError, StorePathError
from dreamshard.store.base import KeyNotFoundError, PathProblem, PlanStore, Version

_LOCK_DIR = ".locks"
_MOVE = "move it out of the store, then run `dreamshard plans fsck` again"
_LINK_OUT = "a link out of the plan store ({}); the store reads and writes nothing through it"
_UNLINK = "replace the link with the folder or file itself"
_NOT_REGULAR = "not a regular file (a FIFO, socket or device)"


def _version(data: bytes) -> Version:
    return hashlib.sha256(data).hexdigest()


def _is_tmp(name: str) -> bool:
    return name.startswith(".") and name.endswith(".tmp")  # an in-flight atomic write


class LocalPlanStore(PlanStore):
    """Objects are files under `root`; keys map to relative paths."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).expanduser().resolve()
        self.location = str(self.root)
        if self.root.exists() and not self.root.is_dir():
            raise StoreError(f"plan store {self.root} exists but is not a directory")

    # -- paths: the containment rule ----------------------------------------------------------------------
    def _key(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    def _parts(self, key: str) -> list[str]:
        parts = [p for p in key.split("/") if p]
        if any(p in {".", ".."} for p in parts) or (parts and parts[0] == _LOCK_DIR):
            raise StoreError(f"invalid storage key '{key}'")
        return parts

    def _leaving(self, path: Path) -> tuple[Path, str] | None:
        """(the link, where it leads) when `path` (lexically under the root) resolves outside the store."""
        try:
            real = path.resolve()
        except (OSError, RuntimeError):  # a link loop
            return path, "a link loop"
        if real == self.root or real.is_relative_to(self.root):
            return None
        cur = self.root
        for part in path.relative_to(self.root).parts:
            cur = cur / part
            if cur.is_symlink() and not (t := cur.resolve()).is_relative_to(self.root):
                return cur, str(t)
        return path, str(real)

    def _inside(self, path: Path) -> Path:
        """`path`, after checking that it does not lead out of the store (StorePathError naming the link)."""
        out = self._leaving(path)
        if out is not None:
            link, target = out
            raise self._error(link, _LINK_OUT.format(target), _UNLINK)
        return path

    def _error(self, path: Path, problem: str, fix: str) -> StorePathError:
        return StorePathError(self._key(path), str(self.root), problem, fix)

    def _blocker(self, path: Path) -> Path | None:
        """The first folder on the way to `path` (below the root, `path` excluded) that is not a folder."""
        cur = self.root
        for part in path.relative_to(self.root).parts[:-1]:
            cur = cur / part
            if cur.exists() and not cur.is_dir():
                return cur
            if not cur.exists():
                return None
        return None

    def _blocked(self, path: Path) -> StorePathError:
        return self._error(self._blocker(path) or path.parent, "a file where the store keeps a folder", _MOVE)

    def _not_object(self, path: Path, mode: int) -> StorePathError:
        what = "a folder" if stat.S_ISDIR(mode) else _NOT_REGULAR
        return self._error(path, f"{what} where the store keeps an object", _MOVE)

    def _path(self, key: str) -> Path:
        parts = self._parts(key)
        if not parts:
            raise StoreError(f"invalid storage key '{key}'")
        return self._inside(self.root.joinpath(*parts))

    # -- the five primitives ------------------------------------------------------------------------------
    def put_bytes(self, key: str, data: bytes) -> None:
        path = self._path(key)
        if self._blocker(path) is not None:
            raise self._blocked(path)
        if path.is_dir():
            raise self._not_object(path, stat.S_IFDIR)
        try:
            atomic_write_bytes(path, data)
        except OSError as e:
            raise StoreError(f"cannot write {path}: {e.strerror}") from None

    def get_bytes(self, key: str) -> bytes:
        path = self._path(key)
        try:  # O_NONBLOCK: opening a FIFO planted in the store must not hang the reader
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except FileNotFoundError:
            raise KeyNotFoundError(f"no object '{key}' in plan store {self.root}") from None
        except NotADirectoryError:
            raise self._blocked(path) from None
        except OSError as e:
            raise StoreError(f"cannot read {path}: {e.strerror}") from None
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            raise self._not_object(path, mode)
        with os.fdopen(fd, "rb") as f:
            try:
                return f.read()
            except OSError as e:
                raise StoreError(f"cannot read {path}: {e.strerror}") from None

    def _start(self, prefix: str) -> Path:
        """The folder every key starting with `prefix` is under; StorePathError when it cannot be one."""
        start = self.root.joinpath(*self._parts(prefix.rpartition("/")[0]))
        if start != self.root:
            self._inside(start)
            if self._blocker(start / "x") is not None:
                raise self._blocked(start / "x")
        return start

    def _walk(self, start: Path) -> Iterator[tuple[Path, list[str], list[str]]]:
        """os.walk below `start`, never into links, never into the lock folder."""
        for dirpath, dirnames, filenames in os.walk(start):
            here = Path(dirpath)
            if here == self.root:
                dirnames[:] = [d for d in dirnames if d != _LOCK_DIR]
            yield here, dirnames, [f for f in filenames if not _is_tmp(f)]

    def list_keys(self, prefix: str = "") -> list[str]:
        keys, problems = self.scan(prefix)
        if problems:  # a link out is refused; one inside is not walked (fsck reports it)
            first = problems[0]
            raise StorePathError(first.key, str(self.root), first.problem, first.fix)
        return keys

    def scan(self, prefix: str = "") -> tuple[list[str], list[PathProblem]]:
        try:
            start = self._start(prefix)
        except StorePathError as e:
            return [], [PathProblem(e.key, e.problem, e.fix)]
        if not start.is_dir():
            return [], []
        keys: list[str] = []
        problems: list[PathProblem] = []
        for here, dirnames, filenames in self._walk(start):
            for p, under in [(here / d, "/") for d in dirnames] + [(here / f, "") for f in filenames]:
                key = self._key(p)
                if not (key + under).startswith(prefix):
                    continue
                leaving = self._leaving(p) if p.is_symlink() else None
                if leaving is not None:
                    problems.append(PathProblem(self._key(leaving[0]), _LINK_OUT.format(leaving[1]), _UNLINK))
                elif not under:
                    keys.append(key)
        return sorted(keys), problems

    def path_problems(self, prefix: str = "") -> list[PathProblem]:
        try:
            start = self._start(prefix)
        except StorePathError as e:
            return [PathProblem(e.key, e.problem, e.fix)]
        lock = self.root / _LOCK_DIR
        out: list[PathProblem | None] = [self._link_problem(lock)] if start == self.root and lock.is_symlink() else []
        for here, dirnames, filenames in self._walk(start) if start.is_dir() else ():
            if here != self.root and not os.listdir(here):
                out.append(
                    PathProblem(self._key(here), "an empty folder (no object of the store is in it)", "remove it")
                )
            out += [self._link_problem(here / d) for d in dirnames if (here / d).is_symlink()]
            for name in filenames:
                p = here / name
                if p.is_symlink():
                    out.append(self._link_problem(p))
                elif not stat.S_ISREG(p.lstat().st_mode):
                    out.append(PathProblem(self._key(p), _NOT_REGULAR, "remove it"))
        return [p for p in out if p is not None]

    def _link_problem(self, link: Path) -> PathProblem | None:
        leaving = self._leaving(link)
        if leaving is not None:
            return PathProblem(self._key(link), _LINK_OUT.format(leaving[1]), _UNLINK)
        if link.is_dir():
            return PathProblem(
                self._key(link),
                f"a link to the folder {self._key(link.resolve())} inside the store; its objects are not listed",
                "replace the link with the folder itself",
            )
        return None

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def get_versioned(self, key: str) -> tuple[bytes, Version] | None:
        try:
            data = self.get_bytes(key)
        except KeyNotFoundError:
            return None
        return data, _version(data)

    # -- the repair of orphans only (dreamshard.store.orphans) ------------------------------------------
    def written_at(self, key: str) -> datetime | None:
        path = self._path(key)
        try:
            st = path.stat()
        except FileNotFoundError:
            return None
        except NotADirectoryError:
            raise self._blocked(path) from None
        if not stat.S_ISREG(st.st_mode):
            raise self._not_object(path, st.st_mode)
        return datetime.fromtimestamp(st.st_mtime, timezone.utc)

    def delete(self, key: str) -> None:
        """Unlink the file, then every folder above it that this left empty (an empty folder is an fsck finding),
        up to the store's root."""
        path = self._path(key)
        if self.written_at(key) is None:
            return
        try:
            path.unlink()
        except FileNotFoundError:
            return
        except OSError as e:
            raise StoreError(f"cannot delete {path}: {e.strerror}") from None
        folder = path.parent
        while folder != self.root and folder.is_relative_to(self.root):
            try:
                folder.rmdir()  # only an empty folder goes
            except OSError:
                break
            folder = folder.parent

    @contextlib.contextmanager
    def _locked(self, key: str) -> Iterator[None]:
        lock_dir = self._inside(self.root / _LOCK_DIR)
        lock_path = lock_dir / (hashlib.sha256(key.encode()).hexdigest()[:32] + ".lock")
        try:
            lock_dir.mkdir(parents=True, exist_ok=True)
            f = open(lock_path, "a+b")
        except OSError as e:
            raise StoreError(
                f"cannot lock {key} in plan store {self.root}: {e.strerror} (is the store read-only?)"
            ) from None
        with f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)

    def put_if(self, key: str, data: bytes, expected: Version | None) -> bool:
        # flock serialises writers across threads (separate open file descriptions) and processes;
        # the write itself is temp+rename, so lock-free readers still never see a partial object.
        with self._locked(key):
            current = self.get_versioned(key)
            if (current[1] if current else None) != expected:
                return False
            self.put_bytes(key, data)
            return True

    def check(self) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StoreError(f"cannot create plan store directory {self.root}: {e.strerror}") from None
        if not os.access(self.root, os.W_OK):
            raise StoreError(f"plan store directory {self.root} is not writable (read-only store?)")
        self._inside(self.root / _LOCK_DIR)  # before anything is written: locks never go out of the store
