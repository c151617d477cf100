"""The gate's doors into the library: a plan file taken by its authorities (`gate.trust`), verified and decided on a
comparison (`gate_plan`) or on the gate's own measurement (`measure_and_gate`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from dreamshard.config.publish import PublishConfig, check_baselines, check_margin
from dreamshard.errors import ConfigError, PlanError
from dreamshard.evaluation import Comparison, compare_sharders
from dreamshard.gate.checks import verify_comparison, verify_plan
from dreamshard.gate.current import CURRENT, current_samples, less_the_move
from dreamshard.gate.rule import evaluate_gate
from dreamshard.gate.sequential import decides_early, early_looks, gate_rounds, looks, stop_rule
from dreamshard.gate.trust import bound_to_inventory, check_topology, trusted_plan
from dreamshard.values import Inventory, Plan, Topology
from dreamshard.values.decision import GateDecision

if TYPE_CHECKING:  # pragma: no cover
    from dreamshard.profiling import Oracle


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
    """Where the decision's figures come from: the comparison, its rounds and backend, labelled when simulated or a
    proxy for `device_type` devices."""
    b = comparison.backend
    return (
        f"{source}: {comparison.rounds} interleaved round(s) on {b.name}/{b.operator}"
        + (" (SIMULATED)" if b.is_simulated else "")
        + (f" (PROXY for {device_type} devices)" if proxy else "")
        + f", {comparison.created_at:%Y-%m-%d %H:%M:%S}"
    )


def gate_plan(
    plan: Plan,
    inventory: Inventory,
    comparison: Comparison,
    rules: PublishConfig,
    *,
    extra_baselines: Sequence[str] = (),
    seed: int = 0,
    backend: str | None = None,
    source: str = "comparison",
    topology: Topology | None = None,
    current: Plan | None = None,
) -> tuple[Plan, GateDecision]:
    """Verify `plan` against `inventory` and `comparison`, then decide on the comparison's per-round samples.

    Returns the plan to store (carrying the comparison's measured costs and backend, not the file's) and the
    decision. Raises PlanError / ConfigError (nothing to store: the input is wrong) when verification fails; a
    verified plan that is too slow is a rejection, one as fast as its baseline within publish.equivalence_margin is
    equivalent, one inside the noise is inconclusive (approved=False all three).
    The decision is the sequential rule's (`gate.sequential`): fewer than publish.min_rounds rounds are enough
    only when its early look decides on them. `topology`: the one the request plans for (default: the job the
    inventory records, `gate.trust.check_topology`). `current`: the store's current plan when it can serve this job
    and places otherwise; the comparison must measure it too, and it counts as one more baseline, `current`
    (`gate.current`).
    """
    margin = check_margin(rules.min_improvement)
    required = required_baselines(rules, extra_baselines)
    plan = trusted_plan(plan)
    verify_plan(plan, inventory)
    plan = bound_to_inventory(plan, inventory)
    check_topology(plan, inventory, topology)
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
    against = {n: list(r.samples_ms) for n, r in v.baselines.items()}
    moved = ""
    if current is not None and current.units() != plan.units():
        samples = current_samples(comparison, v.entry, current, source)
        against[CURRENT], moved = less_the_move(samples, current, plan, inventory, rules.move_horizon_steps)
    if comparison.rounds < rules.min_rounds and not decides_early(rules, v.entry.samples_ms, against):
        raise PlanError(
            f"{source} has {comparison.rounds} round(s), and the sequential rule's early looks on them "
            f"decide nothing: the gate needs {rules.min_rounds} paired rounds (publish.min_rounds) to "
            f"tell a faster plan from noise: measure {rules.min_rounds} rounds (evaluate.rounds)"
        )
    b = comparison.backend
    _check_simulated(b.is_simulated, rules, source)
    judged = plan.model_copy(update={"measured": v.entry.plan.measured, "measured_by": b})
    evidence = _evidence(source, comparison, v.proxy, plan.topology.device_type)
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
    extra = f" [{len(plan.out_of_range)} input(s) outside the model's training ranges]" if plan.out_of_range else ""
    extra += f"; {moved}" if moved else ""
    extra += f"; {v.proxy}" if v.proxy else ""
    decision = decision.revised(
        inventory_fingerprint=inventory.fingerprint(),
        evidence=evidence,
        reason=decision.reason + extra,
        finding=decision.finding + extra,
        proxy=v.proxy,
    )
    return judged, decision


def measure_and_gate(
    plan: Plan,
    inventory: Inventory,
    oracle: Oracle,
    rules: PublishConfig,
    *,
    extra_baselines: Sequence[str] = (),
    rounds: int = 5,
    seed: int = 0,
    sharder_options: Mapping[str, Mapping[str, Any]] | None = None,
    topology: Topology | None = None,
    current: Plan | None = None,
) -> tuple[Plan, GateDecision, Comparison]:
    """The gate measures for itself: `plan` and every required baseline's plan, interleaved on `oracle`'s
    backend, max(rounds, publish.min_rounds) rounds (fewer when the sequential rule's early look decides, more up to
    publish.max_rounds while the spreads are above publish.target_spread), then
    `gate_plan` on that comparison. Nothing but the plan's placement is taken from the user; the plan's sharder
    label removes no baseline. `topology` as in `gate_plan`. `current`: the store's current plan when it can serve
    this job, as a plan of this inventory labelled `current` (`gate.current.current_contender`): measured beside
    them."""
    check_margin(rules.min_improvement)
    names = required_baselines(rules, extra_baselines)
    plan = trusted_plan(plan)
    verify_plan(plan, inventory)  # before any measuring
    plan = bound_to_inventory(plan, inventory)
    check_topology(plan, inventory, topology)
    _check_simulated(oracle.info.is_simulated, rules, "the gate's measurement")
    options = {**(sharder_options or {}), "random": {"seed": seed}}
    rival = current if current is not None and current.units() != plan.units() else None
    asked = max(rounds, rules.min_rounds)
    cmp = compare_sharders(
        inventory,
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
    )
    judged, decision = gate_plan(
        plan,
        inventory,
        cmp,
        rules,
        extra_baselines=extra_baselines,
        seed=seed,
        source="measured by the gate",
        topology=topology,
        current=rival,
    )
    return judged, decision, cmp
