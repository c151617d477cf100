"""Sharder names as the doors take them (`--sharders heuristics,lpt`), and the list `dreamshard sharders` prints
(the registry: dreamshard.sharders.registry)."""

from __future__ import annotations

from dreamshard.evaluation import validate_sharders
from dreamshard.sharders import HEURISTICS, contender_names, sharder_names


def expand(spec: str) -> list[str]:
    """'heuristics' -> the heuristics; 'all' -> every contender; else a comma list (each name checked)."""
    parts: list[str] = []
    for item in spec.split(","):
        item = item.strip()
        if item == "heuristics":
            parts += list(HEURISTICS)
        elif item == "all":
            parts += list(contender_names())
        elif item:
            parts.append(item)
    return validate_sharders(parts)


def names() -> list[str]:
    """Every installed sharder."""
    return list(sharder_names())


def heuristics() -> list[str]:
    return list(HEURISTICS)
