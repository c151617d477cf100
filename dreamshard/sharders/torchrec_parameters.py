"""What TorchRec's planner is asked per table: a table's constraints as TorchRec's own ``ParameterConstraints``
(docs/architecture/data-model.md, "Constraints").

TorchRec takes `sharding_types`, `compute_kernels`, `min_partition`, `cache_params` (its load factor and
algorithm), `enforce_hbm`, `is_weighted`, `stochastic_rounding` and `device_group` as they are; its pooling
factor is the table's (the statistics already fill it). A device pin and a shard count (`devices`, `min_shards`,
`max_shards`) it cannot express: `UNEXPRESSIBLE` names them, and the torchrec sharders check its plan against them
(the placement validator), refusing it in one line naming the table and the constraint (BrokenConstraintError).
`compare` then asks it again without them (`expressible_only`) and measures that plan as it is, in a row labelled
as breaking the constraint, never a contender.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dreamshard.values import Inventory, Table

#: Our constraints TorchRec's ParameterConstraints have no field for.
UNEXPRESSIBLE: tuple[str, ...] = ("devices", "min_shards", "max_shards")
#: Constraint fields handed to TorchRec unchanged (same names, plain values).
_AS_IS: tuple[str, ...] = ("min_partition", "enforce_hbm", "is_weighted", "stochastic_rounding", "device_group")


def allowed_types(table: Table, offered: Sequence[str]) -> list[str]:
    """The sharding types of `offered` the table's `sharding_types` constraint allows (in `offered`'s order)."""
    c = table.constraints
    return [t for t in offered if c is None or c.allows_type(t)]


def parameter_constraints(table: Table, types: Sequence[str], kernels: Sequence[str] | None = None) -> Any:
    """TorchRec's ``ParameterConstraints`` for `table`: `types` and `kernels` (None: TorchRec's choice), narrowed
    by its constraints, and the fields TorchRec takes as they are (module docstring)."""
    # optional dependency: torchrec
    from torchrec.distributed.planner import ParameterConstraints
    from torchrec.distributed.types import CacheAlgorithm, CacheParams

    c = table.constraints
    fields: dict[str, Any] = {
        "sharding_types": allowed_types(table, types),
        "pooling_factors": [float(table.pooling_factor)],
    }
    allowed = list(c.compute_kernels) if c is not None and c.compute_kernels is not None else None
    if kernels is not None and allowed is not None:
        allowed = [k for k in allowed if k in kernels] or allowed  # the constraint wins: TorchRec says if it fails
    elif kernels is not None:
        allowed = list(kernels)
    if allowed is not None:
        fields["compute_kernels"] = allowed
    if table.weighted:  # the table's own record; a constraint that says otherwise wins below
        fields["is_weighted"] = True
    if c is None:
        return ParameterConstraints(**fields)
    for name in _AS_IS:
        value = getattr(c, name)
        if value is not None:
            fields[name] = value
    if c.cache_params is not None:
        cache: dict[str, Any] = {}
        if c.cache_params.load_factor is not None:
            cache["load_factor"] = c.cache_params.load_factor
        if c.cache_params.algorithm is not None:
            cache["algorithm"] = CacheAlgorithm[c.cache_params.algorithm.upper()]
        fields["cache_params"] = CacheParams(**cache)
    return ParameterConstraints(**fields)


def unexpressible(table: Table) -> list[str]:
    """The table's constraints TorchRec cannot be asked (`UNEXPRESSIBLE`) that it sets."""
    c = table.constraints
    return [] if c is None else [name for name in UNEXPRESSIBLE if getattr(c, name) is not None]


def expressible_only(inventory: Inventory) -> Inventory:
    """`inventory` with the constraints TorchRec cannot be asked (`UNEXPRESSIBLE`) dropped: what its planner plans
    for, so that `compare` can measure its plan as it is beside the plans that honour them."""

    def relaxed(table: Table) -> Table:
        c = table.constraints
        if c is None or not unexpressible(table):
            return table
        return table.model_copy(update={"constraints": c.model_copy(update=dict.fromkeys(UNEXPRESSIBLE))})

    return inventory.model_copy(update={"tables": tuple(relaxed(t) for t in inventory.tables)})


def relaxed_for(inventory: Inventory, broken: Mapping[str, str]) -> Inventory:
    """`expressible_only(inventory)` less, for each table of `broken` ({table: the constraint it breaks, as a
    BrokenConstraintError names it: "<field> ...: ..."}), the field TorchRec could not honour there (its types or
    kernels on these devices): what its planner plans for when a team's constraint is beyond it."""
    out = expressible_only(inventory)
    fields = {t: c.split()[0] for t, c in broken.items() if c.split()}

    def relaxed(table: Table) -> Table:
        field = fields.get(table.name)
        c = table.constraints
        if c is None or field not in RELAXABLE:
            return table
        return table.model_copy(update={"constraints": c.model_copy(update={field: None})})

    return out.model_copy(update={"tables": tuple(relaxed(t) for t in out.tables)})


#: Constraints TorchRec is asked but may not be able to honour on some devices (a pooled table row-wise on cpu):
#: `relaxed_for` drops them for the table it names.
RELAXABLE: tuple[str, ...] = ("sharding_types", "compute_kernels")

__all__ = [
    "RELAXABLE",
    "UNEXPRESSIBLE",
    "allowed_types",
    "expressible_only",
    "parameter_constraints",
    "relaxed_for",
    "unexpressible",
]
