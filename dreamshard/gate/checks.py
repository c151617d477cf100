"""What the gate verifies before deciding: the plan against its inventory, and a comparison's contenders,
baselines and figures (docs/architecture/gate.md, "The publish gate"). Every failure is a PlanError: a forged or
inconsistent input, nothing to store."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from dreamshard.errors import InfeasiblePlacementError, PlanError
from dreamshard.evaluation import BASELINE_SHARDERS, Comparison, SharderResult, check_plan_for
from dreamshard.gate.rule import MAX_MS
from dreamshard.sharders import get_sharder
from dreamshard.values import HOST_KERNELS, BackendInfo, Inventory, Plan, Topology
from dreamshard.values.names import check_key_part

#: Relative tolerance for figures that must agree exactly inside a comparison (JSON round-trips floats exactly).
_REL_TOL = 1e-9


@dataclass(frozen=True)
class Verified:
    """A comparison that checked out: the plan's own entry and each baseline's entry by sharder name."""

    entry: SharderResult
    baselines: dict[str, SharderResult]
    infeasible: dict[str, str] = field(default_factory=dict)  # required baselines that cannot place it (recomputed)
    proxy: str = ""  # what stood in for the plan's devices (`proxy_basis`); "" = measured on the plan's device type


def verify_plan(plan: Plan, inventory: Inventory) -> None:
    """PlanError unless `plan` is a legal plan of exactly this inventory (fingerprint recomputed, every table
    placed once, devices in range, memory recomputed and equal to the plan's figures), and its names can be
    used as storage keys."""
    check_key_part(plan.plan_id, "plan id")
    check_key_part(plan.inventory_name, "inventory name")
    if plan.inventory_name != inventory.name:
        raise PlanError(
            f"plan {plan.plan_id} is for inventory '{plan.inventory_name}', not '{inventory.name}'; "
            f"pass the plan's own inventory"
        )
    check_plan_for(inventory, plan)


def baseline_plan(name: str, inventory: Inventory, topology: Topology, seed: int) -> Plan:
    """What baseline sharder `name` places for this inventory and topology (the heuristics and TorchRec's planner
    are deterministic; `random` with the seed params profile.seed gives it)."""
    return get_sharder(name, **({"seed": seed} if name == "random" else {})).shard(inventory, topology)


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=_REL_TOL, abs_tol=1e-12)


def _bounded(values: Sequence[float], label: str) -> None:
    for v in values:
        if not math.isfinite(v) or not (0.0 <= v < MAX_MS):
            raise PlanError(f"{label} has a figure of {v} ms; costs must be finite and below {MAX_MS:g} ms")


def _check_result(r: SharderResult, cmp: Comparison, inventory: Inventory, where: str) -> None:
    """One contender: a legal plan of this inventory on the comparison's topology, figures bounded before any
    arithmetic, and figures that agree (overall = median of the rounds' samples = its plan's measured overall,
    which is the max over devices of the per-device totals)."""
    label = f"{where}: contender '{r.sharder}'"
    m = r.plan.measured
    _bounded([r.overall_ms, *r.samples_ms], label)
    if m is not None:
        _bounded([m.overall_ms, *(x for d in m.per_device for x in d.as_list())], label)
    if r.plan.sharder != r.sharder:
        raise PlanError(f"{label} holds a plan made by '{r.plan.sharder}'")
    try:
        check_plan_for(inventory, r.plan, cmp.topology)
    except PlanError as e:
        raise PlanError(f"{label}: {e}") from None
    if len(r.samples_ms) != cmp.rounds or not r.samples_ms:
        raise PlanError(f"{label} has {len(r.samples_ms)} samples for {cmp.rounds} round(s)")
    if any(v <= 0 for v in r.samples_ms) or not _close(statistics.median(r.samples_ms), r.overall_ms):
        raise PlanError(f"{label}: overall {r.overall_ms:g} ms is not the median of its samples {r.samples_ms}")
    if m is None or not _close(m.overall_ms, r.overall_ms):
        raise PlanError(f"{label}: its plan's measured costs do not match its overall {r.overall_ms:g} ms")
    if not m.overall_agrees():
        raise PlanError(f"{label}: overall {m.overall_ms:g} ms is not the bottleneck device's total {m.top_total:g} ms")
    if r.plan.measured_by is not None and r.plan.measured_by != cmp.backend:
        raise PlanError(f"{label} was measured by another backend than the comparison's")


def _uvm_tables(plan: Plan) -> list[str]:
    """The tables the plan keeps in host memory (a UVM kernel, `HOST_KERNELS`), sorted."""
    return sorted(t for t, k in plan.kernels.items() if k in HOST_KERNELS)


def proxy_basis(backend: str, plan: Plan) -> str:
    """The decision's sentence on a proxy measurement: `backend` timed a plan for other devices."""
    uvm = _uvm_tables(plan)
    kernels = (
        f"its UVM tables ({', '.join(uvm[:3])}{', ...' if len(uvm) > 3 else ''}) timed with the fused kernel, "
        f"their memory counted at the cache's HBM share"
        if uvm
        else "its kernels timed as this backend runs them"
    )
    return f"PROXY: a {plan.topology.device_type} plan timed on '{backend}' (publish.allow_proxy): {kernels}"


def _device_of(b: BackendInfo) -> str:
    """The device family a backend's record says it ran on ("cpu", "cuda", or "" for the simulator)."""
    return "" if b.is_simulated else b.device.split(":")[0].lower()


def check_backend(b: BackendInfo, plan: Plan, backend: str | None, source: str, allow_proxy: bool = False) -> str:
    """Empty when `b` measured the plan's own device type (or is the simulator); with `allow_proxy` another backend
    is a labelled proxy (`proxy_basis`); otherwise a PlanError naming the fix. A record whose name disagrees with
    its own device or operator (a name edited from cpu to cuda) is refused: it cannot say which devices it timed.
    The gate checks this before it measures anything, and again on every comparison."""
    if (b.name == "simulator") != b.is_simulated or (b.name == "simulator") != (b.operator == "analytic"):
        raise PlanError(
            f"{source} says backend '{b.name}' with operator '{b.operator}' and is_simulated={b.is_simulated}: the "
            f"simulator is always simulated and analytic, and a device never is"
        )
    if not b.is_simulated and _device_of(b) != b.name:
        raise PlanError(
            f"{source} says backend '{b.name}' but device '{b.device}': a record names the devices it timed; "
            f"re-measure it (`dreamshard compare ... --out FILE`) rather than edit it"
        )
    if backend is not None and b.name != backend:
        raise PlanError(f"{source} was measured on backend '{b.name}', not '{backend}'")
    if b.name in (plan.topology.device_type, "simulator"):
        return ""
    if allow_proxy:
        return proxy_basis(b.name, plan)
    uvm = _uvm_tables(plan)
    what = f" (its UVM tables {', '.join(uvm[:3])} run only there)" if uvm else ""
    raise PlanError(
        f"{source} was measured on backend '{b.name}', the plan is for {plan.topology.device_type} devices{what}: "
        f"measure it on a {plan.topology.device_type} backend (profile.backend {plan.topology.device_type}, on a "
        f"worker of the gpu pool), or as a labelled proxy: publish.allow_proxy (this backend's timings, UVM tables "
        f"as the fused kernel) or profile.backend simulator with publish.allow_simulated (analytic)"
    )


def verify_comparison(
    plan: Plan,
    inventory: Inventory,
    comparison: Comparison,
    *,
    required: Sequence[str] = BASELINE_SHARDERS,
    seed: int = 0,
    min_rounds: int = 2,
    backend: str | None = None,
    source: str = "comparison",
    full_rounds: int | None = None,
    allow_proxy: bool = False,
) -> Verified:
    """PlanError unless `comparison` was made for `plan`'s inventory fingerprint, topology and backend, holds
    `plan` itself (same id, same units, same sharder), holds every `required` baseline once, each baseline's
    placement is what its sharder places (recomputed), it has `min_rounds` rounds, and its figures agree.
    `full_rounds`: the rounds to ask for in the error when `min_rounds` is the sequential rule's early look.
    `allow_proxy`: a comparison from another device type than the plan's is taken as a labelled proxy
    (`Verified.proxy`) instead of refused."""
    cmp = comparison
    _check_made_for(cmp, plan, inventory, source)
    proxy = check_backend(cmp.backend, plan, backend, source, allow_proxy)
    seen: set[str] = set()
    for r in cmp.results:
        if r.plan.plan_id in seen:
            raise PlanError(f"{source} lists plan {r.plan.plan_id} twice")
        seen.add(r.plan.plan_id)
        _check_result(r, cmp, inventory, source)
    if cmp.rounds < min_rounds:
        full = full_rounds or min_rounds
        fewer = f"; {min_rounds} when the early look decides on them" if full != min_rounds else ""
        raise PlanError(
            f"{source} has {cmp.rounds} round(s); the gate needs at least {full} paired rounds "
            f"(publish.min_rounds{fewer}) to tell a faster plan from noise: measure {full} rounds (evaluate.rounds)"
        )
    entry = _own_entry(cmp, plan, source)
    baselines = _verified_baselines(cmp, entry, inventory, seed, source)
    infeasible: dict[str, str] = {}
    for name in (n for n in required if n not in baselines):
        try:  # absent is accepted only for a baseline that cannot place this inventory: recomputed, not trusted
            baseline_plan(name, inventory, cmp.topology, seed)
        except InfeasiblePlacementError as e:
            infeasible[name] = str(e)
            continue
        raise PlanError(
            f"{source} has no '{name}' baseline; the gate requires {', '.join(required)} "
            f"(publish.baselines, plus the publisher's added baselines): compare with all of them, or let the gate "
            f"measure (the gate's own measurement)"
        )
    return Verified(entry=entry, baselines=baselines, infeasible=infeasible, proxy=proxy)


def _check_made_for(cmp: Comparison, plan: Plan, inventory: Inventory, source: str) -> None:
    """PlanError unless the comparison was made for this inventory version and the plan's topology."""
    fp = inventory.fingerprint()
    if cmp.inventory_fingerprint != fp:
        raise PlanError(
            f"{source} was made for another inventory (fingerprint {cmp.inventory_fingerprint[:12]}, "
            f"'{cmp.inventory_name}'), not '{inventory.name}' ({fp[:12]}); compare this plan's own inventory"
        )
    if cmp.topology != plan.topology:
        t, c = plan.topology, cmp.topology
        raise PlanError(
            f"{source} was measured on {c.num_devices} x {c.device_type} ({c.memory_per_device_gb:g} GB, batch "
            f"{c.batch_size}), the plan is for {t.num_devices} x {t.device_type} ({t.memory_per_device_gb:g} GB, "
            f"batch {t.batch_size}); compare on the plan's topology"
        )


def _own_entry(cmp: Comparison, plan: Plan, source: str) -> SharderResult:
    """The comparison's entry of `plan` itself: same id, same units, same sharder."""
    own = [r for r in cmp.results if r.plan.plan_id == plan.plan_id]
    if not own:
        raise PlanError(
            f"plan {plan.plan_id} is not among the contenders of {source}; measure it with the baselines: "
            f"`dreamshard plans publish PLAN --measure`, or `dreamshard compare --plan PLAN --out FILE`"
        )
    entry = own[0]
    if entry.plan.units() != plan.units() or entry.sharder != plan.sharder:
        raise PlanError(
            f"{source} holds a plan {plan.plan_id} with another placement or sharder than this file; re-measure it"
        )
    return entry


def _verified_baselines(
    cmp: Comparison, entry: SharderResult, inventory: Inventory, seed: int, source: str
) -> dict[str, SharderResult]:
    """Each baseline entry by its sharder's name, once, its placement recomputed from its sharder."""
    baselines: dict[str, SharderResult] = {}
    for r in cmp.results:
        if r is entry or r.sharder not in BASELINE_SHARDERS:
            continue
        if r.sharder in baselines:
            raise PlanError(
                f"{source} has two contenders labelled '{r.sharder}' besides the plan: a baseline label names one plan"
            )
        real = baseline_plan(r.sharder, inventory, cmp.topology, seed)
        if real.units() != r.plan.units():
            extra = f" with seed {seed} (params profile.seed)" if r.sharder == "random" else ""
            raise PlanError(
                f"{source}: contender '{r.sharder}' is not the plan {r.sharder}{extra} makes for this "
                f"inventory and topology (recomputed); baselines are verified, not trusted"
            )
        baselines[r.sharder] = r
    return baselines
