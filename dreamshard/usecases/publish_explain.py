"""What a publish says to people (docs/architecture/gate.md, "Moves explained"): each table the judged plan moves
from the current plan, from -> to, its GiB and why (the devices' measured step on either side), what pays for the
moves, and the question a reviewer answers before a plan becomes current."""

from __future__ import annotations

import statistics

from dreamshard.gate import Incumbent, Judgement
from dreamshard.gate.publish_policy import PublishVerdict
from dreamshard.placement.diff import PlanDiff, TableMove, plan_diff
from dreamshard.usecases.publish_request import PublishRequest
from dreamshard.values import Costs, Inventory, Plan, parse_unit
from dreamshard.values.review import ReviewQuestion


def _step(costs: Costs | None, devices: list[int]) -> str:
    """The measured step of `devices` under `costs` ("" when not measured)."""
    if costs is None or not devices:
        return ""
    totals = [costs.per_device[d].total for d in devices if d < len(costs.per_device)]
    return f" ({max(totals):.3g} ms a step)" if totals else ""


def _devices(plan: Plan, table: str) -> list[int]:
    return sorted({d for u, d in plan.units().items() if parse_unit(u).table == table})


def _measured_current(j: Judgement, incumbent: Incumbent) -> Costs | None:
    """The current plan's measured per-device costs in this judgement (when it serves and was measured)."""
    rival = incumbent.contender if incumbent.serves else None
    if rival is None:
        return None
    units = rival.units()
    row = next((r for r in j.comparison.results if r.plan.units() == units), None)
    return row.plan.measured if row is not None else None


def explain_moves(
    current: Plan | None, plan: Plan, j: Judgement, incumbent: Incumbent, horizon: int
) -> tuple[PlanDiff | None, str]:
    """The judged plan against the current one, each moved table with why (its devices' measured step before and
    after), and what pays for the moves; (None, "") when nothing was current, or it ran on another world size (the
    job restarts on other ranks: every table is resharded, nothing "moves")."""
    if current is None or current.topology.num_devices != plan.topology.num_devices:
        return None, ""
    inventory: Inventory = j.inventory
    diff = plan_diff(current, plan, inventory)
    before = _measured_current(j, incumbent)
    tables = tuple(
        m.model_copy(
            update={
                "why": f"{m.before}{_step(before, _devices(current, m.table))} -> "
                f"{m.after}{_step(plan.measured, _devices(plan, m.table))}"
            }
        )
        for m in diff.tables
    )
    diff = diff.model_copy(update={"tables": tables})
    return diff, _why(diff, j, incumbent, horizon)


def _why(diff: PlanDiff, j: Judgement, incumbent: Incumbent, horizon: int) -> str:
    if not diff.moved:
        return ""
    if not incumbent.serves:
        return f"{incumbent.nothing_to_keep}: the moves are what this plan changes of it"
    rival = j.samples.get("current")
    if rival is None:
        return "the current plan was not measured beside this plan: no measured gain is known to pay for the moves"
    gain = statistics.median(rival) - statistics.median(j.plan_samples)
    charge = j.charges.get("this plan")
    per_step = charge.per_step_ms if charge is not None else 0.0
    gain += per_step  # the current plan's figures carry this plan's charge relative to it (gate.moves.relative)
    cost = f"moving {len(diff.moved)} table(s) costs about {diff.move_ms:.0f} ms once"
    if horizon <= 0:
        return f"{cost}; moves are free (publish.move_horizon_steps 0)"
    if gain <= 0:
        return f"{cost}; no measured gain over the current plan pays for it"
    return (
        f"this plan measured {gain:.3g} ms a step faster than the current plan (medians over {len(j.plan_samples)} "
        f"round(s)); {cost}, {per_step:.3g} ms a step over publish.move_horizon_steps {horizon}: paid back after "
        f"about {diff.move_ms / gain:.0f} step(s)"
    )


def move_lines(diff: PlanDiff) -> list[str]:
    """Each moved table in one line: from -> to (with each side's measured step when known) and its GiB."""
    return [
        f"{m.table}: {m.why or f'{m.before} -> {m.after}'}, {m.weights_gib:.4f} GiB"
        + (f" + {m.state_gib:.4f} GiB optimizer state" if m.state_gib > 0 else "")
        for m in diff.tables
    ]


def question_for(
    plan: Plan, verdict: PublishVerdict, j: Judgement, incumbent: Incumbent, request: PublishRequest
) -> ReviewQuestion:
    """What a reviewer reads before the verdict's change makes a plan current (publish.require_human)."""
    assert verdict.change is not None
    becomes = verdict.fallback if verdict.fallback is not None else plan
    decision = verdict.fallback_decision if verdict.fallback_decision is not None else verdict.decision
    name = plan.inventory_name
    headline = (
        f"make plan {becomes.plan_id} current for '{name}' ({verdict.change}"
        + (f" in place of {incumbent.plan_id}" if incumbent.plan_id else "")
        + f"): {decision.shown}"
    )
    lines = [f"**{headline}**", "", decision.reason]
    d = verdict.decision
    if d.ratio_low is not None and d.ratio_high is not None:
        lines += [
            "",
            f"plan {plan.plan_id} / {d.decided_by}: [{d.ratio_low:.4f}, {d.ratio_high:.4f}] over {d.rounds} "
            f"round(s) at {d.confidence or 0:.0%}",
        ]
    lines += ["", f"Evidence: {d.evidence or 'none recorded'}"]
    diff, why = explain_moves(incumbent.plan, becomes, j, incumbent, request.settings.publish.move_horizon_steps)
    if diff is not None:
        lines += ["", f"Moves: {diff.summary}", *(f"- {line}" for line in move_lines(diff))]
        lines += [f"Why: {why}"] if why else []
    if request.review_note:
        lines += ["", request.review_note]
    timeout = request.settings.publish.approval_timeout_s
    lines += [
        "",
        f"Approve to make plan {becomes.plan_id} current; decline to keep what is current. With no answer within "
        f"{timeout} s the change waits: `dreamshard plans approve {becomes.plan_id}` answers it later.",
    ]
    return ReviewQuestion(
        inventory_name=name,
        plan_id=becomes.plan_id,
        change=verdict.change,
        current_plan_id=incumbent.plan_id,
        headline=headline,
        details="\n".join(lines),
        timeout_s=timeout,
    )


__all__ = ["TableMove", "explain_moves", "move_lines", "question_for"]
