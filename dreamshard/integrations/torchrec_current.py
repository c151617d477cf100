"""The training job's side: the store's current plan for this model, as TorchRec's ``ShardingPlan``
(docs/torchrec.md, "The training job loads its plan").

Usage (the training job knows its model and the store, not an inventory name)::

    from dreamshard.integrations.torchrec_current import load_current_sharding_plan
    current = load_current_sharding_plan("s3://plans/prod", model, world_size=dist.get_world_size())
    print(current.reason)  # what was loaded, or what it fell back to and why
    model = DistributedModelParallel(model, plan=current.sharding_plan, ...)  # None: TorchRec's own planner

The plan is the latest approved one whose schema fingerprint is the model's and whose world size is the job's
(dreamshard.store.lookup, read-only: the current plans first, then the plans that were current before, so a job
still on an older model version finds its own plan after a newer one is published), or the same among the plans of
`inventory=NAME`; then every check `torchrec.sharding_plan` makes. A shape mismatch is an error; "no plan" is a
result with ``sharding_plan=None`` and a one-line `reason` naming the nearest plan refused and why
(``require()`` raises instead).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch.nn as nn

from dreamshard.errors import PlanError, StoreError
from dreamshard.integrations.torchrec import sharding_plan
from dreamshard.integrations.torchrec_file import check_world_size
from dreamshard.integrations.torchrec_model import schema_fingerprints
from dreamshard.store import PlanStore, get_current, get_inventory_version, open_store
from dreamshard.store.lookup import approved_plan_for
from dreamshard.store.pointer import get_pointer
from dreamshard.values import Plan

if TYPE_CHECKING:  # optional dependency: torchrec (annotations only)
    from torchrec.distributed.types import ModuleSharder, ShardingPlan  # optional dependency: torchrec

FALLBACK = "DistributedModelParallel without plan= uses TorchRec's own planner"


@dataclass(frozen=True)
class CurrentShardingPlan:
    """What `load_current_sharding_plan` found: the ShardingPlan (None: no usable plan), the plan id and inventory
    it came from (None when none was found), and one line saying which plan was loaded or why none was."""

    sharding_plan: ShardingPlan | None
    plan_id: str | None
    inventory: str | None
    reason: str

    def require(self) -> ShardingPlan:
        """The ShardingPlan, or PlanError with the reason (a job that must not fall back)."""
        if self.sharding_plan is None:
            raise PlanError(self.reason)
        return self.sharding_plan


def _none(reason: str, plan_id: str | None = None, inventory: str | None = None) -> CurrentShardingPlan:
    return CurrentShardingPlan(None, plan_id, inventory, f"{reason}; {FALLBACK}")


def _refused(plan: Plan, world_size: int, why: str = "") -> CurrentShardingPlan:
    """No plan for this world size: the nearest one refused, and why."""
    return _none(
        f"plan {plan.plan_id} of inventory '{plan.inventory_name}' is for {plan.topology.num_devices} ranks, "
        f"this job has {world_size}{why}; re-plan with --devices {world_size}",
        plan.plan_id,
        plan.inventory_name,
    )


def _found(st: PlanStore, schemas: Sequence[str], world_size: int) -> tuple[Plan, str] | CurrentShardingPlan:
    """The latest approved plan of the model's schema for `world_size` ranks over every inventory (the plan and how
    it was found), or why there is none."""
    schema = schemas[0]
    found = approved_plan_for(st, schemas, world_size)
    skipped = f" (unreadable: {'; '.join(found.skipped)})" if found.skipped else ""
    if found.plan is None:
        if found.refused is not None:
            return _refused(found.refused, world_size, f" (schema {schema[:12]}){skipped}")
        return _none(
            f"no current plan in {st.location} (nor an earlier approved one) is for this model's tables "
            f"(schema {schema[:12]}){skipped}"
        )
    how = f"found by schema {schema[:12]}" + ("" if found.tier == "current" else ", an earlier approved plan")
    if len(found.matches) > 1:
        how += f"; also for {', '.join(found.matches[:-1])}"
    return found.plan, how


def _named(
    st: PlanStore, schemas: Sequence[str], world_size: int, inventory: str
) -> tuple[Plan, str] | CurrentShardingPlan:
    """The latest approved plan of `inventory` for the model's schema and `world_size`; else its current plan (whose
    shapes `sharding_plan` then checks against the model), or why there is none."""
    found = approved_plan_for(st, schemas, world_size, inventory=inventory)
    if found.plan is not None:
        tier = "current plan" if found.tier == "current" else "an earlier approved plan"
        return found.plan, f"{tier} of inventory '{inventory}'"
    if found.refused is not None:
        return _refused(found.refused, world_size)
    if get_pointer(st, inventory) is None:
        return _none(f"inventory '{inventory}' has no current plan in {st.location}", inventory=inventory)
    plan = get_current(st, inventory)
    if plan.topology.num_devices != world_size:
        return _refused(plan, world_size)
    return plan, f"current plan of inventory '{inventory}'"


def load_current_sharding_plan(
    store: PlanStore | str,
    model: nn.Module,
    world_size: int,
    *,
    inventory: str | None = None,
    local_size: int | None = None,
    sharders: Sequence[ModuleSharder[Any]] | None = None,
    names: Mapping[str, str] | None = None,
    endpoint_url: str | None = None,
) -> CurrentShardingPlan:
    """The latest approved plan for `model` on `world_size` ranks from `store` (a PlanStore or its URI; module
    docstring).

    `inventory` names the inventory (default: found by the model's schema fingerprint); `local_size`,
    `sharders` and `names` as in `dreamshard.integrations.torchrec.sharding_plan`.
    """
    check_world_size(world_size)
    st = open_store(store, endpoint_url=endpoint_url) if isinstance(store, str) else store
    schemas = schema_fingerprints(model, {theirs: ours for ours, theirs in (names or {}).items()})
    got = _found(st, schemas, world_size) if inventory is None else _named(st, schemas, world_size, inventory)
    if isinstance(got, CurrentShardingPlan):
        return got
    plan, how = got
    try:
        inv = get_inventory_version(st, plan.inventory_name, plan.inventory_fingerprint)
    except StoreError:
        inv = None
    # Shapes from the plan's pushed inventory; never pushed: the plan's schema fingerprint is checked against the
    # model's instead (sharding_plan), and column shards against the module's dims either way.
    sp = sharding_plan(plan, model, world_size, local_size=local_size, sharders=sharders, names=names, inventory=inv)
    return CurrentShardingPlan(
        sp,
        plan.plan_id,
        plan.inventory_name,
        f"loaded plan {plan.plan_id} of inventory '{plan.inventory_name}' ({how}; {world_size} ranks)",
    )
