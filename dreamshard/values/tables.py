"""Tables and inventories: the lowest layer of the data model (docs/architecture/data-model.md, "Data model").

The bounds of a table's fields, THE embedding-dim rule (`DIM_ALIGN`, `dim_problem`), and the `Table` and
`Inventory` models (a table may be a sequence table, `pooled: false`, and carry `constraints`; an inventory may
record its training `job`). The strict base and number type are in `values/base.py`.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    SerializerFunctionWrapHandler,
    StrictBool,
    field_validator,
    model_serializer,
    model_validator,
)

from dreamshard.values.base import GB, Number, StrictModel, number_only
from dreamshard.values.constraints import TableConstraints
from dreamshard.values.job import JobTopology

#: Number of access-histogram bins: unique rows whose access count in one batch falls in
#: (0,1], (1,2], (2,4], ..., (16384,32768], (32768, inf).
NUM_REUSE_BINS = 17
#: Upper edges of the reuse bins (the last bin is open).
REUSE_BIN_EDGES: tuple[float, ...] = tuple(float(2**i) for i in range(NUM_REUSE_BINS - 1)) + (math.inf,)

DTYPE_BYTES: dict[str, int] = {"fp32": 4, "fp16": 2}

DType = Literal["fp32", "fp16"]

#: Upper bounds that keep table sizes finite in float arithmetic (1 TiB-row tables, 64k-wide rows).
MAX_ROWS = 2**40
MAX_DIM = 2**16
MAX_POOLING = 1e6

#: FBGEMM's table-batched kernels (what profiles and what TorchRec runs) need every embedding dim, and so every
#: column shard's width, to be a positive multiple of this.
DIM_ALIGN = 4


def dim_problem(dim: int) -> str | None:
    """THE embedding-dim rule (tables, synthetic dims, presets, column-shard widths): None when `dim` is a positive
    multiple of DIM_ALIGN, else why not (callers add what to do about it)."""
    if dim >= DIM_ALIGN and dim % DIM_ALIGN == 0:
        return None
    return f"{dim} is not a positive multiple of {DIM_ALIGN} (FBGEMM needs dim % {DIM_ALIGN} == 0)"


def aligned_dim(dim: int) -> int:
    """The smallest legal dim >= `dim` (what to pad a dim to)."""
    return max(DIM_ALIGN, (dim + DIM_ALIGN - 1) // DIM_ALIGN * DIM_ALIGN)


#: The fields of a table that are its schema (Table.schema_fields); the others are statistics. Of `features`, the
#: schema holds the names only (a feature's pooling is a statistic).
SCHEMA_FIELDS: tuple[str, ...] = ("name", "num_embeddings", "embedding_dim", "dtype", "features", "pooled")
#: Separator of column-shard unit names (`table@start:end`, dreamshard.values.shard_name): units of one table
#: serve its features.
SHARD_MARK = "@"
#: Relative tolerance of "pooling_factor is the sum of the features' pooling" (rounding in stored files).
POOLING_SUM_RTOL = 1e-6


class Feature(StrictModel):
    """One sparse feature a table serves (TorchRec's ``feature_names``): its own pooled output per sample."""

    name: Annotated[str, Field(min_length=1)]
    pooling_factor: Annotated[float, Number, Field(ge=0, le=MAX_POOLING)]


class Table(StrictModel):
    """One embedding table.

    `features` empty: the table serves one feature, named like the table, with the table's pooling factor. Given:
    a shared table (TorchRec's ``feature_names`` with several entries, e.g. one `item_id` table for the clicked and
    the viewed item): each feature is looked up in the same rows and has its own pooled output, so the table has
    ``num_outputs = len(features)`` outputs per sample and `pooling_factor` is the sum of the features' (filled in
    when left out, checked when given).
    """

    name: Annotated[str, Field(min_length=1)]
    num_embeddings: Annotated[int, Number, Field(ge=1, le=MAX_ROWS)]
    embedding_dim: Annotated[int, Number, Field(ge=1, le=MAX_DIM)]
    pooling_factor: Annotated[float, Number, Field(ge=0, le=MAX_POOLING)]
    access_histogram: tuple[float, ...] | None = None
    dtype: DType = "fp32"
    features: tuple[Feature, ...] = ()
    # False: a sequence table (TorchRec's EmbeddingCollection): no pooling, one output row per looked-up id, so
    # `pooling_factor` is the ids per sample and the output grows with it (`output_elements_per_sample`)
    pooled: StrictBool = True  # a string such as "false" is refused, never read as a boolean
    # each id comes with a weight (TorchRec's weighted EmbeddingBagCollection, `is_weighted`): told to TorchRec's
    # planner and export; pooled tables only
    weighted: StrictBool = False
    constraints: TableConstraints | None = None  # what the team requires of the table (values/constraints.py)

    @model_validator(mode="before")
    @classmethod
    def _fill_pooling(cls, data: object) -> object:
        """Features without a table pooling factor: the table's is their sum."""
        if isinstance(data, dict) and "pooling_factor" not in data and data.get("features"):
            try:
                total = sum(
                    float(number_only(f["pooling_factor"] if isinstance(f, dict) else f.pooling_factor))
                    for f in data["features"]
                )
            except (KeyError, TypeError, ValueError, AttributeError):
                return data  # the field validators say what is wrong
            return {**data, "pooling_factor": total}
        return data

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        """`features`, `pooled`, `weighted` and `constraints` only when they say something: files written for tables
        without them stay byte for byte as before (and so do their fingerprints)."""
        out = handler(self)
        if not self.features:
            out.pop("features", None)
        if self.pooled:
            out.pop("pooled", None)
        if not self.weighted:
            out.pop("weighted", None)
        if self.constraints is None:
            out.pop("constraints", None)
        else:
            out["constraints"] = self.constraints.given()
        return out

    @model_validator(mode="after")
    def _check_features(self) -> Table:
        problem = self.constraints.feature_problem(self.name, self.feature_names) if self.constraints else ""
        if problem:
            raise ValueError(problem)
        if self.weighted and not self.pooled:
            raise ValueError(f"table '{self.name}' is weighted but not pooled: only a pooled table takes id weights")
        if not self.features:
            return self
        names = [f.name for f in self.features]
        dup = next((n for n in names if names.count(n) > 1), None)
        if dup is not None:
            raise ValueError(f"table '{self.name}' lists feature '{dup}' twice")
        total = sum(f.pooling_factor for f in self.features)
        if abs(total - self.pooling_factor) > POOLING_SUM_RTOL * max(1.0, total):
            raise ValueError(
                f"table '{self.name}': pooling_factor {self.pooling_factor:g} is not the sum of its features' "
                f"pooling ({total:g}); give their sum or leave pooling_factor out"
            )
        return self

    @field_validator("embedding_dim")
    @classmethod
    def _check_dim(cls, v: int) -> int:
        problem = dim_problem(v)
        if problem:
            raise ValueError(f"{problem}; pad it to {aligned_dim(v)}")
        return v

    @field_validator("access_histogram")
    @classmethod
    def _check_histogram(cls, v: tuple[float, ...] | None) -> tuple[float, ...] | None:
        if v is None:
            return v
        if len(v) != NUM_REUSE_BINS:
            raise ValueError(f"must have {NUM_REUSE_BINS} bins, got {len(v)}")
        if any((not math.isfinite(x)) or x < 0 for x in v):
            raise ValueError("bins must be finite and >= 0")
        total = sum(v)
        if abs(total - 1.0) > 1e-3:
            raise ValueError(f"bins must sum to 1 (got {total:.4f})")
        return v

    @property
    def bytes_per_element(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def feature_list(self) -> tuple[Feature, ...]:
        """The features the table serves: its `features`, or the one implied (named like the table)."""
        return self.features or (Feature(name=self.name, pooling_factor=self.pooling_factor),)

    @property
    def feature_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.feature_list)

    @property
    def num_outputs(self) -> int:
        """Pooled outputs per sample: one per feature (1 for a table without `features`)."""
        return max(1, len(self.features))

    @property
    def output_dim(self) -> int:
        """Pooled output elements per sample (dim x num_outputs): what the all-to-all carries for a pooled table."""
        return self.embedding_dim * self.num_outputs

    @property
    def output_elements_per_sample(self) -> float:
        """Output elements per sample: dim x num_outputs for a pooled table; for a sequence table one row of dim
        per looked-up id, dim x pooling_factor (the output follows the lookups, not the bags)."""
        return float(self.output_dim) if self.pooled else self.embedding_dim * self.pooling_factor

    @property
    def size_elements(self) -> int:
        """rows x dim."""
        return self.num_embeddings * self.embedding_dim

    @property
    def size_bytes(self) -> int:
        return self.size_elements * self.bytes_per_element

    @property
    def size_gb(self) -> float:
        return self.size_bytes / GB

    def schema_fields(self) -> dict[str, object]:
        """What the model's code fixes (name, rows, dim, dtype): a change here is a new inventory; a change of
        the statistics only (pooling, reuse) is a new version of the same one."""
        out = {k: v for k, v in self.model_dump().items() if k in SCHEMA_FIELDS and k not in ("features", "pooled")}
        if self.features:  # left out when empty: inventories without features keep their fingerprints
            out["features"] = [f.name for f in self.features]
        if not self.pooled:  # the module kind is the model's code; pooled tables hash as before
            out["pooled"] = False
        return out

    def canonical(self) -> dict[str, object]:
        """Content used for fingerprints: every field, defaults filled, floats rounded stably (`features` only
        when given, so inventories without them keep their fingerprints)."""
        d = self.model_dump()
        d["pooling_factor"] = round(float(d["pooling_factor"]), 9)
        if d["access_histogram"] is not None:
            d["access_histogram"] = [round(float(x), 9) for x in d["access_histogram"]]
        if self.features:
            d["features"] = [
                {"name": f.name, "pooling_factor": round(float(f.pooling_factor), 9)} for f in self.features
            ]
        else:
            d.pop("features", None)
        return d

    def canonical_json(self) -> str:
        """`canonical()` as one compact JSON line (sorted keys): what fingerprints and content keys hash."""
        return json.dumps(self.canonical(), sort_keys=True, separators=(",", ":"))


class Inventory(StrictModel):
    """A named set of embedding tables with unique names."""

    name: Annotated[str, Field(min_length=1)]
    tables: Annotated[tuple[Table, ...], Field(min_length=1)]
    # the training job the tables are planned for (values/job.py); None: the planning run's topology decides
    job: JobTopology | None = None

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        """`job` only when given, as written: inventories without it stay byte for byte as before."""
        out = handler(self)
        if self.job is None:
            out.pop("job", None)
        else:
            out["job"] = self.job.given()
        return out

    @model_validator(mode="after")
    def _unique_names(self) -> Inventory:
        seen: set[str] = set()
        for t in self.tables:
            if t.name in seen:
                raise ValueError(f"duplicate table name '{t.name}'")
            seen.add(t.name)
        served: dict[str, str] = {}  # feature -> the table serving it (a table's column-shard units share them)
        for t in self.tables:
            base = t.name.partition(SHARD_MARK)[0]
            for f in t.feature_names:
                other = served.setdefault(f, base)
                if other != base:
                    raise ValueError(f"feature '{f}' is served by both table '{other}' and table '{base}'")
        return self

    @property
    def num_tables(self) -> int:
        return len(self.tables)

    @property
    def table_names(self) -> list[str]:
        return [t.name for t in self.tables]

    def by_name(self) -> dict[str, Table]:
        return {t.name: t for t in self.tables}

    def subset(self, names: list[str], name: str | None = None) -> Inventory:
        idx = self.by_name()
        return Inventory(name=name or self.name, tables=tuple(idx[n] for n in names))

    def feature_table(self) -> dict[str, str]:
        """{feature name: table name} for every feature the inventory's tables serve."""
        return {f: t.name for t in self.tables for f in t.feature_names}

    def schema_fingerprint(self) -> str:
        """sha256 over the tables' schema (Table.schema_fields: name, rows, dim, dtype, feature names): identifies the
        inventory for a model's code, whatever its statistics; independent of table order and of the inventory's
        name."""
        rows = sorted(json.dumps(t.schema_fields(), sort_keys=True, separators=(",", ":")) for t in self.tables)
        return hashlib.sha256("\n".join(rows).encode()).hexdigest()

    def fingerprint(self) -> str:
        """sha256 over canonical table content (schema and statistics) and the job when one is recorded: one
        version of an inventory;
        independent of key order and table order.

        The inventory name is deliberately not part of it: the same tables are the same workload.
        """
        rows = sorted(t.canonical_json() for t in self.tables)
        if self.job is not None:  # another job is another version; inventories without one hash as before
            rows.append("job:" + json.dumps(self.job.given(), sort_keys=True, separators=(",", ":")))
        return hashlib.sha256("\n".join(rows).encode()).hexdigest()


def renamed_fields(data: Any, renames: Mapping[str, str]) -> Any:
    """For a `model_validator(mode="before")`: a stored mapping with its old field names (`renames`: old -> new)
    read under the new ones, so files written before a rename still load. Both names at once is an error."""
    if not isinstance(data, dict) or not any(old in data for old in renames):
        return data
    out = dict(data)
    for old, new in renames.items():
        if old in out:
            if new in out:
                raise ValueError(f"'{old}' is the old name of '{new}'; give only '{new}'")
            out[new] = out.pop(old)
    return out
