"""Tables that declare no access statistics (docs/architecture/learning.md, "Planning without statistics"): which
they are, the inventory as it would be under an assumed id distribution, and a candidate's worst-case regret over
the distributions. The search ranks by predicted regret (dreamshard.search.unknown_stats) and verification by
measured regret (dreamshard.measured.robust_verify); both build on this."""

from __future__ import annotations

from collections.abc import Sequence

from dreamshard.inventory.histogram import assumed_histogram
from dreamshard.values import Inventory


def unknown_tables(inventory: Inventory) -> list[str]:
    """The tables (or units) that declare no access histogram and do look rows up."""
    return [t.name for t in inventory.tables if t.access_histogram is None and t.pooling_factor > 0]


def assumed_variant(inventory: Inventory, skew: float) -> Inventory:
    """`inventory` with every table lacking a histogram declaring the one of Zipf(`skew`) ids (0: uniform)."""
    tables = tuple(
        t.model_copy(
            update={"access_histogram": assumed_histogram(int(t.num_embeddings), float(t.pooling_factor), skew)}
        )
        if t.access_histogram is None and t.pooling_factor > 0
        else t
        for t in inventory.tables
    )
    return inventory.model_copy(update={"tables": tables})


def regrets(costs: Sequence[Sequence[float]]) -> list[float]:
    """costs[i][v] (candidate i under distribution v) -> each candidate's worst regret over the distributions."""
    best = [min(c[v] for c in costs) for v in range(len(costs[0]))]
    return [max(c[v] / best[v] if best[v] > 0 else 1.0 for v in range(len(best))) for c in costs]
