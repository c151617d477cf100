"""A candidate placement the search scored, and the search's result: values the search produces and verification,
the plan report and the doors read (dreamshard.search.candidates searches; these live here so that `measured/` and
the doors need not import the search)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, get_args

from dreamshard.values.tables import Inventory

#: Where the search's candidates come from (params plan.candidates): the RL policy, LPT on the learned costs,
#: TorchRec's planner and each built-in heuristic (dreamshard.search.candidates; a test keeps the heuristics in
#: step with the sharder registry).
CandidateSource = Literal[
    "policy",
    "lpt",
    "torchrec",
    "random",
    "round_robin",
    "dim_greedy",
    "size_greedy",
    "lookup_greedy",
    "size_lookup_greedy",
]
CANDIDATE_SOURCES: tuple[CandidateSource, ...] = get_args(CandidateSource)

#: the candidate sources that are not sharder names (CURRENT: the plan now current, adapted: a seed; UNCALIBRATED:
#: the best placement of the search on the cost before calibration, a seed)
POLICY, LPT, CURRENT, UNCALIBRATED = "policy", "lpt", "current", "uncalibrated"
#: what local search appends to the source of a candidate it improved
SEARCHED = "+search"


def origin(source: str) -> str:
    """The source a candidate came from: `current+search` came from `current`."""
    return source.removesuffix(SEARCHED)


@dataclass(frozen=True)
class Candidate:
    source: str  # where the placement came from ("policy", "lpt", a sharder name; "+search" when refined)
    placement: dict[str, int]
    predicted_ms: float  # pessimistic predicted overall cost (the search objective)
    units: Inventory | None = None  # the units `placement` places when they differ from the search's (typed)


@dataclass(frozen=True)
class SearchResult:
    best: Candidate
    candidates: list[Candidate]  # every scored candidate, best first (refined ones included)
    failed: dict[str, str] = field(default_factory=dict)  # source -> why it produced no candidate
    wall_s: float = 0.0
