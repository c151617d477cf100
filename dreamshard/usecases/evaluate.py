"""Measuring plans: one plan on the backend (`dreamshard evaluate`), and plans of several sharders measured
interleaved in one run (`dreamshard compare`, the `evaluate` stage: the plan vs every contender of the
`evaluate` section, on the plan's topology). Settings: profile (backend, repeats, seed), evaluate (contenders,
rounds), plan (samples of the learned contenders), topology."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from dreamshard.config.settings import Settings
from dreamshard.errors import ConfigError
from dreamshard.evaluation import compare_sharders, evaluate_plan, validate_sharders
from dreamshard.evaluation.compare import Comparison, contender_name
from dreamshard.gate.incumbent import incumbent_for
from dreamshard.gate.sequential import gate_rounds, stop_rule
from dreamshard.profiling.corpus import DeviceCorpus
from dreamshard.usecases.base import Request, Result
from dreamshard.usecases.explain import stats_of
from dreamshard.usecases.plan import sharder_options
from dreamshard.usecases.sharders import expand, heuristics
from dreamshard.values import BackendInfo, Inventory, Plan, Topology
from dreamshard.values.reports import PlanStats

CORPUS_WRITER = "evaluate"  # this use case's file in the measurement corpus (the lower bound's singles)


class MeasureRequest(Request):
    inventory: Inventory
    plan: Plan
    stats: bool = False  # the stats report (measured shares beside the learned model's predicted ones)
    model: Path | None = None  # the model whose learned cost predicts the stats (default: settings.model_dir's)


class MeasureResult(Result):
    plan: Plan
    backend: BackendInfo
    inventory: Inventory | None = None  # the plan's inventory (its memory breakdown is the door's to show)
    stats: PlanStats | None = None


def measure(request: MeasureRequest) -> MeasureResult:
    """One plan measured `evaluate.rounds` times on the profile backend (medians)."""
    inv, plan = request.inventory, request.plan
    oracle = request.settings.oracle()
    try:
        measured = evaluate_plan(inv, plan, oracle, rounds=request.settings.evaluate.rounds)
        info = oracle.info
    finally:
        oracle.close()
    stats = stats_of(inv, measured, request.model) if request.stats else None
    return MeasureResult(plan=measured, backend=info, inventory=inv, stats=stats)


class CompareRequest(Request):
    inventory: Inventory
    sharders: tuple[str, ...] | None = None  # None: evaluate.sharders less the sharders of `plans`
    sharder_spec: str | None = None  # a comma list, 'heuristics' or 'all' (wins over `sharders`)
    heuristics_by_default: bool = False  # no spec and no params file read: the heuristics
    plans: tuple[Plan, ...] = ()  # plans measured beside the sharders' (the evaluate stage: data/plan.json)
    # the incumbent (`plans incumbent`): the plan current now, measured as the contender `current` when it can
    # serve this inventory's job and places otherwise (the publish gate requires it then: gate.current)
    current: Plan | None = None
    num_devices: int | None = None  # None with plans: the first plan's topology; else the job's (or the params')
    model: Path | None = None
    corpus: Path | None = None  # the lower bound's single-table timings from/to this corpus (contenders: always fresh)


class CompareResult(Result):
    comparison: Comparison


def repeated_plan(plans: Sequence[Plan]) -> tuple[int, int] | None:
    """(i, j), j < i: the first plan given that repeats an earlier one (the same plan id or contender label); None
    when each is a different plan."""
    ids: dict[str, int] = {}
    labels: dict[str, int] = {}
    for i, plan in enumerate(plans):
        j = ids.setdefault(plan.plan_id, i)
        j = j if j != i else labels.setdefault(contender_name(plan.sharder, plan.plan_id, True), i)
        if j != i:
            return i, j
    return None


def check_distinct_plans(plans: Sequence[Plan]) -> None:
    """ConfigError unless every plan given is a different plan. A plan measured twice would make a comparison that
    lists one plan twice, which the publish gate refuses as forged."""
    if (pair := repeated_plan(plans)) is not None:
        i, j = pair
        raise ConfigError(
            f"plans #{i + 1} and #{j + 1} both hold plan {plans[i].plan_id} ({plans[i].sharder}); give each plan once"
        )


def contenders(settings: Settings, plans: list[Plan]) -> list[str]:
    """The evaluate section's contenders; a plan given stands for its own sharder (measured once, as itself)."""
    made = {p.sharder for p in plans}
    return [s for s in settings.evaluate.contenders() if s not in made]


def contender_names(request: CompareRequest) -> list[str]:
    """The sharders whose plans are measured: the spec, else the names given, else the heuristics (without a params
    file, when asked) or the evaluate section's contenders (less the sharders of the plans given)."""
    if request.sharder_spec is not None:
        return expand(request.sharder_spec)
    if request.sharders is not None:
        return validate_sharders(list(request.sharders))
    if request.heuristics_by_default and request.settings.source is None:
        return validate_sharders(heuristics())
    return validate_sharders(contenders(request.settings, list(request.plans)))


def _topology(request: CompareRequest, inv: Inventory, plans: Sequence[Plan]) -> Topology:
    """What the contenders are measured on: the first plan's topology, else `num_devices`, else the job the inventory
    records (unless the caller said otherwise: dreamshard.config.job)."""
    s = request.settings
    if plans and request.num_devices is None:
        told = s.world.world()
        if any(k.startswith("world.") for k in s.told) and told != plans[0].topology.world:
            planned = plans[0].topology.world
            raise ConfigError(
                f"--world {told.name if told else 'none'}: plan {plans[0].plan_id} was planned for "
                f"{f'world {planned.name}' if planned else 'no declared world'}, and compare charges the world a plan "
                f"was planned for: re-plan it in that world (plan --world ...)"
            )
        return plans[0].topology
    if request.num_devices is not None:  # told: as --devices
        plan = s.plan.model_copy(update={"num_devices": request.num_devices})
        s = s.model_copy(update={"plan": plan, "told": s.told | {"plan.num_devices"}})
    return s.topology_for_job(inv.job)


def current_rival(current: Plan | None, inv: Inventory, topology: Topology, plans: Sequence[Plan]) -> Plan | None:
    """The incumbent's contender as the gate weighs it (`gate.incumbent.incumbent_for`): the current plan as a plan
    of this version (`current`) when it serves the job, else its extension to it (`current+new`); None when none was
    current, neither is possible, or one of `plans` places as it does."""
    if current is None:
        return None
    rival = incumbent_for(inv.name, current.plan_id, current, None, inv, topology).contender
    if rival is None or any(p.units() == rival.units() for p in plans):
        return None
    return rival


def run(request: CompareRequest, progress: Callable[[str], None] | None = None) -> CompareResult:
    """The plans of the contenders (and the plans given, and the incumbent when it can serve) measured
    interleaved on the profile backend: the comparison (writing it is the door's: `compare_files`)."""
    s = request.settings
    check_distinct_plans(request.plans)
    extra = list(request.plans)
    names = contender_names(request)
    inv = request.inventory
    topo = _topology(request, inv, extra)
    rival = current_rival(request.current, inv, topo, extra)
    seed = s.profile.seed
    options = {name: sharder_options(name, s, request.model, seed) for name in names}
    oracle = s.oracle()
    corpus = DeviceCorpus(request.corpus, CORPUS_WRITER) if request.corpus is not None else None
    # one plan to judge: measuring ends where the publish gate's sequential rule decides on it, and goes on past
    # evaluate.rounds (up to publish.max_rounds) while the spreads are high; its devices timed publish.timing_passes
    gated = s.evaluate.stop_early and len(extra) == 1
    stop = stop_rule(s.publish, extra[0].plan_id, s.evaluate.rounds) if gated else None
    try:
        cmp = compare_sharders(
            inv,
            topo,
            names,
            oracle,
            rounds=gate_rounds(s.publish, s.evaluate.rounds) if gated else s.evaluate.rounds,
            sharder_options=options,
            progress=progress,
            seed=seed,
            extra_plans=[*extra, rival] if rival is not None else extra,
            corpus=corpus,
            stop=stop,
            timing_passes=s.publish.timing_passes if gated else 1,
            timing_clock=s.publish.timing_clock if gated else "wall",
        )
    finally:
        oracle.close()
    return CompareResult(comparison=cmp)
