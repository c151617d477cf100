"""A plan store in a local directory: atomic writes by temp file + rename, CAS under an fcntl lock."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

from dreamshard.errors import StoreError
from dreamshard.io import atomic_write_bytes
from dreamshard.store.base import KeyNotFoundError, PlanStore, Version

_LOCK_DIR = ".locks"


def _version(data: bytes) -> Version:
    return hashlib.sha256(data).hexdigest()


class LocalPlanStore(PlanStore):
    """Objects are files under `root`; keys map to relative paths."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).expanduser().resolve()
        self.location = str(self.root)
        if self.root.exists() and not self.root.is_dir():
            raise StoreError(f"plan store {self.root} exists but is not a directory")

    def _path(self, key: str) -> Path:
        parts = [p for p in key.split("/") if p]
        if not parts or any(p in {".", ".."} for p in parts) or parts[0] == _LOCK_DIR:
            raise StoreError(f"invalid storage key '{key}'")
        return self.root.joinpath(*parts)

    def put_bytes(self, key: str, data: bytes) -> None:
        path = self._path(key)
        try:
            atomic_write_bytes(path, data)
        except OSError as e:
            raise StoreError(f"cannot write {path}: {e.strerror}") from None

    def get_bytes(self, key: str) -> bytes:
        path = self._path(key)
        try:
            return path.read_bytes()
        except FileNotFoundError:
            raise KeyNotFoundError(f"no object '{key}' in plan store {self.root}") from None
        except OSError as e:
            raise StoreError(f"cannot read {path}: {e.strerror}") from None

    def list_keys(self, prefix: str = "") -> list[str]:
        if not self.root.is_dir():
            return []
        out: list[str] = []
        for dirpath, dirnames, filenames in os.walk(self.root):
            dirnames[:] = [d for d in dirnames if d != _LOCK_DIR]
            rel_dir = Path(dirpath).relative_to(self.root)
            for name in filenames:
                if name.startswith(".") and name.endswith(".tmp"):
                    continue  # an in-flight atomic write
                key = (rel_dir / name).as_posix()
                if key.startswith(prefix):
                    out.append(key)
        return sorted(out)

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def get_versioned(self, key: str) -> tuple[bytes, Version] | None:
        try:
            data = self.get_bytes(key)
        except KeyNotFoundError:
            return None
        return data, _version(data)

    @contextlib.contextmanager
    def _locked(self, key: str) -> Iterator[None]:
        lock_dir = self.root / _LOCK_DIR
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
