"""A profile stage's batches as a batch dispatcher works with them (docs/architecture/pipeline.md, "Profiling
fan-out"): which batches are still to run, handing one out (its spec written where a worker reads it), and
whether its shard came back. The library builds one `Batches` per stage and passes it to the dispatcher it calls
(dreamshard.profiling.dispatch); the dispatcher sees batches by name (`values.BatchRef`), never the store."""

from __future__ import annotations

from collections.abc import Sequence

from dreamshard.profiling.batches import BatchSpec, read_shard, write_spec
from dreamshard.store.base import PlanStore
from dreamshard.values.batches import BatchRef


class Batches:
    """One campaign's batches in its store."""

    def __init__(self, store: PlanStore, specs: Sequence[BatchSpec]) -> None:
        self._store = store
        self._specs = {s.batch_id: s for s in specs}

    def _spec(self, batch: BatchRef) -> BatchSpec:
        spec = self._specs.get(batch.batch_id)
        if spec is None or spec.campaign != batch.campaign:
            raise KeyError(f"no batch {batch.batch_id} in campaign {batch.campaign}")
        return spec

    def all(self) -> list[BatchRef]:
        """Every batch, in planned order."""
        return [
            BatchRef(campaign=s.campaign, batch_id=s.batch_id, inventory=s.inventory.name) for s in self._specs.values()
        ]

    def pending(self) -> list[BatchRef]:
        """The batches without a (valid) shard yet: a resumed campaign runs only these."""
        return [b for b in self.all() if not self.written(b)]

    def written(self, batch: BatchRef) -> bool:
        """Whether the batch's shard is in the store (checked against its spec)."""
        return read_shard(self._store, self._spec(batch)) is not None

    def submit(self, batch: BatchRef) -> str:
        """Write the batch's spec where a worker reads it; returns its key (what the worker's request names)."""
        return write_spec(self._store, self._spec(batch))
