"""Per-name seeded draws: choices about one table that do not depend on which other tables exist, so a new or
changed table leaves every other table's choices as they were (docs/architecture/measuring.md, "The measurement corpus":
stable tasks and placements are what lets the corpus serve most of a changed inventory's measurements)."""

from __future__ import annotations

import hashlib


def draw(seed: int, tag: str, name: str) -> float:
    """A uniform draw in [0, 1) fixed by (seed, tag, name)."""
    digest = hashlib.sha256(f"{seed}|{tag}|{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64
