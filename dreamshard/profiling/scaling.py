"""The scaling rule: how big tables are shrunk for profiling, keeping their access pattern
(docs/architecture/measuring.md, "Measuring").

Profiling allocates every table of a device for real, so a production table is profiled on fewer rows
(`ScalingRule`). Its dim, pooling and reuse histogram are kept: indices are drawn inside the rows used
(dreamshard.inventory.indices), so while those outnumber the unique rows a batch touches, the lookups, bytes read
and update traffic are the unscaled ones. Lookups are never scaled; dims are padded to a multiple of 4.
"""

from __future__ import annotations

from dataclasses import dataclass

from dreamshard.values import Table

MB = 1024 * 1024
CPU_MAX_TABLE_BYTES = 16 * MB
CPU_MAX_DEVICE_BYTES = 2048 * MB


def padded_dim(dim: int) -> int:
    """The dim profiled for ``dim`` (next multiple of 4, as FBGEMM's TBE requires)."""
    return (dim + 3) // 4 * 4


@dataclass(frozen=True)
class ScalingRule:
    """Caps applied to a device's tables before they are allocated.

    Per table, at most `row_cap` rows and `max_table_bytes` (on CPU 16 MB: bigger than any L2 and most of an L3
    slice, so a capped table still misses cache as a big one does). Per device, when the capped tables still
    exceed `max_device_bytes` (on CPU 2 GB), every table is shrunk by the same factor, never below `min_rows`."""

    max_table_bytes: int | None = CPU_MAX_TABLE_BYTES
    row_cap: int | None = None
    max_device_bytes: int | None = CPU_MAX_DEVICE_BYTES
    min_rows: int = 1024

    def table_rows(self, table: Table) -> int:
        """Rows used for ``table`` alone (the per-table cap)."""
        rows = table.num_embeddings
        if self.row_cap is not None:
            rows = min(rows, self.row_cap)
        if self.max_table_bytes is not None:
            per_row = padded_dim(table.embedding_dim) * 4
            rows = min(rows, max(1, self.max_table_bytes // per_row))
        return max(1, rows)

    def device_rows(self, tables: list[Table]) -> list[int]:
        """Rows used for each of a device's tables (the per-table cap, then the per-device budget)."""
        rows = [self.table_rows(t) for t in tables]
        if self.max_device_bytes is None or not tables:
            return rows
        total = sum(r * padded_dim(t.embedding_dim) * 4 for r, t in zip(rows, tables, strict=True))
        if total <= self.max_device_bytes:
            return rows
        factor = self.max_device_bytes / total
        return [max(min(r, self.min_rows), int(r * factor)) for r in rows]

    def device_bytes(self, tables: list[Table]) -> int:
        """Bytes of weights profiling allocates for these tables on one device."""
        rows = self.device_rows(tables)
        return sum(r * padded_dim(t.embedding_dim) * 4 for r, t in zip(rows, tables, strict=True))


CPU_RULE = ScalingRule()
#: On a GPU the tables are allocated at full size unless an explicit row cap is given (the per-device budget
#: is set from free GPU memory by the CUDA backend).
CUDA_RULE = ScalingRule(max_table_bytes=None, max_device_bytes=None)
