"""What the gate decides for one plan (`GateDecision`), and the outcomes it can reach: a value the gate produces
and the store, the use cases and the doors carry (dreamshard.gate decides; it lives here so that no package below
the gate imports it)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from dreamshard.values.costs import CostBasis
from dreamshard.values.ids import utcnow
from dreamshard.values.tables import renamed_fields

#: What the gate can decide: approved (becomes current), rejected (clearly not good enough), equivalent (as fast as
#: the deciding baseline within publish.equivalence_margin, beyond the noise: the current plan stays) or
#: inconclusive (the measurements cannot tell it from the best baseline: the current plan stays). The last three
#: are stored under rejected/ with this field saying which. `fallback` is the decision on a *baseline's* plan: the
#: plan the gate judged was rejected and the current plan cannot serve the new version (another table schema or
#: topology), so the best baseline, measured in the same interleaved rounds, becomes current instead
#: (`gate.fallback`).
Outcome = Literal["approved", "rejected", "equivalent", "inconclusive", "fallback"]
#: The outcomes that make a plan current.
CURRENT_OUTCOMES: tuple[str, ...] = ("approved", "fallback")
#: The outcomes that leave a current plan current when one can serve the job, and make the plan current when none
#: can (dreamshard.gate.publish_policy): the gate found no gain worth a change, or could not tell.
UNDECIDED: tuple[str, ...] = ("inconclusive", "equivalent")


class BaselineReference(BaseModel):
    """A required baseline that cannot honour a constraint of the version (TorchRec's planner and a device pin, a
    shard count, or a sharding type it does not offer on these devices): never a contender, but never silently
    absent either. Its plan of what it can express is measured in the same rounds and shown beside the decision."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    breaks: str  # "table 'ad' devices [3]: the plan puts it on device 0"
    overall_ms: float | None = None  # its expressible plan, measured with the others (None: the comparison lacks it)
    ratio: float | None = None  # the judged plan's median over its median

    @property
    def said(self) -> str:
        """The reference in words, for a decision's reason and every surface that shows it."""
        head = f"{self.name} cannot honour {self.breaks}"
        if self.overall_ms is None:
            return f"{head}; its plan without that constraint was not measured"
        ratio = f" (this plan x{self.ratio:.3f})" if self.ratio is not None else ""
        return f"{head}; its plan without that constraint measured {self.overall_ms:.4g} ms{ratio}, shown, not compared"


class GateDecision(BaseModel):
    """The outcome of the gate for one plan, with the figures and the statistics behind it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    approved: bool
    reason: str  # the whole sentence: what the measurements show, then what follows from it
    # what the measurements show, without what follows (`rule.finding`); the publish policy (`policy.py`) adds its
    # own consequence to it. Empty in records written before it, and for refusals that need no figures.
    finding: str = ""
    outcome: Outcome = "rejected"  # filled in from `approved` for records written before it
    plan_id: str = ""
    plan_cost_ms: float | None = None
    best_baseline: str | None = None  # the fastest baseline (lowest median)
    best_baseline_ms: float | None = None
    improvement: float | None = None  # (best - plan) / best on the medians; positive = plan is faster
    min_improvement: float = 0.0
    basis: CostBasis | None = None
    inventory_fingerprint: str = ""  # the inventory the plan was verified against
    evidence: str = ""  # where the costs come from (comparison file + sha256, or the gate's own measurement)
    baselines: tuple[str, ...] = ()  # every baseline the plan was measured against (each verified)
    infeasible: tuple[str, ...] = ()  # required baselines that cannot place the inventory (recomputed by the gate)
    # required baselines that cannot honour a constraint, each with its plan of what it can express as measured
    references: tuple[BaselineReference, ...] = ()
    rounds: int | None = None  # paired rounds behind the bound
    confidence: float | None = None
    ratio: float | None = None  # plan / best baseline: geometric mean of the per-round ratios
    ratio_low: float | None = None  # confidence bounds of that ratio (the decisive baseline's, see `decided_by`)
    ratio_high: float | None = None
    # plan / best baseline as measured, before moves from the current plan were charged (what a drift check
    # re-measures); None: nothing was charged, `ratio` is that figure
    uncharged_ratio: float | None = None
    interval_width: float | None = None  # ratio_high - ratio_low (0.06: 6 points); None in records written before it
    decided_by: str | None = None  # the baseline whose bound decided (the hardest one to beat)
    stopped_early: bool = False  # decided at one of the sequential rule's early looks (publish.early_rounds)
    # what became of the plan, where the outcome alone would mislead: "current: first plan, inconclusive" (the
    # gate could not tell it from the best baseline, and nothing was current to keep); "" = the outcome says it
    label: str = ""
    # what stood in for the plan's devices when the gate measured on another device type (publish.allow_proxy,
    # dreamshard.gate.checks.proxy_basis); "" = measured on the plan's own device type or the simulator
    proxy: str = ""
    # the world the gate's figures charged the collectives in (dreamshard.values.world.ChargedWorld.describe); a
    # world other than the plan's is also a PROXY sentence in `proxy`; "" in records written before it
    world: str = ""
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

    @property
    def shown(self) -> str:
        """The word every surface shows for the decision (`plans list`, the decision artifact, the flow log)."""
        return self.label or self.outcome

    def revised(self, **fields: Any) -> GateDecision:
        """The same decision with `fields` changed, validated again (approved and outcome must still agree)."""
        return GateDecision.model_validate({**self.model_dump(), **fields})

    def overruled(self, reason: str) -> GateDecision:
        """The same decision turned into a rejection (a reviewer said no, or nobody answered)."""
        return self.revised(approved=False, outcome="rejected", label="", reason=reason)
