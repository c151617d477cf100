"""TorchRec's ``ShardingPlan`` read back as a dreamshard TorchRec plan file (docs/torchrec.md). No torch or
torchrec import is needed: it reads the plan's ``ParameterSharding`` attributes.

Every sharding type a dreamshard plan holds is read (table-, column-, row-, table-row-wise, data-parallel); any
other type is a PlanError, and so is a row-sharded table with an empty block (TorchRec's generators emit one on
the last ranks when a table has too few rows, e.g. 5 rows on 4 ranks: 2, 2, 1, 0), naming the table and the rank.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dreamshard.errors import PlanError
from dreamshard.integrations.torchrec_file import TorchRecPlanFile, document_from_data

READABLE_TYPES: tuple[str, ...] = ("table_wise", "column_wise", "row_wise", "table_row_wise", "data_parallel")


def _entry(table: str, ps: Any, where: str) -> dict[str, Any]:
    """One table's file entry from its ParameterSharding."""
    kind = str(ps.sharding_type)
    entry: dict[str, Any] = {"sharding_type": kind, "compute_kernel": ps.compute_kernel}
    factor = getattr(getattr(ps, "cache_params", None), "load_factor", None)
    if ps.compute_kernel == "fused_uvm_caching" and factor is not None:
        entry["cache_load_factor"] = float(factor)
    spec_shards = list(ps.sharding_spec.shards) if ps.sharding_spec is not None else []
    if kind == "table_wise":
        entry["ranks"] = [int(ps.ranks[0])] if ps.ranks else []
        if spec_shards:
            entry["num_embeddings"], entry["embedding_dim"] = (int(x) for x in spec_shards[0].shard_sizes)
    elif kind == "column_wise":
        shards = sorted(spec_shards, key=lambda s: s.shard_offsets[1])
        entry["ranks"] = [int(s.placement.rank()) for s in shards]
        entry["column_ranges"] = [[int(s.shard_offsets[1]), int(s.shard_offsets[1] + s.shard_sizes[1])] for s in shards]
        entry["num_embeddings"] = int(shards[0].shard_sizes[0])
        entry["embedding_dim"] = entry["column_ranges"][-1][1]
    elif kind in ("row_wise", "table_row_wise"):
        shards = sorted(spec_shards, key=lambda s: (s.shard_offsets[0], s.placement.rank()))
        empty = [int(s.placement.rank()) for s in shards if int(s.shard_sizes[0]) == 0]
        rows = sum(int(s.shard_sizes[0]) for s in shards)
        if empty:
            raise PlanError(
                f"table '{table}'{where} is {kind} in the TorchRec plan with an empty row block on rank {empty[0]} "
                f"({rows} rows over {len(shards)} ranks); dreamshard row shards are non-empty TorchRec row blocks"
            )
        entry["ranks"] = [int(s.placement.rank()) for s in shards]
        entry["row_ranges"] = [[int(s.shard_offsets[0]), int(s.shard_offsets[0] + s.shard_sizes[0])] for s in shards]
        entry["num_embeddings"] = rows
        entry["embedding_dim"] = int(shards[0].shard_sizes[1])
    elif kind == "data_parallel":
        entry["ranks"] = [int(r) for r in ps.ranks or ()]
    else:
        raise PlanError(
            f"table '{table}'{where} is {kind} in the TorchRec plan; dreamshard plans express "
            f"{', '.join(READABLE_TYPES)} tables only"
        )
    return entry


def document_from_sharding_plan(
    plan: Any,
    world_size: int,
    device_type: str = "cpu",
    names: Mapping[str, str] | None = None,
    local_world_size: int | None = None,
) -> TorchRecPlanFile:
    """A TorchRec ``ShardingPlan`` (e.g. what its ``EmbeddingShardingPlanner`` returned) as a plan file.

    `names` maps dreamshard names to the module's (the inverse is applied); other module names are kept.
    `local_world_size`: ranks per host (TorchRec's local_size; needed to read table_row_wise tables of several
    hosts). A sharding type dreamshard cannot express, or a row layout `check_row_shards` rejects, is a PlanError.
    """
    back = {theirs: ours for ours, theirs in (names or {}).items()}
    tables: dict[str, dict[str, Any]] = {}
    for path, module_plan in plan.plan.items():
        for theirs, ps in module_plan.items():
            ours = back.get(theirs, theirs)
            if ours in tables:
                raise PlanError(f"table '{ours}' appears in more than one module of the TorchRec plan")
            tables[ours] = _entry(ours, ps, f" (module '{path}')" if path else "")
    local = local_world_size if local_world_size not in (None, world_size) else None
    return document_from_data(
        {
            "world_size": world_size,
            "device_type": device_type,
            "sharder": "torchrec",
            "tables": tables,
            **({"local_world_size": local} if local is not None else {}),
        },
        world_size,
        "TorchRec sharding plan",
    )
