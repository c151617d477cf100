"""The `publish` section of params.yaml (`PublishConfig`) and what the gate decides (`GateDecision`)."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from dreamshard.errors import ConfigError
from dreamshard.sharders import BASELINE_SHARDERS
from dreamshard.types import CostBasis, renamed_fields, utcnow

#: Kept for callers that import the name from here.
Basis = CostBasis
#: What the gate can decide: approved (becomes current), rejected (clearly not good enough) or inconclusive (the
#: measurements cannot tell it from the best baseline: the current plan stays). The last two are stored under
#: rejected/ with this field saying which. `fallback` is the decision on a *baseline's* plan: the plan the gate
#: judged was rejected and the current plan cannot serve the new version (another table schema or topology), so
#: the best baseline, measured in the same interleaved rounds, becomes current instead (`gate.fallback`).
Outcome = Literal["approved", "rejected", "inconclusive", "fallback"]
#: The outcomes that make a plan current.
CURRENT_OUTCOMES: tuple[str, ...] = ("approved", "fallback")
#: TorchRec's planner: always a required baseline (what users would run without dreamshard).
ALWAYS_REQUIRED = "torchrec"
#: The baselines the gate measures by default: what a team would deploy without dreamshard (TorchRec's planner and
#: the greedy heuristics). `random` and `round_robin` stay report references (compare, the evaluate stage; a
#: comparison holding them still counts them, `--sharders` adds them): no team deploys either, each extra baseline
#: is one more bound that noise can make straddle (a gate on the 120-table pool once found random "best" by noise),
#: and they were 2 of the gate's 8 measured plans, a quarter of its time.
GATE_BASELINES: tuple[str, ...] = ("dim_greedy", "size_greedy", "lookup_greedy", "size_lookup_greedy", ALWAYS_REQUIRED)


class GateDecision(BaseModel):
    """The outcome of the gate for one plan, with the figures and the statistics behind it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    approved: bool
    reason: str
    outcome: Outcome = "rejected"  # filled in from `approved` for records written before it
    plan_id: str = ""
    plan_cost_ms: float | None = None
    best_baseline: str | None = None  # the fastest baseline (lowest median)
    best_baseline_ms: float | None = None
    improvement: float | None = None  # (best - plan) / best on the medians; positive = plan is faster
    min_improvement: float = 0.0
    basis: Basis | None = None
    inventory_fingerprint: str = ""  # the inventory the plan was verified against
    evidence: str = ""  # where the costs come from (comparison file + sha256, or the gate's own measurement)
    baselines: tuple[str, ...] = ()  # every baseline the plan was measured against (each verified)
    infeasible: tuple[str, ...] = ()  # required baselines that cannot place the inventory (recomputed by the gate)
    rounds: int | None = None  # paired rounds behind the bound
    confidence: float | None = None
    ratio: float | None = None  # plan / best baseline: geometric mean of the per-round ratios
    ratio_low: float | None = None  # confidence bounds of that ratio (the decisive baseline's, see `decided_by`)
    ratio_high: float | None = None
    decided_by: str | None = None  # the baseline whose bound decided (the hardest one to beat)
    stopped_early: bool = False  # decided at one of the sequential rule's early looks (publish.early_rounds)
    checked_at: datetime = Field(default_factory=utcnow)

    @model_validator(mode="before")
    @classmethod
    def _old_names(cls, data: Any) -> Any:  # records written before the rename say best_heuristic
        data = renamed_fields(data, {"best_heuristic": "best_baseline", "best_heuristic_ms": "best_baseline_ms"})
        if isinstance(data, dict) and "outcome" not in data and isinstance(data.get("approved"), bool):
            data = {**data, "outcome": "approved" if data["approved"] else "rejected"}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> GateDecision:
        if self.approved != (self.outcome in CURRENT_OUTCOMES):
            raise ValueError(f"decision says approved={self.approved} but outcome '{self.outcome}'")
        return self

    def overruled(self, reason: str) -> GateDecision:
        """The same decision turned into a rejection (a reviewer said no, or nobody answered)."""
        return GateDecision.model_validate({**self.model_dump(), "approved": False, "outcome": "rejected",
                                            "reason": reason})


class PublishConfig(BaseModel):
    """The `publish` section of params.yaml: the gate's rules and where plans are stored."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    min_improvement: float = Field(default=0.0, ge=0.0, lt=1.0)
    # Baselines every plan is measured against (a --comparison must hold each of them; `plans publish --sharders`
    # adds, never removes). TorchRec's planner is always one of them.
    baselines: tuple[str, ...] = GATE_BASELINES
    confidence: float = Field(default=0.95, ge=0.5, lt=1.0)  # of the bound on plan / best baseline
    min_rounds: int = Field(default=5, ge=2, le=100)  # paired rounds the bound needs (--measure measures as many)
    # The sequential rule (gate/sequential.py): an early look after each early_rounds entry (rounds, increasing;
    # 0 or []: none) spends early_share of the error rate 1 - confidence; the first that approves or rejects is the
    # decision, and measuring stops there. Otherwise the final look (min_rounds or more) decides with the rest: at
    # confidence 0.95, 99% at rounds 3 and 4 and 97% final (Bonferroni: no decision is wrong more often than 5%,
    # whichever look makes it). Entries at or above min_rounds are no early looks. A single number: one look.
    early_rounds: tuple[int, ...] = (3, 4)
    early_share: float = Field(default=0.2, gt=0.0, lt=1.0)
    allow_simulated: bool = False  # may a plan whose costs come from the simulator become current?
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
                raise ValueError(f"an early look at {r} round(s) cannot bound the noise (fewer than 2 rounds have "
                                 f"no spread): use 0 (no early look) or rounds of at least 2")
            if r > 99:
                raise ValueError(f"an early look at {r} rounds: at most 99")
        if any(b <= a for a, b in zip(v, v[1:])):
            raise ValueError(f"early_rounds {list(v)}: each look needs more rounds than the one before")
        return v

    @field_validator("early_share")
    @classmethod
    def _one_budget(cls, v: float, info: ValidationInfo) -> float:
        """Every early look spends early_share of the error rate: they must leave the final look a share."""
        below = [r for r in info.data.get("early_rounds", ()) if r < info.data.get("min_rounds", 5)]
        if len(below) * v >= 1.0:
            raise ValueError(f"{len(below)} early looks x early_share {v:g} spend the whole error budget: the final "
                             f"look needs a share (fewer early_rounds, or a smaller early_share)")
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
