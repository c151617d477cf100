"""The ranges of inputs a model was trained on, and the check that an inventory to plan stays inside them
(docs/architecture/learning.md, "Learning").

The model card records them from the measured records: table dims, rows and pooling, tables per device, device
counts, the batch-size span and the device types of the backends that measured (simulated records add none).
Planning outside them still works, but the cost net extrapolates there: the plan lists each excursion in
`Plan.out_of_range`, the CLI warns and the publish gate asks for a measured comparison. A card without device
types is read through its `backend` (`ModelCard.out_of_range`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pydantic import BaseModel, ConfigDict

from dreamshard.placement.expand import unit_table
from dreamshard.values import Measurement, Table, Topology, parse_unit

#: an excursion is reported only past this relative margin (a 1% larger table is not "out of range")
MARGIN = 0.05
#: backends whose records say which device type they measured (the others are simulated)
DEVICE_BACKENDS = frozenset({"cpu", "cuda"})


class Span(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    lo: float
    hi: float

    def outside(self, x: float) -> str | None:
        if x < self.lo * (1 - MARGIN):
            return "below"
        if x > self.hi * (1 + MARGIN):
            return "above"
        return None

    def widen(self, other: Span) -> Span:
        return Span(lo=min(self.lo, other.lo), hi=max(self.hi, other.hi))


class FeatureRanges(BaseModel):
    """Per-table feature spans, devices per placement, tables per device, batch sizes, dtypes, device types."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    embedding_dim: Span
    num_embeddings: Span
    pooling_factor: Span
    tables_per_device: Span
    num_devices: Span
    batch_sizes: tuple[int, ...]  # every batch size profiled; checked as the span min..max
    dtypes: tuple[str, ...]
    # device types of the backends that measured the records; () = not recorded (cards written before it)
    device_types: tuple[str, ...] = ()

    @property
    def batch_span(self) -> Span | None:
        return Span(lo=min(self.batch_sizes), hi=max(self.batch_sizes)) if self.batch_sizes else None

    def merge(self, other: FeatureRanges) -> FeatureRanges:
        return FeatureRanges(
            embedding_dim=self.embedding_dim.widen(other.embedding_dim),
            num_embeddings=self.num_embeddings.widen(other.num_embeddings),
            pooling_factor=self.pooling_factor.widen(other.pooling_factor),
            tables_per_device=self.tables_per_device.widen(other.tables_per_device),
            num_devices=self.num_devices.widen(other.num_devices),
            batch_sizes=tuple(sorted({*self.batch_sizes, *other.batch_sizes})),
            dtypes=tuple(sorted({*self.dtypes, *other.dtypes})),
            device_types=tuple(sorted({*self.device_types, *other.device_types})),
        )

    def check(self, tables: Sequence[Table], topology: Topology) -> list[str]:
        """One line per kind of excursion (with the count and the first table), empty when all is in range."""
        out: list[str] = []
        for field in ("embedding_dim", "num_embeddings", "pooling_factor"):
            span: Span = getattr(self, field)
            hits = [(t.name, float(getattr(t, field))) for t in tables if span.outside(float(getattr(t, field)))]
            if hits:
                name, v = hits[0]
                out.append(
                    f"{len(hits)} table(s) with {field} outside the trained range {span.lo:g}..{span.hi:g} "
                    f"(first: '{name}' {v:g})"
                )
        dtypes = sorted({t.dtype for t in tables} - set(self.dtypes))
        if dtypes:
            out.append(f"dtype {', '.join(dtypes)} never seen in training (trained: {', '.join(self.dtypes)})")
        if self.num_devices.outside(topology.num_devices):
            out.append(
                f"{topology.num_devices} devices, outside the trained range "
                f"{self.num_devices.lo:g}..{self.num_devices.hi:g}"
            )
        per_device = len(tables) / max(1, topology.num_devices)
        if self.tables_per_device.outside(per_device):
            out.append(
                f"{per_device:.1f} tables per device on average, outside the trained range "
                f"{self.tables_per_device.lo:g}..{self.tables_per_device.hi:g}"
            )
        batch = self.batch_span
        if batch is not None and batch.outside(topology.batch_size):
            out.append(f"batch size {topology.batch_size}, outside the trained range {batch.lo:g}..{batch.hi:g}")
        out += device_type_check(self.device_types, topology)
        return out


def device_type_check(device_types: Sequence[str], topology: Topology) -> list[str]:
    """One line when `topology`'s device type is not among `device_types` (none recorded: nothing to check)."""
    if not device_types or topology.device_type in device_types:
        return []
    return [f"device_type {topology.device_type}: the model learned from {' and '.join(device_types)} measurements"]


def _span(values: Iterable[float]) -> Span:
    v = list(values)
    return Span(lo=min(v), hi=max(v)) if v else Span(lo=0.0, hi=0.0)


def ranges_from(records: Sequence[Measurement], tables: dict[str, Table]) -> FeatureRanges:
    """The ranges covered by `records` (tables looked up by name in `tables`)."""
    seen: set[str] = set()
    per_device: list[float] = []
    devices: list[float] = []
    batches: set[int] = set()
    device_types: set[str] = set()
    for m in records:
        seen.update(m.placement)
        counts = [0] * m.topology.num_devices
        for d in m.placement.values():
            counts[d] += 1
        per_device += [float(c) for c in counts if c]
        if m.kind == "placement":
            devices.append(float(m.topology.num_devices))
        batches.add(m.topology.batch_size)
        if m.backend.name in DEVICE_BACKENDS:
            device_types.add(m.backend.name)
    ts = [unit_table(tables, n) for n in sorted(seen) if n in tables or parse_unit(n).table in tables]
    return FeatureRanges(
        embedding_dim=_span(t.embedding_dim for t in ts),
        num_embeddings=_span(t.num_embeddings for t in ts),
        pooling_factor=_span(t.pooling_factor for t in ts),
        tables_per_device=_span(per_device),
        num_devices=_span(devices or [1.0]),
        batch_sizes=tuple(sorted(batches)),
        dtypes=tuple(sorted({t.dtype for t in ts})),
        device_types=tuple(sorted(device_types)),
    )
