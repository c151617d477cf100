"""The scaling rule: how big tables are shrunk for profiling, keeping their access pattern.

Profiling allocates every table of a device for real. Production tables (tens of GB) cannot be allocated on a
CPU host, and a 1,000-table device would not fit either, so a table is profiled on ``rows_used`` rows:

1. **Per-table cap.** ``rows_used = min(num_embeddings, row_cap, max_table_bytes // (dim_padded * 4))``.
   ``max_table_bytes`` is 16 MB on the CPU backend (bigger than any L2 and most of an L3 slice, so a capped
   table still misses cache the way a big one does) and unlimited on CUDA; ``row_cap`` is an optional
   explicit setting (``make_oracle(row_cap=...)``, recorded in ``BackendInfo.row_cap``).
2. **Per-device budget.** If the capped tables of one device still exceed ``max_device_bytes`` (2 GB on the
   CPU backend), every table of that device is shrunk by the same factor (never below ``min_rows``), so
   profiling any device stays within a bounded amount of memory (a 100-table device: at most 1.6 GB).
3. **What is kept.** The embedding dim, the pooling factor (bag lengths) and the reuse histogram are unchanged:
   indices are drawn by ``dreamshard.inventory.indices.synthesize_indices(table, B, rng, num_rows=rows_used)``,
   which places the batch's unique rows and their per-batch access counts inside ``[0, rows_used)``. As long as
   ``rows_used`` is at least the number of unique rows a batch touches, the per-batch reuse pattern (and so the
   lookups, the bytes read and the update traffic) is exactly the unscaled one; only the address range shrinks.
4. **Padding.** FBGEMM's TBE wants dims that are multiples of 4; other dims are padded up to the next multiple
   of 4 for profiling (``padded_dim``). Output/communication bytes always use the true dim.
5. **Lookups are never scaled** (they are the work measured): a device's index batches are sized before anything
   is allocated and refused above ``MAX_INDEX_BYTES`` (the index budget, ``dreamshard.inventory.indices``;
   checked by ``profiling.base.TorchBackend.time_device``).
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
    """Caps applied to a device's tables before they are allocated (see the module docstring)."""

    max_table_bytes: int | None = CPU_MAX_TABLE_BYTES
    row_cap: int | None = None
    max_device_bytes: int | None = CPU_MAX_DEVICE_BYTES
    min_rows: int = 1024

    def table_rows(self, table: Table) -> int:
        """Rows used for ``table`` alone (rule 1)."""
        rows = table.num_embeddings
        if self.row_cap is not None:
            rows = min(rows, self.row_cap)
        if self.max_table_bytes is not None:
            per_row = padded_dim(table.embedding_dim) * 4
            rows = min(rows, max(1, self.max_table_bytes // per_row))
        return max(1, rows)

    def device_rows(self, tables: list[Table]) -> list[int]:
        """Rows used for each of a device's tables (rules 1 and 2)."""
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
