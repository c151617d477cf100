"""The store's current plan as the incumbent of the version being published (docs/architecture/gate.md, "The
incumbent"): what it can serve of the new version's job, and the contender the gate measures in its place.

* It serves the job when the version has its table schema and topology, and its placement still fits the version's
  memory and honours every constraint of the version: it is measured as the contender `current`, and a plan replaces
  it only by beating it (moves charged).
* Otherwise it cannot stay, and the reason says why, naming the constraint it breaks when one does. When it places
  some of the version's tables on the same world size, its extension (`sharders.extend`: old tables where they are,
  new ones placed by a heuristic) is measured instead, labelled `current+new`: the fallback's first choice, and
  the contender a new plan must beat to move the kept tables.

The store is read by the publish use case (once); everything here works on values.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from dreamshard.errors import DreamshardError, PlanError
from dreamshard.placement.constraint_check import broken_constraint
from dreamshard.placement.make_plan import make_plan
from dreamshard.sharders.extend import EXTENDED, extended_plan
from dreamshard.values import Inventory, Plan, Topology

#: The contender label of the store's current plan (as it is) in a comparison and in the gate's decision.
CURRENT = "current"
#: The labels an incumbent contender can carry.
INCUMBENT_LABELS: tuple[str, ...] = (CURRENT, EXTENDED)


class Incumbent(BaseModel):
    """What the store's current plan of an inventory is for the version being published (module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    inventory_name: str
    plan_id: str | None = None  # what the pointer names (None: nothing is current)
    plan: Plan | None = None  # the current plan as stored (None: none, or it cannot be read)
    # what the gate measures beside the baselines in its place: the current plan as a plan of this version
    # (label `current`) when it serves the job, else its extension (label `current+new`), else None
    contender: Plan | None = None
    cannot_serve: str = ""  # why the current plan as it is cannot serve this version's job ("" when it can)
    constraint: str = ""  # the version's constraint it breaks ("table 'ad' breaks its constraint ..."), "" none

    @property
    def serves(self) -> bool:
        """The current plan serves this version's job as it is (it stays unless a plan beats it)."""
        return self.plan_id is not None and not self.cannot_serve

    @property
    def extension(self) -> Plan | None:
        """The current plan extended to this version (when it cannot serve it as it is), or None."""
        c = self.contender
        return c if c is not None and c.sharder == EXTENDED else None

    @property
    def nothing_to_keep(self) -> str:
        """Why no current plan can be kept as it is ("" when one can)."""
        if self.plan_id is None:
            return f"no plan is current for '{self.inventory_name}'"
        return self.cannot_serve


def current_contender(current: Plan, inventory: Inventory) -> Plan:
    """The current plan's placement as a plan of `inventory` (a version with the same table schema: statistics may
    have changed), labelled `current`, keeping the current plan's id. PlanError when the placement no longer fits
    this version (memory, constraints): then the current plan cannot serve it."""
    try:
        plan = make_plan(
            inventory,
            current.topology,
            current.placement,
            CURRENT,
            column_shards=current.column_shards,
            row_shards=current.row_shards,
            data_parallel=current.data_parallel,
            kernels=current.kernels,
            cache_load_factors=current.cache_load_factors,
        )
    except (DreamshardError, ValueError) as e:
        raise PlanError(f"the current plan {current.plan_id} does not fit this inventory version: {e}") from None
    return plan.model_copy(update={"plan_id": current.plan_id})


def broken_by(current: Plan, inventory: Inventory) -> str:
    """The first constraint of `inventory` the current plan's layout breaks, in words ("" when it honours them)."""
    names = set(inventory.table_names)
    broken = broken_constraint(
        inventory,
        current.topology,
        {t: d for t, d in current.placement.items() if t in names},
        {t: s for t, s in current.column_shards.items() if t in names},
        {t: s for t, s in current.row_shards.items() if t in names},
        [t for t in current.data_parallel if t in names],
    )
    return f"table '{broken[0]}' breaks its constraint {broken[1]}" if broken else ""


def _schema_change(current: Plan, inventory: Inventory, schema: str | None) -> str:
    """Why `current` places another table schema than `inventory`'s ("" when it places the same)."""
    theirs = schema or current.schema_fingerprint
    mine = inventory.schema_fingerprint()
    if theirs is not None and theirs != mine:
        added = [t for t in inventory.table_names if t not in set(current.table_names)]
        removed = [t for t in current.table_names if t not in set(inventory.table_names)]
        said = "; ".join(
            f"{what} {', '.join(names[:5])}{' ...' if len(names) > 5 else ''}"
            for what, names in (("added", added), ("removed", removed))
            if names
        )
        return (
            f"the current plan {current.plan_id} places another table schema ({theirs[:12]}, this version's is "
            f"{mine[:12]}{': ' + said if said else ''}) and cannot serve it"
        )
    if theirs is None and set(current.table_names) != set(inventory.table_names):
        return f"the current plan {current.plan_id} places other tables and cannot serve this version"
    return ""


def incumbent_for(
    inventory_name: str,
    plan_id: str | None,
    current: Plan | None,
    schema: str | None,
    inventory: Inventory,
    topology: Topology,
) -> Incumbent:
    """The incumbent of `inventory` on `topology` (module docstring): `plan_id` the pointer's, `current` the plan it
    names (None when it cannot be read: then it counts as one that serves, so nothing replaces it by noise or by
    fallback: `plans fsck` reports it), `schema` the store's record of its table schema."""
    none = Incumbent(inventory_name=inventory_name, plan_id=plan_id)
    if plan_id is None or current is None:
        return none
    if current.topology != topology:
        t = current.topology
        why = (
            f"the current plan {current.plan_id} is for {t.num_devices} x {t.device_type} (batch {t.batch_size}) "
            f"and cannot serve this topology" + _world_change(t, topology)
        )
        return _extended(none.model_copy(update={"plan": current, "cannot_serve": why}), current, inventory, topology)
    changed = _schema_change(current, inventory, schema)
    constraint = broken_by(current, inventory)
    found = none.model_copy(update={"plan": current, "constraint": constraint})
    if changed:
        return _extended(found.model_copy(update={"cannot_serve": changed}), current, inventory, topology)
    try:
        rival = current_contender(current, inventory)
    except PlanError as e:
        why = f"the current plan {current.plan_id} {constraint}" if constraint else str(e)
        return _extended(
            found.model_copy(update={"cannot_serve": f"{why}: it cannot serve this version"}),
            current,
            inventory,
            topology,
        )
    return found.model_copy(update={"contender": rival})


def _world_change(old: Topology, new: Topology) -> str:
    """The clause " (planned for world X, the job's is Y)" when the two topologies differ in their world, else ""."""
    if old.world == new.world:
        return ""
    said = [f"world {w.name}" if w is not None else "no declared world" for w in (old.world, new.world)]
    return f" (planned for {said[0]}, the job's is {said[1]})"


def _extended(incumbent: Incumbent, current: Plan, inventory: Inventory, topology: Topology) -> Incumbent:
    """`incumbent` with the current plan's extension to this version as its contender, when there is one."""
    try:
        return incumbent.model_copy(update={"contender": extended_plan(current, inventory, topology)})
    except PlanError:
        return incumbent
