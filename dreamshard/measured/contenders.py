"""Who the plan stage's race measures (docs/architecture/learning.md, "The race").

The default first: the search-only plan (the search's best predicted, or the best before calibration), or in a
re-plan the current plan's candidate; then the K best predicted candidates; then every registered heuristic's own
plan and TorchRec's planner's (`baseline_names`), each planned by the registry in milliseconds (TorchRec's planner:
up to seconds). One contender per distinct plan: a baseline whose plan another contender already is, is measured as
that one. A baseline that cannot plan the inventory (no room, a constraint its planner cannot honour, over memory)
is not measured and is listed with why (`Contenders.not_measured`), as is one the same as another contender.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace

from dreamshard.errors import InfeasiblePlacementError, PlanError
from dreamshard.evaluation.interleave import check_plan_for
from dreamshard.measured.duel import MEASURED_GAIN_MARGIN
from dreamshard.measured.outcome import SearchOutcome
from dreamshard.placement.expand import expand_plan
from dreamshard.sharders import BASELINE_SHARDERS, contender_names, get_sharder, options_for, sharder_family
from dreamshard.values import Inventory, Plan
from dreamshard.values.search_result import CURRENT, UNCALIBRATED, Candidate, origin

#: `VerifiedCandidate.role` of the search-only plan, a heuristic's own plan and TorchRec's planner's
SEARCH_ONLY, HEURISTIC, TORCHREC = "search only", "heuristic", "torchrec"


@dataclass(frozen=True)
class Contender:
    """One plan in the race: where it came from (a search candidate's source or a sharder's name), the plan, its
    pessimistic predicted overall cost, and its role (SEARCH_ONLY, HEURISTIC, TORCHREC; None: a learned candidate).
    `baseline`: a baseline's own plan, or a candidate that is the same plan (`plan_key`)."""

    source: str
    plan: Plan
    predicted_ms: float
    role: str | None = None
    baseline: bool = False

    @property
    def label(self) -> str:
        """Its name in progress lines and reports: `heuristic:dim_greedy`, `lpt+search (search only)`, `lpt+search`."""
        if self.role in (HEURISTIC, TORCHREC):
            return f"{self.role}:{self.source}"
        return f"{self.source} ({self.role})" if self.role else self.source

    @property
    def margin(self) -> float:
        """The gain it must show over the default in every round to replace it: a baseline's plan needs only to be
        faster (the gate compares the plan with those very baselines), any other MEASURED_GAIN_MARGIN."""
        return 0.0 if self.baseline else MEASURED_GAIN_MARGIN


@dataclass(frozen=True)
class Contenders:
    """The race's field, the default first; `hold`: the default is the current plan's candidate (a re-plan);
    `search_only`: the search-only plan's index; `not_measured`: {contender: why it is not in the race}."""

    items: tuple[Contender, ...]
    not_measured: dict[str, str]
    hold: bool
    search_only: int


def baseline_names() -> tuple[str, ...]:
    """Every registered heuristic and TorchRec's planner (its restricted variant left out), in registry order."""
    return tuple(n for n in contender_names() if sharder_family(n) in ("heuristic", "torchrec"))


def search_only_candidate(candidates: Sequence[Candidate]) -> Candidate:
    """The plan without measurement: the search's best predicted or, where the cost was calibrated first (a measured
    step, dreamshard.measured.calibrate), the best of the search before calibration (the UNCALIBRATED seed)."""
    return next((c for c in candidates if c.source == UNCALIBRATED), candidates[0])


def plan_key(inventory: Inventory, plan: Plan) -> str:
    """What makes two plans the same plan: which units share a device, with their kernels. On one flat host the
    devices are alike, so a plan with its devices renumbered is the same plan (it measures the same); across hosts
    where each unit is matters."""
    _, placement = expand_plan(inventory, plan)
    groups: list[list[str]] = [[] for _ in range(plan.topology.num_devices)]
    for unit, d in placement.items():
        groups[d].append(unit)
    devices = [sorted(g) for g in groups]
    if plan.topology.devices_per_host is None:
        devices.sort()
    extra = plan.model_dump(mode="json", include={"kernels", "cache_load_factors"})
    return json.dumps({"devices": devices, **extra}, sort_keys=True)


def contenders_for(found: SearchOutcome, k: int, seed: int = 0) -> Contenders:
    """The race's contenders for what the search `found` (module docstring); `k` best predicted candidates."""
    cands = found.searched.candidates
    default = search_only_candidate(cands)
    mine = next((c for c in cands if origin(c.source) == CURRENT), None)
    learned: list[Candidate] = []
    for c in (mine, default, *cands[:k]):
        if c is not None and all(c is not x for x in learned):
            learned.append(c)
    items: list[Contender] = []
    keys: dict[str, int] = {}
    search_only = 0
    for c in learned:
        plan = found.plan_of(c)
        key = plan_key(found.inventory, plan)
        at = keys.get(key)
        if at is None:  # a candidate placed as one already in is measured once
            at = keys[key] = len(items)
            items.append(Contender(c.source, plan, c.predicted_ms, baseline=c.source in BASELINE_SHARDERS))
        if c is default:
            search_only = at
            items[at] = replace(items[at], role=SEARCH_ONLY)
    not_measured: dict[str, str] = {}
    for name in baseline_names():
        role = TORCHREC if sharder_family(name) == "torchrec" else HEURISTIC
        label = f"{role}:{name}"
        try:
            plan = _baseline_plan(found, name, seed)
        except (InfeasiblePlacementError, PlanError) as e:
            not_measured[label] = str(e)
            continue
        key = plan_key(found.inventory, plan)
        at = keys.get(key)
        if at is not None:
            items[at] = replace(items[at], baseline=True)
            not_measured[label] = f"the same plan as {items[at].label} (measured as it)"
            continue
        keys[key] = len(items)
        items.append(Contender(name, plan, _predicted_ms(found, plan), role, baseline=True))
    return Contenders(tuple(items), not_measured, hold=mine is not None, search_only=search_only)


def _baseline_plan(found: SearchOutcome, name: str, seed: int) -> Plan:
    """Sharder `name`'s own plan of the inventory, as the plan stage's (the searching sharder's label, the model's
    version and records, the learned cost's prediction); PlanError or InfeasiblePlacementError when it has none."""
    inv, topo = found.inventory, found.topology
    limit = found.torchrec_max_tables
    if sharder_family(name) == "torchrec" and limit is not None and inv.num_tables > limit:
        raise PlanError(f"skipped: {inv.num_tables} tables > search.torchrec_max_tables {limit} (planning-time budget)")
    plan = get_sharder(name, **options_for(name, {"seed": seed})).shard(inv, topo)
    check_plan_for(inv, plan, topo)
    base = found.plan
    units, placement = expand_plan(inv, plan)
    carried = ("model_version", "out_of_range", "comm_fits", "calibration", "assumptions")
    return plan.model_copy(
        update={
            "sharder": base.sharder,
            "predicted": found.cost.predict(list(units.tables), placement),
            **{k: getattr(base, k) for k in carried},
        }
    )


def _predicted_ms(found: SearchOutcome, plan: Plan) -> float:
    """The plan's pessimistic predicted overall cost (the search's objective)."""
    units, placement = expand_plan(found.inventory, plan)
    return found.cost.predict(list(units.tables), placement, pessimistic=True).overall_ms
