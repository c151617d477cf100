"""Planning for tables that declare no access statistics (docs/architecture/learning.md, "Planning without statistics").

A table without an access histogram is costed under an assumed id distribution (dreamshard.inventory.histogram:
Zipf 1.05). Where an inventory has such tables and `plan.unknown_skews` names more than one distribution, the
search's candidates are scored under each (uniform ids to very skewed ones) and ranked by their worst-case
regret: a candidate's predicted cost under a distribution over the best candidate's under it, the largest over
the distributions. The plan kept is then one that holds whatever the ids turn out to be, not the best for one
guess; the plan records what it assumed (values.AccessAssumptions).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from dreamshard.config.learning import DEFAULT_UNKNOWN_SKEWS
from dreamshard.errors import ConfigError
from dreamshard.inventory.unknown import assumed_variant, regrets, unknown_tables
from dreamshard.learning.estimator import device_states
from dreamshard.learning.planning_cost import PlanningCost
from dreamshard.values import AccessAssumptions, Inventory, Table, Topology
from dreamshard.values.search_result import Candidate

__all__ = ["DEFAULT_UNKNOWN_SKEWS", "check_skews", "robust_rerank"]

#: candidates re-scored under every distribution (the best predicted ones)
RERANKED = 16
#: names a plan's report lists of the tables without statistics
EXAMPLES = 5


#: the most distributions a plan is planned (and verified) for: each multiplies verification's measurements
MAX_SKEWS = 5


def check_skews(skews: Sequence[float]) -> tuple[float, ...]:
    """`plan.unknown_skews` checked: distinct Zipf exponents in [0, 4], at most MAX_SKEWS (empty or one: the single
    assumed distribution)."""
    out = tuple(float(s) for s in skews)
    if len(out) > MAX_SKEWS:
        raise ConfigError(f"plan.unknown_skews lists {len(out)} distributions; at most {MAX_SKEWS}")
    for s in out:
        if not 0.0 <= s <= 4.0:
            raise ConfigError(f"plan.unknown_skews: Zipf exponent {s:g} is outside [0, 4] (0: uniform ids)")
    if len(set(out)) != len(out):
        raise ConfigError("plan.unknown_skews lists a distribution twice")
    return out


def robust_rerank(
    candidates: list[Candidate],
    units: Inventory,
    topology: Topology,
    cost: PlanningCost,
    skews: Sequence[float],
    extra_ms: Sequence[float] = (),
) -> tuple[list[Candidate], AccessAssumptions]:
    """The `RERANKED` best candidates re-ordered by worst predicted regret over `skews` (ties: as before), then the
    rest; and what the first assumed. `units` are the units the candidates place unless a candidate has its own.
    `extra_ms`: per candidate, ms per step added under every skew (a re-plan's move: dreamshard.search.moves)."""
    head = candidates[:RERANKED]
    encoded: dict[tuple[int, float], tuple[list[Table], torch.Tensor]] = {}  # per units and skew, encoded once

    def overall(own: Inventory, skew: float, placement: dict[str, int]) -> float:
        key = (id(own), skew)
        if key not in encoded:
            tables = list(assumed_variant(own, skew).tables)
            encoded[key] = tables, cost.encode(tables)
        tables, states = encoded[key]
        devices = device_states(states, [placement[t.name] for t in tables], topology.num_devices)
        return float(cost.overall(devices))  # the pessimistic planning cost, as the search scores

    with torch.no_grad():
        predicted = [[overall(c.units or units, s, c.placement) for s in skews] for c in head]
    for i, extra in enumerate(extra_ms[: len(head)]):
        predicted[i] = [ms + extra for ms in predicted[i]]
    worst = regrets(predicted)
    order = sorted(range(len(head)), key=lambda i: (round(worst[i], 6), i))
    best = order[0]
    names = unknown_tables(units)
    report = AccessAssumptions(
        tables=len(names),
        examples=tuple(names[:EXAMPLES]),
        skews=tuple(skews),
        predicted_regret=max(1.0, worst[best]),
        predicted_ms={f"{s:g}": ms for s, ms in zip(skews, predicted[best], strict=True)},
    )
    return [head[i] for i in order] + candidates[RERANKED:], report
