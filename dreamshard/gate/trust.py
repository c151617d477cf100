"""Who decides each field of a plan file: the trust and authority table of
docs/architecture/stores.md, "Trust boundary".

A plan file is data. What the gate judges is its placement; every other field the gate, the store index or a
lookup reads comes from its authority: the inventory given to publish (names and fingerprints, recomputed), the
request or the job the inventory records (the topology, checked), the gate's own measurement (costs), the store's
own write (dates and order). `PLAN_FIELD_AUTHORITY` names the
authority of every `Plan` field; a field without an entry is refused by `check_trust_table` (tests run it), so a
field added later cannot be read by anything that decides before it gets a row here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from dreamshard.config.job import describe_topology
from dreamshard.errors import PlanError
from dreamshard.gate.checks import verify_plan
from dreamshard.values import Inventory, Plan, Topology

Authority = Literal["placement", "identity", "inventory", "request", "gate", "store", "label", "informational"]

#: The authority of every field of a plan file (nested models follow their field's row).
PLAN_FIELD_AUTHORITY: Mapping[str, Authority] = {
    # what is judged: validated against the inventory, memory and the constraints
    "placement": "placement",
    "column_shards": "placement",
    "row_shards": "placement",
    "data_parallel": "placement",
    "kernels": "placement",
    "cache_load_factors": "placement",
    # the plan's name: a store key part, checked as data (dreamshard.values.names.check_key_part)
    "plan_id": "identity",
    # recomputed from the inventory given to publish; a file value that differs is refused
    "inventory_name": "inventory",
    "inventory_fingerprint": "inventory",
    "schema_fingerprint": "inventory",
    "memory_per_device_gb": "inventory",
    # the request's topology, else the job's the inventory records (`check_topology`): a mismatch is refused; then
    # checked against the comparison's (or measured as the plan states it)
    "topology": "request",
    # the gate's own measurement and the pipeline's own workspace: stripped from a file, recomputed
    "predicted": "gate",
    "measured": "gate",
    "measured_by": "gate",
    "verification": "gate",
    "refinement": "gate",
    "calibration": "gate",
    "layouts": "gate",
    "comm_fits": "gate",
    "world": "gate",
    "assumptions": "gate",
    "lineage": "gate",
    "model_version": "gate",
    # dates and every ordering come from the store's own write (record `stored_at`, pointer `published_at`)
    "created_at": "store",
    # a label for people: never selects baselines, rules or paths
    "sharder": "label",
    # the model's card and the planning run: may only grow (the model's own check adds to it)
    "out_of_range": "informational",
}

#: Fields a plan file may not carry into the store: the gate's measurement fills the costs, and only the
#: pipeline's publish step attaches lineage (from its own workspace).
UNTRUSTED_FIELDS: tuple[str, ...] = tuple(f for f, a in PLAN_FIELD_AUTHORITY.items() if a == "gate")


def check_trust_table(fields: Sequence[str] | None = None) -> None:
    """TypeError naming every `Plan` field without an authority (or a row for a field that no longer exists)."""
    names = set(Plan.model_fields if fields is None else fields)
    missing = sorted(names - set(PLAN_FIELD_AUTHORITY))
    stale = sorted(set(PLAN_FIELD_AUTHORITY) - names)
    if missing or stale:
        raise TypeError(
            f"Plan fields without a trust decision: {missing}; rows for no field: {stale} "
            f"(dreamshard/gate/trust.py, docs/architecture/stores.md 'Trust boundary')"
        )


def trusted_plan(plan: Plan, out_of_range: Callable[[Plan], Sequence[str]] | None = None) -> Plan:
    """`plan` as the gate takes it from a file: the gate-owned fields cleared; `out_of_range` kept as the file says
    and extended by `out_of_range(plan)` (the model's own check, when a model is given): it can only grow."""
    found = tuple(out_of_range(plan)) if out_of_range is not None else ()
    kept = tuple(dict.fromkeys((*plan.out_of_range, *found)))
    cleared = {f: Plan.model_fields[f].get_default(call_default_factory=True) for f in UNTRUSTED_FIELDS}
    return plan.model_copy(update={**cleared, "out_of_range": kept})


def bound_to_inventory(plan: Plan, inventory: Inventory) -> Plan:
    """`plan` with its inventory-owned fields taken from `inventory`: name and fingerprints recomputed. A file value
    that differs is refused (PlanError naming the field); a plan written before a field existed gets it filled in.
    The memory figures are checked against the inventory by `memory.check_plan` (`verify_plan`)."""
    truth = {
        "inventory_name": inventory.name,
        "inventory_fingerprint": inventory.fingerprint(),
        "schema_fingerprint": inventory.schema_fingerprint(),
    }
    for field, value in truth.items():
        said = getattr(plan, field)
        if said is not None and said != value:
            raise PlanError(
                f"plan {plan.plan_id}: {field} {str(said)[:16]!r} is not the inventory's "
                f"({value[:16]!r}); the gate recomputes it from the inventory: re-plan for this inventory"
            )
    return plan.model_copy(update=truth)


def check_topology(plan: Plan, inventory: Inventory, requested: Topology | None = None) -> None:
    """PlanError (one line naming both) unless `plan` is for the topology the request names (`requested`: a
    replan told `--devices`), else for the training job `inventory` records (`Inventory.job`: its world size,
    hosts and device type, and its memory, optimizer and batch where it records them). Without either, the
    comparison's check (`gate.checks.verify_comparison`) is the only one."""
    t = plan.topology
    if requested is not None:
        if t != requested:
            fields = ", ".join(f for f in Topology.model_fields if getattr(t, f) != getattr(requested, f))
            raise PlanError(
                f"plan {plan.plan_id} is for {describe_topology(t)}, the request is for "
                f"{describe_topology(requested)} ({fields} differ); re-plan for the requested topology"
            )
        return
    if inventory.job is None:
        return
    job = inventory.job.topology(t)  # the plan's topology with what the job fixes
    if job != t:
        raise PlanError(
            f"plan {plan.plan_id} is for {describe_topology(t)}, the job inventory '{inventory.name}' records is "
            f"{describe_topology(job)}; re-plan for the job (`dreamshard plan` and `replan` plan for it unless "
            f"--devices/--memory-gb/--world say otherwise)"
        )


@dataclass(frozen=True)
class TrustedPlan:
    """A plan file taken by its authorities once (`trust_plan`): gate-owned fields cleared, verified against its
    inventory (every table once, devices, memory, constraints, key-safe names), its inventory fields recomputed, its
    topology checked against the request or the job. The gate and the publish use case take this, never a raw plan,
    so nothing is trusted twice or forgotten."""

    plan: Plan
    inventory: Inventory
    requested: Topology | None = None  # the topology the request named (None: the job's, or the plan's own)

    @property
    def plan_id(self) -> str:
        return self.plan.plan_id


def trust_plan(
    plan: Plan,
    inventory: Inventory,
    requested: Topology | None = None,
    out_of_range: Callable[[Plan], Sequence[str]] | None = None,
) -> TrustedPlan:
    """`plan` as the gate takes it from a file (the module docstring): `trusted_plan` (with the model's
    `out_of_range` check when given), verified against `inventory`, bound to it, its topology checked. PlanError /
    StoreError (one line) when it does not check out."""
    taken = trusted_plan(plan, out_of_range)
    verify_plan(taken, inventory)
    bound = bound_to_inventory(taken, inventory)
    check_topology(bound, inventory, requested)
    return TrustedPlan(plan=bound, inventory=inventory, requested=requested)
