"""The `publish` section of params.yaml (`PublishConfig`): the gate's rules, its baselines and where plans go
(docs/architecture/gate.md, "The publish gate")."""

from __future__ import annotations

import math
from itertools import pairwise
from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationInfo, field_validator

from dreamshard.errors import ConfigError
from dreamshard.sharders import BASELINE_SHARDERS
from dreamshard.values.base import StrictNumbers

#: TorchRec's planner: always a required baseline (what users would run without dreamshard).
ALWAYS_REQUIRED = "torchrec"
#: The baselines the gate measures by default: what a team would deploy without dreamshard (TorchRec's planner and
#: the greedy heuristics). `random` and `round_robin` stay report references (compare, the evaluate stage; a
#: comparison holding them still counts them, `--sharders` adds them): no team deploys either, and each extra
#: baseline is one more plan the gate measures and one more bound that noise can make straddle.
GATE_BASELINES: tuple[str, ...] = ("dim_greedy", "size_greedy", "lookup_greedy", "size_lookup_greedy", ALWAYS_REQUIRED)


class PublishConfig(StrictNumbers):
    """The `publish` section of params.yaml: the gate's rules and where plans are stored."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    min_improvement: float = Field(default=0.0, ge=0.0, lt=1.0)
    # A plan neither approved nor rejected whose interval against the deciding baseline lies inside
    # [1 - equivalence_margin, 1 + equivalence_margin] is decided "equivalent": as fast as the baseline within the
    # margin, beyond the noise (dreamshard.gate.rule). 0: never; the gate then says "inconclusive" instead.
    equivalence_margin: float = Field(default=0.04, ge=0.0, lt=0.5)
    # Baselines every plan is measured against (a --comparison must hold each of them; `plans publish --sharders`
    # adds, never removes). TorchRec's planner is always one of them.
    baselines: tuple[str, ...] = GATE_BASELINES
    confidence: float = Field(default=0.95, ge=0.5, lt=1.0)  # of the bound on plan / best baseline
    min_rounds: int = Field(default=5, ge=2, le=100)  # paired rounds the bound needs (--measure measures as many)
    # The sequential rule (dreamshard.gate.sequential): an early look after each early_rounds entry (rounds, increasing;
    # 0 or []: none) spends early_share of the error rate 1 - confidence; the first that approves or rejects is the
    # decision, and measuring stops there. Otherwise the final look (min_rounds or more) decides with the rest: at
    # confidence 0.95, 99% at rounds 3 and 4 and 97% final (Bonferroni: no decision is wrong more often than 5%,
    # whichever look makes it). Entries at or above min_rounds are no early looks. A single number: one look.
    early_rounds: tuple[int, ...] = (3, 4)
    early_share: float = Field(default=0.2, gt=0.0, lt=1.0)
    # Sequential rounds where the noise is high (dreamshard.gate.sequential): from min_rounds on, the gate's
    # comparison measures another round while the plan's or the deciding baseline's spread (max - min) / median over
    # its last min_rounds rounds is above target_spread, up to max_rounds; the final look then takes every round.
    target_spread: float = Field(default=0.03, gt=0.0, lt=1.0)
    max_rounds: int = Field(default=15, ge=2, le=100)
    # Each device of each plan timed this many times per round of the gate's comparison, its figure the median of
    # them (one interference burst moves one of them, not the median); planning measures once.
    timing_passes: int = Field(default=3, ge=1, le=9)
    # The clock of the gate comparison's CPU timings: "thread", the timing thread's CPU time (on cores shared with
    # other processes, what the operator ran, not how long it waited for a core; one intra-op thread only, else
    # wall), or "wall". Planning always times on the wall clock.
    timing_clock: Literal["thread", "wall"] = "thread"
    # A plan that would replace a current plan of the same job beats it only by more than the move costs (its moved
    # weights and optimizer state sent once, dreamshard.placement.diff) spread over this many training steps; 0:
    # moves are free (dreamshard.gate.current).
    move_horizon_steps: int = Field(default=10000, ge=0, le=10**9)
    allow_simulated: bool = False  # may a plan whose costs come from the simulator become current?
    # May a plan for other devices than the measuring backend's (a cuda job gated from a cpu host) be decided on that
    # backend's timings, as a labelled proxy? Its UVM tables are then timed with the fused kernel, their memory
    # counted at the cache's HBM share, and the decision says so (dreamshard.gate.checks.proxy_basis).
    allow_proxy: bool = False
    require_human: bool = False
    approval_timeout_s: int = Field(default=3600, ge=1, le=7 * 24 * 3600)
    store_uri: str = "runs/plan-store"

    @field_validator("baselines")
    @classmethod
    def _baselines(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        return check_baselines(v)

    @field_validator("early_rounds", mode="before")
    @classmethod
    def _early(cls, v: Any) -> Any:
        if isinstance(v, bool):
            raise ValueError("early_rounds is a number of rounds or a list of them, not true/false")
        if isinstance(v, int):
            return () if v == 0 else (v,)
        return v

    @field_validator("early_rounds")
    @classmethod
    def _early_looks(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        for r in v:
            if r < 2:
                raise ValueError(
                    f"an early look at {r} round(s) cannot bound the noise (fewer than 2 rounds have "
                    f"no spread): use 0 (no early look) or rounds of at least 2"
                )
            if r > 99:
                raise ValueError(f"an early look at {r} rounds: at most 99")
        if any(b <= a for a, b in pairwise(v)):
            raise ValueError(f"early_rounds {list(v)}: each look needs more rounds than the one before")
        return v

    @field_validator("early_share")
    @classmethod
    def _one_budget(cls, v: float, info: ValidationInfo) -> float:
        """Every early look spends early_share of the error rate: they must leave the final look a share."""
        below = [r for r in info.data.get("early_rounds", ()) if r < info.data.get("min_rounds", 5)]
        if len(below) * v >= 1.0:
            raise ValueError(
                f"{len(below)} early looks x early_share {v:g} spend the whole error budget: the final "
                f"look needs a share (fewer early_rounds, or a smaller early_share)"
            )
        return v

    @field_validator("max_rounds")
    @classmethod
    def _cap(cls, v: int, info: ValidationInfo) -> int:
        least = info.data.get("min_rounds", 5)
        if v < least:
            raise ValueError(f"max_rounds {v} is below min_rounds {least}: the final look needs min_rounds rounds")
        return v

    @property
    def early_round_list(self) -> tuple[int, ...]:
        """The early looks' rounds (model_copy may set early_rounds to a number unvalidated: read it as one)."""
        v: Any = self.early_rounds
        if isinstance(v, int):
            return () if v == 0 else (v,)
        return tuple(v)


def check_baselines(names: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """Known baseline sharders (BASELINE_SHARDERS), each once, TorchRec's planner among them."""
    unknown = [n for n in names if n not in BASELINE_SHARDERS]
    if unknown:
        raise ValueError(f"'{unknown[0]}' is not a baseline sharder (one of {', '.join(BASELINE_SHARDERS)})")
    if len(set(names)) != len(names):
        raise ValueError("a baseline is listed twice")
    if ALWAYS_REQUIRED not in names:
        raise ValueError(f"'{ALWAYS_REQUIRED}' (TorchRec's planner) is always a required baseline; add it back")
    return tuple(names)


def check_margin(min_improvement: float) -> float:
    if isinstance(min_improvement, bool) or not (0.0 <= min_improvement < 1.0) or math.isnan(min_improvement):
        raise ConfigError(f"min_improvement must be a fraction in [0, 1), got {min_improvement}")
    return float(min_improvement)
