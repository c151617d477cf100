"""The gate's doors into the library: a trusted plan (`gate.trust.trust_plan`) verified and decided on a comparison
(`gate_plan`) or on the gate's own measurement (`measure_and_gate`), beside every required baseline and the
incumbent (`gate.incumbent`), every contender charged its moves from the current plan (`gate.moves`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dreamshard.config.publish import PublishConfig, check_baselines, check_margin
from dreamshard.errors import ConfigError, PlanError
from dreamshard.evaluation import Comparison, compare_sharders
from dreamshard.gate.checks import Verified, check_backend, verify_comparison
from dreamshard.gate.current import current_samples
from dreamshard.gate.incumbent import Incumbent
from dreamshard.gate.moves import MoveCharge, charged_clause, move_charges, relative, uncharged_ratio
from dreamshard.gate.references import baseline_references
from dreamshard.gate.rule import evaluate_gate
from dreamshard.gate.sequential import decides_early, early_looks, gate_rounds, looks, stop_rule
from dreamshard.gate.trust import TrustedPlan
from dreamshard.values import Inventory, Plan
from dreamshard.values.decision import GateDecision
from dreamshard.values.progress import Progress

if TYPE_CHECKING:  # pragma: no cover
    from dreamshard.profiling import Oracle

#: The judged plan's own label among the move charges.
JUDGED = "this plan"


@dataclass(frozen=True)
class Judgement:
    """What the gate decided on a trusted plan, with what it decided on: the verified comparison, every other
    contender's plan and per-round figures (charged their moves relative to the judged plan's: `gate.moves`) by
    label, the judged plan's own figures, and each contender's move from the current plan (`JUDGED`: the plan's)."""

    plan: Plan  # the judged plan, carrying the comparison's measured costs and backend
    decision: GateDecision
    comparison: Comparison
    inventory: Inventory
    plan_samples: list[float]
    samples: dict[str, list[float]] = field(default_factory=dict)
    plans: dict[str, Plan] = field(default_factory=dict)
    charges: dict[str, MoveCharge] = field(default_factory=dict)


def required_baselines(rules: PublishConfig, extra: Sequence[str] = ()) -> tuple[str, ...]:
    """publish.baselines plus what the publisher added (`--sharders`): the set can grow, never shrink."""
    try:
        return check_baselines(tuple(dict.fromkeys((*rules.baselines, *extra))))
    except ValueError as e:
        raise ConfigError(f"the publisher's added baselines: {e}") from None


def _check_simulated(simulated: bool, rules: PublishConfig, source: str) -> None:
    if simulated and not rules.allow_simulated:
        raise ConfigError(
            f"{source} is simulated (backend simulator): a plan whose only basis is the simulator "
            f"becomes current only when asked (publish.allow_simulated)"
        )


def _evidence(source: str, comparison: Comparison, proxy: str, device_type: str) -> str:
    """Where the decision's figures come from: the comparison, its rounds, backend and world, labelled when simulated
    or a proxy for `device_type` devices or for the plan's world."""
    b = comparison.backend
    world = comparison.world.name if comparison.world is not None else "unrecorded"
    return (
        f"{source}: {comparison.rounds} interleaved round(s) on {b.name}/{b.operator}"
        + (" (SIMULATED)" if b.is_simulated else "")
        + (f" (PROXY for {device_type} devices)" if proxy else "")
        + f", world {world}"
        + (" (PROXY for the plan's world)" if comparison.world_proxy else "")
        + f", {comparison.created_at:%Y-%m-%d %H:%M:%S}"
    )


def _judged(plan: Plan, comparison: Comparison, entry: Plan) -> Plan:
    """The judged plan with the comparison's measured costs, backend and world (its note: the world proxy, if any)."""
    world = comparison.world
    if world is not None:
        world = world.model_copy(update={"note": comparison.world_proxy or world.note})
    return plan.model_copy(update={"measured": entry.measured, "measured_by": comparison.backend, "world": world})


def _rival(incumbent: Incumbent | None, plan: Plan) -> Plan | None:
    """The incumbent's contender when it places otherwise than the judged plan (else nothing to measure apart)."""
    contender = incumbent.contender if incumbent is not None else None
    return contender if contender is not None and contender.units() != plan.units() else None


def _contenders(
    v: Verified, comparison: Comparison, rival: Plan | None, source: str
) -> tuple[dict[str, list[float]], dict[str, Plan]]:
    """Each contender's per-round samples and plan: the verified baselines', and the incumbent's rival when the
    store has one (measured in the same comparison)."""
    samples = {n: list(r.samples_ms) for n, r in v.baselines.items()}
    plans = {n: r.plan for n, r in v.baselines.items()}
    if rival is not None:
        samples[rival.sharder] = current_samples(comparison, v.entry, rival, source)
        plans[rival.sharder] = rival
    return samples, plans


def gate_plan(
    trusted: TrustedPlan,
    comparison: Comparison,
    rules: PublishConfig,
    *,
    extra_baselines: Sequence[str] = (),
    seed: int = 0,
    backend: str | None = None,
    source: str = "comparison",
    incumbent: Incumbent | None = None,
) -> Judgement:
    """Verify the comparison for the trusted plan, then decide on its per-round samples.

    The judged plan carries the comparison's measured costs and backend, not the file's. PlanError / ConfigError
    (nothing to store: the input is wrong) when verification fails; a verified plan that is too slow is a
    rejection, one as fast as its baseline within publish.equivalence_margin is equivalent, one inside the noise is
    inconclusive. The decision is the sequential rule's (`gate.sequential`). `incumbent`: what the store's current
    plan is for this version; its contender (the current plan, or its extension) must be measured in the comparison
    too and counts as one more contender, and every contender is charged its moves from the current plan."""
    margin = check_margin(rules.min_improvement)
    required = required_baselines(rules, extra_baselines)
    plan, inventory = trusted.plan, trusted.inventory
    early = early_looks(rules)
    v = verify_comparison(
        plan,
        inventory,
        comparison,
        required=required,
        seed=seed,
        min_rounds=early[0].rounds if early else rules.min_rounds,
        full_rounds=rules.min_rounds,
        backend=backend,
        source=source,
        allow_proxy=rules.allow_proxy,
    )
    samples, plans = _contenders(v, comparison, _rival(incumbent, plan), source)
    moved_from = incumbent.plan if incumbent is not None else None
    charges = move_charges(moved_from, {JUDGED: plan, **plans}, inventory, rules.move_horizon_steps)
    own = charges[JUDGED].per_step_ms if JUDGED in charges else 0.0
    against = {n: relative(x, charges[n].per_step_ms if n in charges else 0.0, own) for n, x in samples.items()}
    if comparison.rounds < rules.min_rounds and not decides_early(rules, v.entry.samples_ms, against):
        raise PlanError(
            f"{source} has {comparison.rounds} round(s), and the sequential rule's early looks on them "
            f"decide nothing: the gate needs {rules.min_rounds} paired rounds (publish.min_rounds) to "
            f"tell a faster plan from noise: measure {rules.min_rounds} rounds (evaluate.rounds)"
        )
    b = comparison.backend
    _check_simulated(b.is_simulated, rules, source)
    judged = _judged(plan, comparison, v.entry.plan)
    decision = evaluate_gate(
        judged,
        against,
        margin,
        plan_samples=v.entry.samples_ms,
        confidence=rules.confidence,
        infeasible=tuple(v.infeasible),
        looks=looks(rules, comparison.rounds),
        equivalence=rules.equivalence_margin,
    )
    refs = baseline_references(comparison, v.infeasible, required, v.entry.overall_ms)
    extra = f" [{len(plan.out_of_range)} input(s) outside the model's training ranges]" if plan.out_of_range else ""
    proxies = tuple(p for p in (v.proxy, comparison.world_proxy) if p)  # devices, then the plan's world
    for clause in (charged_clause(charges, JUDGED, rules.move_horizon_steps), *proxies, *(r.said for r in refs)):
        extra += f"; {clause}" if clause else ""
    decision = decision.revised(
        inventory_fingerprint=inventory.fingerprint(),
        evidence=_evidence(source, comparison, v.proxy, plan.topology.device_type),
        reason=decision.reason + extra,
        finding=decision.finding + extra,
        proxy="; ".join(proxies),
        references=refs,
        uncharged_ratio=uncharged_ratio(v.entry.samples_ms, samples, decision.best_baseline, charges),
        world=comparison.world.describe() if comparison.world is not None else "",
    )
    return Judgement(judged, decision, comparison, inventory, list(v.entry.samples_ms), against, plans, charges)


def measure_and_gate(
    trusted: TrustedPlan,
    oracle: Oracle,
    rules: PublishConfig,
    *,
    extra_baselines: Sequence[str] = (),
    rounds: int = 5,
    seed: int = 0,
    sharder_options: Mapping[str, Mapping[str, Any]] | None = None,
    incumbent: Incumbent | None = None,
    progress: Progress | None = None,
) -> Judgement:
    """The gate measures for itself: the trusted plan, every required baseline's plan and the incumbent's
    contender, interleaved on `oracle`'s backend, max(rounds, publish.min_rounds) rounds (fewer when the sequential
    rule's early look decides, more up to publish.max_rounds while the spreads are above publish.target_spread),
    then `gate_plan` on that comparison. The backend is checked against the plan's devices before anything is
    measured. Nothing but the plan's placement is taken from the user; its sharder label removes no baseline.
    `progress` gets a line per contender planned and per round measured."""
    check_margin(rules.min_improvement)
    names = required_baselines(rules, extra_baselines)
    plan = trusted.plan
    _check_simulated(oracle.info.is_simulated, rules, "the gate's measurement")
    check_backend(oracle.info, plan, None, "the gate's measurement", rules.allow_proxy)  # before any measuring
    options = {**(sharder_options or {}), "random": {"seed": seed}}
    rival = _rival(incumbent, plan)
    asked = max(rounds, rules.min_rounds)
    cmp = compare_sharders(
        trusted.inventory,
        plan.topology,
        list(names),
        oracle,
        rounds=gate_rounds(rules, asked),
        sharder_options=options,
        seed=seed,
        extra_plans=(plan,) if rival is None else (plan, rival),
        with_lower_bound=False,
        stop=stop_rule(rules, plan.plan_id, asked),
        timing_passes=rules.timing_passes,
        timing_clock=rules.timing_clock,
        progress=progress,
    )
    return gate_plan(
        trusted,
        cmp,
        rules,
        extra_baselines=extra_baselines,
        seed=seed,
        source="measured by the gate",
        incumbent=incumbent,
    )
