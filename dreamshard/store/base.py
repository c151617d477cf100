"""The object-store interface plan publishing is written against.

Five primitives are enough for publishing: put/get/list/exists plus a compare-and-swap write (`put_if`) for the
`current` pointer. Old plan versions stay for rollback and audit: publishing never deletes. Two more primitives serve
the repair `plans gc` (dreamshard.store.orphans): `written_at` (how old a leftover is, for the grace period) and
`delete` (removing the leftovers of an interrupted publish). `delete` also clears a pending change once a reviewer
answered it (dreamshard.store.plans.clear_pending: its decision is recorded first). Nothing else calls them.
"""

from __future__ import annotations

import random
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from datetime import datetime
from typing import NamedTuple

from dreamshard.errors import StoreError

#: Opaque token identifying one version of an object (local: sha256 of the bytes; S3: the ETag).
Version = str


class PathProblem(NamedTuple):
    """Something in a store that no key shows (a link out of a local store, an empty folder...), with its fix."""

    key: str
    problem: str
    fix: str


class KeyNotFoundError(StoreError):
    """The requested key does not exist in the store."""


class PlanStore(ABC):
    """A flat key -> bytes store with '/'-separated keys relative to the store root."""

    #: Where the store lives, for messages (a directory or s3://bucket/prefix @ endpoint).
    location: str = ""

    @abstractmethod
    def put_bytes(self, key: str, data: bytes) -> None:
        """Write `data` at `key` (atomically: a reader sees the old object or the new one, never a mix)."""

    @abstractmethod
    def get_bytes(self, key: str) -> bytes:
        """Read the object at `key`; raise KeyNotFoundError if it does not exist."""

    @abstractmethod
    def list_keys(self, prefix: str = "") -> list[str]:
        """All keys starting with `prefix`, sorted."""

    @abstractmethod
    def exists(self, key: str) -> bool:
        """Whether an object exists at `key`."""

    @abstractmethod
    def get_versioned(self, key: str) -> tuple[bytes, Version] | None:
        """The object's bytes and version token, or None if it does not exist."""

    @abstractmethod
    def put_if(self, key: str, data: bytes, expected: Version | None) -> bool:
        """Compare-and-swap: write only if the object's version is still `expected` (None: must not exist).

        Returns False (and writes nothing) when another writer got there first.
        """

    @abstractmethod
    def written_at(self, key: str) -> datetime | None:
        """When the store last wrote the object at `key` (timezone-aware UTC; local: its mtime, S3: LastModified),
        or None if it does not exist. Used only by the repair of orphans (its grace period)."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove the object at `key` (nothing when it does not exist). Used only by the repair of orphans
        (`plans gc`, dreamshard.store.orphans) and to clear an answered pending change
        (dreamshard.store.plans.clear_pending): publishing, rollback and every reader never delete."""

    def check(self) -> None:
        """Raise StoreError if the store is not usable (unreachable, bad credentials, missing bucket).

        A hook, not a primitive: by default there is nothing to check; a store that can be unreachable overrides it.
        """
        return None

    def scan(self, prefix: str = "") -> tuple[list[str], list[PathProblem]]:
        """The keys under `prefix` the store can read, sorted, and what is there that it cannot (a link out of a local
        store, a file where a folder belongs), each a PathProblem: what a listing that names what it skips walks
        (`plans list`, `plans fsck`). `list_keys` refuses instead. An object store holds only objects: every key."""
        return self.list_keys(prefix), []

    def path_problems(self, prefix: str = "") -> list[PathProblem]:
        """What is wrong with the store's own structure under `prefix` that no key shows (`plans fsck`). An object
        store has none; a local directory can hold links, empty folders, FIFOs (dreamshard.store.local)."""
        return []

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.location})"


#: Compare-and-swap attempts before giving up (each loser backs off a little, with jitter).
CAS_ATTEMPTS = 64


def cas_update(
    store: PlanStore, key: str, make: Callable[[bytes | None], bytes | None], attempts: int = CAS_ATTEMPTS
) -> bytes | None:
    """Compare-and-swap loop on one small object: `make(current bytes or None)` returns the bytes to write, or
    None to keep what is there. Returns what `key` holds afterwards (None: absent, and nothing to write, at once).
    Concurrent writers never lose an update."""
    for attempt in range(attempts):
        got = store.get_versioned(key)
        new = make(None if got is None else got[0])
        if new is None:
            return None if got is None else got[0]
        if new is not None and store.put_if(key, new, None if got is None else got[1]):
            return new
        time.sleep(random.uniform(0.0, min(0.2, 0.005 * 2**attempt)))
    raise StoreError(
        f"could not update {key} in {store.location}: {attempts} concurrent updates in a row won the race; retry"
    )
