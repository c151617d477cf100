"""An inventory from a TorchRec model and its data: `inventory_from_module(model, batches, batch_size)`
(docs/torchrec.md; docs/architecture/measuring.md, "Integrations").

The tables are the model's `EmbeddingBagCollection`s' (weighted ones too) and `EmbeddingCollection`s' (sequence
tables: `Table.pooled` false), named as TorchRec names them, with their rows, dims, dtypes and features;
`module_inventory` is that schema alone (what `load_current_sharding_plan` fingerprints). The statistics come from
the model's own batches (dreamshard.integrations.torchrec_batches): lookups per sample of each feature (a bag's
pooling, a sequence's ids) and each table's reuse histogram at the planned batch size; a feature no batch measured
takes the team's ``pooling_factors`` constraint (dreamshard.integrations.torchrec_constraints). The team's
constraints ride on their tables, and the training job's topology (`job_topology`) on the inventory. Bad batches
are one-line typed errors naming the batch, feature or table.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch.nn as nn
from pydantic import ValidationError

from dreamshard.errors import ConfigError, InventoryError, first_line
from dreamshard.integrations import require_torchrec
from dreamshard.integrations.torchrec_batches import Batch as Batch  # the batch readers' home was this module
from dreamshard.integrations.torchrec_batches import load_batches as load_batches
from dreamshard.integrations.torchrec_batches import rescaled_histogram as rescaled_histogram
from dreamshard.integrations.torchrec_batches import table_histogram
from dreamshard.integrations.torchrec_constraints import ConstraintsSource, check_tables, load_constraints, pooling_of
from dreamshard.integrations.torchrec_job import job_topology as job_topology  # the job's home is torchrec_job
from dreamshard.integrations.user_code import import_user_module
from dreamshard.values import DType, Feature, Inventory, JobTopology, Table, TableConstraints
from dreamshard.values.names import check_inventory_names


def embedding_modules(model: nn.Module) -> list[tuple[str, Any, bool]]:
    """[(module path, module, pooled)]: every EmbeddingBagCollection (weighted or not; pooled) and
    EmbeddingCollection (sequence tables) in `model`, outermost only."""
    require_torchrec()
    # optional dependency: torchrec
    from torchrec.modules.embedding_modules import EmbeddingBagCollection, EmbeddingCollection

    if not isinstance(model, nn.Module):
        raise InventoryError(
            f"expected a torch module holding EmbeddingBagCollections or EmbeddingCollections, got "
            f"{type(model).__name__}"
        )
    found: list[tuple[str, Any, bool]] = []
    for path, sub in model.named_modules():
        if any(path.startswith(f"{p}.") for p, _, _ in found if p) or (found and found[0][0] == ""):
            continue
        if isinstance(sub, (EmbeddingBagCollection, EmbeddingCollection)):
            found.append((path, sub, isinstance(sub, EmbeddingBagCollection)))
        elif type(sub).__name__ in OTHER_SHARDED:
            where = f"module '{path}'" if path else "the model"
            raise InventoryError(
                f"{where} is a {type(sub).__name__}, which dreamshard does not plan (it plans "
                f"EmbeddingBagCollections and EmbeddingCollections)"
            )
    if not found:
        raise InventoryError(f"{type(model).__name__} holds no EmbeddingBagCollection or EmbeddingCollection")
    return found


#: TorchRec's other shardable embedding modules (its default sharders' module types): refused by name rather than
#: planned as the EBC or EC they wrap, whose plan their own sharder would not take.
OTHER_SHARDED: tuple[str, ...] = (
    "FeatureProcessedEmbeddingBagCollection",
    "FusedEmbeddingBagCollection",
    "PECEmbeddingCollection",
    "ManagedCollisionEmbeddingBagCollection",
    "ManagedCollisionEmbeddingCollection",
    "QuantManagedCollisionEmbeddingCollection",
)


def dense_embeddings(model: nn.Module) -> list[str]:
    """Warnings for the plain ``nn.Embedding`` / ``nn.EmbeddingBag`` modules of `model`: TorchRec does not shard
    them (DMP keeps them as dense, replicated parameters), so the inventory does not hold them."""
    planned = [path for path, _, _ in embedding_modules(model)]
    if "" in planned:  # the model is one EBC or EC
        return []
    return [
        f"module '{path}' is a plain {type(sub).__name__} ({sub.num_embeddings}x{sub.embedding_dim}): not a TorchRec "
        f"module, so it stays dense (replicated) and is not in the inventory"
        for path, sub in model.named_modules()
        if isinstance(sub, (nn.Embedding, nn.EmbeddingBag)) and not path.startswith(tuple(f"{p}." for p in planned))
    ]


def _reason(e: ValidationError) -> str:
    err = e.errors()[0]
    field = ".".join(str(x) for x in err.get("loc", ()))
    return f"{field}: {err['msg']}" if field else str(err["msg"])


#: TorchRec's data types dreamshard plans, by their enum name.
_DTYPES: dict[str, DType] = {"FP32": "fp32", "FP16": "fp16"}


def _table(
    config: Any, where: str, pooled: bool, pooling: dict[str, float] | None = None, weighted: bool = False
) -> Table:
    """The Table of one EmbeddingBagConfig (`pooled`; `weighted`: of a weighted EBC) or EmbeddingConfig (pooling
    per feature from `pooling`, 0 without it)."""
    dtype = _DTYPES.get(getattr(config.data_type, "name", str(config.data_type)))
    if dtype is None:
        raise InventoryError(
            f"table '{config.name}' of {where} has data type {config.data_type}; dreamshard plans fp32 and fp16 tables"
        )
    names = list(config.feature_names)
    pool = pooling or {}
    features = () if names == [config.name] else tuple(Feature(name=f, pooling_factor=pool.get(f, 0.0)) for f in names)
    try:
        return Table(
            name=config.name,
            num_embeddings=int(config.num_embeddings),
            embedding_dim=int(config.embedding_dim),
            pooling_factor=sum(pool.get(f, 0.0) for f in names),
            dtype=dtype,
            features=features,
            pooled=pooled,
            weighted=weighted,
        )
    except ValidationError as e:  # a dim FBGEMM cannot run, rows out of bounds, ...
        raise InventoryError(f"table '{config.name}' of {where}: {_reason(e)}") from None


def module_tables(model: nn.Module, pooling: dict[str, float] | None = None) -> list[Table]:
    """The tables of every EBC and EC in `model`, named as TorchRec names them (an EC's: `pooled` false); a table
    whose only feature is named like it has no `features` (one output), any other lists its features.
    InventoryError if two share a name or a feature."""
    tables: dict[str, tuple[str, Table]] = {}
    for path, module, pooled in embedding_modules(model):
        where = f"module '{path}'" if path else "the module"
        configs = module.embedding_bag_configs() if pooled else module.embedding_configs()
        for config in configs:
            t = _table(config, where, pooled, pooling, weighted=pooled and bool(module.is_weighted()))
            if t.name in tables:
                raise InventoryError(
                    f"table '{t.name}' is in both {tables[t.name][0]} and {where}; give them distinct names"
                )
            tables[t.name] = (where, t)
    return [t for _, t in tables.values()]


def module_inventory(model: nn.Module, name: str = "module") -> Inventory:
    """The model's tables as an inventory, schema only (pooling 0): its `schema_fingerprint` is the model's."""
    try:
        return Inventory(name=name, tables=tuple(module_tables(model)))
    except ValidationError as e:
        raise InventoryError(f"the model's tables: {_reason(e)}") from None


def schema_fingerprints(model: nn.Module, names: dict[str, str] | None = None) -> tuple[str, ...]:
    """The schema fingerprints a plan for `model` may carry: its tables' schema as measured by `module_inventory`
    (tables renamed by `names`: TorchRec name -> dreamshard name), then, when it differs, the same with the
    features of single-feature tables left out (an inventory written by hand names no features; a shared
    table's features always count)."""
    tables = [t.model_copy(update={"name": (names or {}).get(t.name, t.name)}) for t in module_tables(model)]
    full = Inventory(name="module", tables=tuple(tables)).schema_fingerprint()
    plain = [t.model_copy(update={"features": ()}) if t.num_outputs == 1 else t for t in tables]
    lean = Inventory(name="module", tables=tuple(plain)).schema_fingerprint()
    return (full,) if lean == full else (full, lean)


class _Lookups:
    """What the batches measured: lookups per feature, the features seen, each table's looked-up rows per batch."""

    def __init__(self, schema: Sequence[Table], data: Sequence[Batch]) -> None:
        served = {f: t for t in schema for f in t.feature_names}
        self.batches = len(data)
        self.lookups = {f: 0 for f in served}
        self.seen: set[str] = set()
        self.per_table: dict[str, list[np.ndarray]] = {t.name: [] for t in schema}
        for i, batch in enumerate(data):
            parts: dict[str, list[np.ndarray]] = {}
            for key, (values, _) in batch.items():
                t = served.get(key)
                if t is None:
                    raise InventoryError(f"batch {i} has key '{key}', which no table of the model serves")
                if values.size and (int(values.min()) < 0 or int(values.max()) >= t.num_embeddings):
                    bad = int(values.max()) if int(values.max()) >= t.num_embeddings else int(values.min())
                    raise InventoryError(
                        f"batch {i}: feature '{key}' looks up row {bad} of table '{t.name}', "
                        f"which has {t.num_embeddings} rows"
                    )
                self.seen.add(key)
                self.lookups[key] += values.size
                parts.setdefault(t.name, []).append(values)
            for table, vals in parts.items():
                self.per_table[table].append(np.concatenate(vals))


def _pooling(t: Table, found: _Lookups, batch_size: int, constraints: TableConstraints | None) -> dict[str, float]:
    """{feature: lookups per sample} of table `t`: measured where a batch carried the feature, else the
    constraints' statistics (`pooling_of`), else 0. InventoryError when neither says anything of the table."""
    stated = pooling_of(t, constraints)
    if not any(f in found.seen for f in t.feature_names) and not stated:
        if not found.batches:
            raise InventoryError(
                f"table '{t.name}' has no batches and no 'pooling_factors' constraint: give batches or its pooling"
            )
        raise InventoryError(
            f"table '{t.name}' has no batch data: none of its features ({', '.join(t.feature_names)}) is in any batch"
        )
    return {
        f: found.lookups[f] / (found.batches * batch_size) if f in found.seen else stated.get(f, 0.0)
        for f in t.feature_names
    }


def measure_module(
    model: nn.Module,
    batches: str | Path | Sequence[Any] | None,
    batch_size: int | None,
    planned_batch_size: int = 2048,
    name: str | None = None,
    allow_pickle: bool = False,
    *,
    constraints: ConstraintsSource | None = None,
    job: JobTopology | None = None,
) -> tuple[Inventory, list[str]]:
    """(the inventory, warnings): `inventory_from_module` with its warnings returned instead of emitted."""
    if planned_batch_size < 1 or (batches is not None and (batch_size is None or batch_size < 1)):
        raise InventoryError("batch_size (with batches) and planned_batch_size must be >= 1")
    schema = module_tables(model)
    given = load_constraints(constraints) if constraints is not None else {}
    check_tables(given, {t.name: t for t in schema})
    found = _Lookups(schema, load_batches(batches, batch_size or 1, allow_pickle) if batches is not None else [])
    notes = dense_embeddings(model)
    tables = []
    for t in schema:
        pooling = _pooling(t, found, batch_size or 1, given.get(t.name))
        notes += [
            f"feature '{f}' of table '{t.name}' has no lookups in the batches: pooling 0"
            for f in pooling
            if not pooling[f]
        ]
        features = tuple(Feature(name=f.name, pooling_factor=pooling[f.name]) for f in t.features)
        histogram = table_histogram(found.per_table[t.name], batch_size or 1, planned_batch_size)
        update = {"pooling_factor": math.fsum(pooling.values()), "features": features, "access_histogram": histogram}
        tables.append(t.model_copy(update={**update, "constraints": given.get(t.name)}))
    try:
        inv = Inventory.model_validate(
            {"name": name or "torchrec", "tables": [x.model_dump() for x in tables], "job": job}
        )
    except ValidationError as e:
        raise InventoryError(f"the model's tables: {_reason(e)}") from None
    return check_inventory_names(inv, "the model"), notes


def inventory_from_module(
    model: nn.Module,
    batches: str | Path | Sequence[Any] | None = None,
    batch_size: int | None = None,
    planned_batch_size: int = 2048,
    name: str | None = None,
    allow_pickle: bool = False,
    *,
    constraints: ConstraintsSource | Mapping[str, Any] | None = None,
    world_size: int | None = None,
    devices_per_host: int | None = None,
    memory_gb: float | None = None,
    optimizer: str | None = None,
    device_type: str | None = None,
    topology: Any = None,
    world: str | None = None,
) -> Inventory:
    """The inventory of a TorchRec model measured from its batches; a feature with no lookups is warned about
    (``UserWarning``). A batch key no table serves, a table none of whose features is in any batch (and no
    ``pooling_factors`` constraint), an index outside ``[0, num_embeddings)`` or a batch of another size is an
    InventoryError.

    `constraints`: ``{table: ParameterConstraints(...)}`` (TorchRec's objects as they are), a mapping of their
    fields, or a file (dreamshard.integrations.torchrec_constraints). `world_size` (with `devices_per_host`,
    `memory_gb` per device, `optimizer`, `device_type`) records the training job (`job_topology`; its batch is
    `planned_batch_size`); TorchRec's `topology` (its `Topology`) fills what they do not say, its interconnect
    recorded as the job's world, or `world` names one (`fast`, `nvlink-ib`, `host`, `measured`)."""
    job = job_topology(
        world_size,
        devices_per_host,
        memory_gb,
        optimizer,
        device_type,
        planned_batch_size,
        topology=topology,
        world=world,
    )
    inv, notes = measure_module(
        model, batches, batch_size, planned_batch_size, name, allow_pickle, constraints=constraints, job=job
    )
    for note in notes:
        warnings.warn(note, stacklevel=2)
    return inv


def load_model(spec: str) -> nn.Module:
    """The model `spec` names: ``pkg.mod:build`` (imported with importlib) or ``path/to/file.py:build``, where
    ``build`` is a callable returning the module (called without arguments). ConfigError, one line, otherwise."""
    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr.isidentifier():
        raise ConfigError(f"--model {spec!r}: expected MODULE:CALLABLE (pkg.mod:build or path/to/file.py:build)")
    module = import_user_module(target, f"--model {spec!r}")
    build = getattr(module, attr, None)
    if not callable(build):
        raise ConfigError(f"--model {spec!r}: {target} has no callable '{attr}'")
    try:
        model = build()
    except SystemExit as e:  # the user's code ended the process: never our exit status, never silent
        raise ConfigError(f"--model {spec!r}: {attr}() called sys.exit({e.code!r})") from None
    except Exception as e:  # the user's code
        raise ConfigError(f"--model {spec!r}: {attr}() failed ({type(e).__name__}: {first_line(e)})") from None
    if not isinstance(model, nn.Module):
        raise ConfigError(f"--model {spec!r}: {attr}() returned {type(model).__name__}, not a torch module")
    return model
