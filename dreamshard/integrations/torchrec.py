"""Plans in TorchRec: a dreamshard plan as TorchRec's ``ShardingPlan``, and a TorchRec plan as a dreamshard Plan
(docs/torchrec.md; docs/architecture/measuring.md, "Integrations").

Using a plan (the one documented call)::

    from dreamshard.integrations.torchrec import load_sharding_plan
    plan = load_sharding_plan("tr.json", ebc, world_size=dist.get_world_size())
    model = DistributedModelParallel(ebc, device=device, plan=plan, sharders=sharders)

Every shardable module of the model is planned under its own path: an ``EmbeddingBagCollection``'s tables with
its sharder's parameter shardings, an ``EmbeddingCollection``'s (sequence tables) with its own (which has no
table_row_wise: a plan that asks it is refused, naming the table); each table is found in the model by its name.
Per table the plan becomes TorchRec's own generator (`construct_module_sharding_plan`), with every table's shape
checked against the module (`check_table_shape`) and the file's kernel and carried constraints set in its
``ParameterSharding`` (dreamshard.integrations.torchrec_carried). torchrec is an optional dependency, imported
inside the functions: without it these calls raise a one-line MissingDependencyError with the install command.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.nn as nn

from dreamshard.errors import PlanError
from dreamshard.integrations import require_torchrec
from dreamshard.integrations.torchrec_build import build_ebc as build_ebc  # the modules' builders lived here
from dreamshard.integrations.torchrec_build import build_model as build_model
from dreamshard.integrations.torchrec_build import module_names
from dreamshard.integrations.torchrec_build import table_configs as table_configs
from dreamshard.integrations.torchrec_build import torchrec_table_name as torchrec_table_name
from dreamshard.integrations.torchrec_carried import parameter_sharding_fields
from dreamshard.integrations.torchrec_file import (
    TableSharding,
    TorchRecPlanFile,
    document_from_data,
    plan_from_document,
    read_torchrec_plan,
    torchrec_document,
)
from dreamshard.integrations.torchrec_import import document_from_sharding_plan
from dreamshard.integrations.torchrec_model import schema_fingerprints
from dreamshard.values import Inventory, Plan, Topology

if TYPE_CHECKING:  # optional dependency: torchrec (annotations only)
    from torchrec.distributed.types import ModuleSharder, ShardingPlan  # optional dependency: torchrec

PlanSource = TorchRecPlanFile | Plan | str | Path


def _sharder_map(sharders: Sequence[ModuleSharder[Any]] | None) -> dict[type, ModuleSharder[Any]]:
    from torchrec.distributed.sharding_plan import get_module_to_default_sharders  # optional dependency: torchrec

    out = dict(get_module_to_default_sharders())
    out.update({s.module_type: s for s in sharders or ()})
    return out


def _embedding_modules(
    module_or_tables: Any, sharders: Sequence[ModuleSharder[Any]] | None
) -> list[tuple[str, Any, Any]]:
    """[(module path, module, its sharder)]: the shardable embedding modules of a model, outermost only."""
    from torchrec.modules.embedding_configs import EmbeddingBagConfig, EmbeddingConfig  # optional dependency: torchrec
    from torchrec.modules.embedding_modules import (  # optional dependency: torchrec
        EmbeddingBagCollection,
        EmbeddingCollection,
    )

    by_type = _sharder_map(sharders)
    if isinstance(module_or_tables, Sequence) and not isinstance(module_or_tables, (str, bytes)):
        configs = list(module_or_tables)
        meta = torch.device("meta")
        if configs and all(isinstance(c, EmbeddingBagConfig) for c in configs):
            return [("", EmbeddingBagCollection(tables=configs, device=meta), by_type[EmbeddingBagCollection])]
        if configs and all(isinstance(c, EmbeddingConfig) for c in configs):
            return [("", EmbeddingCollection(tables=configs, device=meta), by_type[EmbeddingCollection])]
        raise PlanError("expected a module, or a non-empty list of EmbeddingBagConfig (or of EmbeddingConfig)")
    if not isinstance(module_or_tables, nn.Module):
        raise PlanError(f"expected a torch module or a list of table configs, got {type(module_or_tables).__name__}")
    found: list[tuple[str, Any, Any]] = []
    for path, sub in module_or_tables.named_modules():
        if any(path == p or path.startswith(f"{p}.") for p, _, _ in found if p):
            continue
        sharder = by_type.get(type(sub))
        if sharder is not None:
            found.append((path, sub, sharder))
            if path == "":
                break
    if not found:
        raise PlanError(f"{type(module_or_tables).__name__} holds no embedding module TorchRec can shard")
    return found


def _generator(table: str, spec: TableSharding, rows: int, dim: int, world_size: int, local_size: int) -> Any:
    """TorchRec's per-parameter sharding generator for one table of the plan (shape checked first), its
    ParameterSharding carrying the file's kernel and constraints (`_with_fields`)."""
    # optional dependency: torchrec
    from torchrec.distributed.sharding_plan import column_wise, data_parallel, row_wise, table_row_wise, table_wise

    spec.check_shape(table, rows, dim, world_size, local_size)
    kernel = spec.compute_kernel
    kind = spec.sharding_type
    if kind == "table_wise":
        generator = table_wise(rank=spec.ranks[0], compute_kernel=kernel)
    elif kind == "data_parallel":
        generator = data_parallel()  # TorchRec picks the dense kernel, the file's (checked) kernel
    elif kind == "row_wise":
        generator = row_wise(compute_kernel=kernel)
    elif kind == "table_row_wise":
        generator = table_row_wise(host_index=spec.ranks[0] // local_size)  # takes no kernel: `_with_fields` sets it
    elif len({sh.width for sh in spec.column_shards()}) == 1:  # column_wise: shard i (in column order) on ranks[i]
        generator = column_wise(ranks=[sh.device for sh in spec.column_shards()], compute_kernel=kernel)
    else:
        generator = _column_ranges_generator(spec)
    return _with_fields(generator, spec)


def _with_fields(generator: Any, spec: TableSharding) -> Any:
    """`generator` with its ParameterSharding's compute kernel set (``table_row_wise`` takes none) and the fields
    the file carries (`torchrec_carried.parameter_sharding_fields`: cache params, enforce_hbm, ...)."""
    fields = parameter_sharding_fields(spec)

    def generate(*args: Any) -> Any:
        ps = generator(*args)
        ps.compute_kernel = spec.compute_kernel
        for name, value in fields.items():
            setattr(ps, name, value)
        return ps

    return generate


def _check_type(table: str, spec: TableSharding, sharder: Any, where: str, device_type: str) -> None:
    """PlanError naming the table when the module's sharder shards its tables in no such type on any device (an
    EmbeddingCollection's sequence tables have no table_row_wise). A sharder's cpu list is narrower than what runs
    on cpu (row-wise bag tables train there), so the types of both device types count."""
    allowed = list(dict.fromkeys([*sharder.sharding_types(device_type), *sharder.sharding_types("cuda")]))
    if spec.sharding_type not in allowed:
        raise PlanError(
            f"table '{table}' of {where} is {spec.sharding_type} in the plan, but {type(sharder).__name__} shards "
            f"its tables {', '.join(allowed)}; re-plan"
        )


def _column_ranges_generator(spec: TableSharding) -> Any:
    """Unequal column shards: the ParameterSharding ``column_wise`` would build, with our widths and ranks."""
    from torchrec.distributed.sharding_plan import placement  # optional dependency: torchrec
    from torchrec.distributed.types import (  # optional dependency: torchrec
        EnumerableShardingSpec,
        ParameterSharding,
        ShardingType,
        ShardMetadata,
    )

    shards = spec.column_shards()
    ranges = [(sh.start, sh.end) for sh in shards]
    ranks = [sh.device for sh in shards]

    def generate(param: Any, local_size: int, world_size: int, device_type: str, sharder: Any) -> Any:
        rows = int(param.shape[0])
        shards = [
            ShardMetadata(
                shard_offsets=[0, start],
                shard_sizes=[rows, end - start],
                placement=placement(device_type, rank, local_size),
            )
            for (start, end), rank in zip(ranges, ranks, strict=True)
        ]
        return ParameterSharding(
            sharding_type=ShardingType.COLUMN_WISE.value,
            compute_kernel=spec.compute_kernel,
            ranks=ranks,
            sharding_spec=EnumerableShardingSpec(shards),
        )

    return generate


def _document(source: PlanSource, world_size: int | None, inventory: Inventory | None = None) -> TorchRecPlanFile:
    if isinstance(source, TorchRecPlanFile):
        return document_from_data(source.model_dump(), world_size)
    if isinstance(source, Plan):  # shapes from the inventory, when given (the fingerprint is checked)
        return document_from_data(torchrec_document(source, inventory).model_dump(), world_size)
    return read_torchrec_plan(source, world_size)


def check_table_shape(
    table: str,
    spec: TableSharding,
    rows: int,
    dim: int,
    where: str,
    world_size: int | None = None,
    local_size: int | None = None,
) -> None:
    """THE shape check of a planned table against the module's parameter (every route: a plan file, a Plan with its
    inventory, the store's current plan): rows and dim equal where the plan states them, column ranges tiling
    the dim in multiples of 4, row ranges TorchRec's row blocks of the rows (`world_size` ranks, `local_size` per
    host; default: the ranks the row ranges name). PlanError naming the table and both shapes."""
    if (spec.num_embeddings or rows, spec.embedding_dim or dim) != (rows, dim):
        raise PlanError(
            f"table '{table}' is {spec.num_embeddings or rows}x{spec.embedding_dim or dim} in the plan but "
            f"{rows}x{dim} in {where}"
        )
    ranks = world_size or max(spec.ranks) + 1
    spec.check_shape(table, rows, dim, ranks, local_size or ranks)


def _check_schema(plan: Plan, module_or_tables: Any, mapped: Mapping[str, str]) -> None:
    """A Plan given without its inventory: its schema fingerprint (when it has one) must be the module's
    (`torchrec_model.schema_fingerprints`, the module's tables under their dreamshard names)."""
    if plan.schema_fingerprint is None or not isinstance(module_or_tables, nn.Module):
        return
    ours = {theirs: name for name, theirs in mapped.items()}
    if plan.schema_fingerprint not in schema_fingerprints(module_or_tables, ours):
        raise PlanError(
            f"plan {plan.plan_id} was made for other tables than the module's (schema fingerprints differ: a "
            f"table's rows, dim, dtype or features); pass inventory= (its inventory) to see which table differs"
        )


def sharding_plan(
    source: PlanSource,
    module_or_tables: Any,
    world_size: int | None = None,
    *,
    local_size: int | None = None,
    sharders: Sequence[ModuleSharder[Any]] | None = None,
    names: Mapping[str, str] | None = None,
    inventory: Inventory | None = None,
) -> ShardingPlan:
    """TorchRec's ``ShardingPlan`` for `module_or_tables` from a plan file, its parsed form or a Plan.

    `world_size` defaults to the plan's (a different one is refused), `local_size` (ranks per host) to the file's
    ``local_world_size``, else the world size; `sharders` are the ones given to DMP (their module types decide
    which modules are sharded); `names` maps dreamshard table names to the module's where they differ. Every
    table's shape is checked against the module (`check_table_shape`): a plan file states its shapes; a Plan gets
    them from `inventory` (its inventory), and without one its `schema_fingerprint` must be the module's.
    """
    require_torchrec()
    from torchrec.distributed.sharding_plan import construct_module_sharding_plan  # optional dependency: torchrec
    from torchrec.distributed.types import ShardingPlan  # optional dependency: torchrec

    doc = _document(source, world_size, inventory)
    local = local_size or doc.local_world_size or doc.world_size
    if doc.world_size % local:
        raise PlanError(f"local_size {local} does not divide the plan's {doc.world_size} ranks into hosts")
    twrw = [t for t, spec in doc.tables.items() if spec.sharding_type == "table_row_wise"]
    if twrw and local != (doc.local_world_size or doc.world_size):
        raise PlanError(
            f"table '{twrw[0]}' is table_row_wise over hosts of {doc.local_world_size or doc.world_size} "
            f"ranks, but local_size is {local}"
        )
    mapped = module_names(list(doc.tables), names)
    wanted = {theirs: ours for ours, theirs in mapped.items()}
    plans: dict[str, Any] = {}
    placed: dict[str, str] = {}
    for path, module, sharder in _embedding_modules(module_or_tables, sharders):
        params = sharder.shardable_parameters(module)
        per_param: dict[str, Any] = {}
        for theirs, param in params.items():
            ours = wanted.get(theirs)
            where = f"module '{path}'" if path else "the module"
            if ours is None:
                raise PlanError(f"table '{theirs}' of {where} has no entry in the plan; plan every table of the model")
            if ours in placed:
                raise PlanError(f"table '{ours}' is in both '{placed[ours]}' and '{path}'; give them distinct names")
            spec = doc.tables[ours]
            rows, dim = (int(x) for x in param.shape)
            check_table_shape(ours, spec, rows, dim, where, doc.world_size, local)
            _check_type(ours, spec, sharder, where, doc.device_type)
            per_param[theirs] = _generator(ours, spec, rows, dim, doc.world_size, local)
            placed[ours] = path
        plans[path] = construct_module_sharding_plan(
            module,
            per_param_sharding=per_param,
            sharder=sharder,
            local_size=local,
            world_size=doc.world_size,
            device_type=doc.device_type,
        )
    missing = [t for t in doc.tables if t not in placed]
    if missing:
        raise PlanError(
            f"the plan shards table '{missing[0]}', which the module does not have ({len(missing)} missing)"
        )
    if isinstance(source, Plan) and inventory is None:
        _check_schema(source, module_or_tables, mapped)
    return ShardingPlan(plan=plans)


def load_sharding_plan(
    path: str | Path,
    module_or_tables: Any,
    world_size: int | None = None,
    **options: Any,
) -> ShardingPlan:
    """The documented call: the file ``dreamshard plan --torchrec-out`` wrote -> TorchRec's ``ShardingPlan`` for
    `module_or_tables` (options as in `sharding_plan`)."""
    return sharding_plan(Path(path), module_or_tables, world_size, **options)


def plan_from_torchrec(
    source: ShardingPlan | PlanSource,
    inventory: Inventory,
    topology: Topology,
    *,
    names: Mapping[str, str] | None = None,
    sharder: str | None = None,
) -> Plan:
    """A TorchRec plan (``ShardingPlan``, plan file or path) as a dreamshard Plan over `inventory` on `topology`,
    for comparison with dreamshard's (memory checked under dreamshard's model). Names: as in `sharding_plan`."""
    if isinstance(source, (TorchRecPlanFile, Plan, str, Path)):
        doc = _document(source, topology.num_devices)
    else:
        mapped = module_names(inventory.table_names, names)
        doc = document_from_sharding_plan(
            source, topology.num_devices, topology.device_type, mapped, topology.local_world_size
        )
    return plan_from_document(doc, inventory, topology, sharder)
