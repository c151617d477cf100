"""Where the profile stage's batches run when they do not run in its own process: the batch dispatchers
registered under the `dreamshard.dispatchers` entry point group (docs/architecture/pipeline.md, "Profiling fan-out").

The Prefect flows register `workers` (one run of the profile-batch deployment per batch, `dreamshard_flows.fanout`),
so the library never imports Prefect. A dispatcher is called as

    dispatcher(store, store_uri, endpoint_url, specs, settings, parent_task_run_id=..., log=...)

with the plan store the batches' specs and shards go to, the specs (`profiling.batches.BatchSpec`) and the
`pipeline` settings, and returns {batch id: [the runs it started]}. It writes each spec it hands out
(`submit`), and a batch is done when its shard is written (`shard_written`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from importlib.metadata import entry_points

from dreamshard.errors import ConfigError
from dreamshard.profiling.batches import BatchSpec, read_shard, write_spec
from dreamshard.store.base import PlanStore

#: The entry point group of the batch dispatchers.
DISPATCHER_GROUP = "dreamshard.dispatchers"

Dispatcher = Callable[..., object]


def dispatcher(name: str) -> Dispatcher:
    """The registered batch dispatcher `name` (entry point group `dreamshard.dispatchers`)."""
    found = {ep.name: ep for ep in entry_points(group=DISPATCHER_GROUP)}
    if name not in found:
        raise ConfigError(
            f"no batch dispatcher '{name}' is installed (the Prefect flows provide 'workers'; "
            f"install dreamshard with its flows), or use --dispatch local"
        )
    loaded = found[name].load()
    if not callable(loaded):
        raise ConfigError(f"batch dispatcher '{name}' is not callable")
    return loaded


def pending(store: PlanStore, specs: Sequence[BatchSpec]) -> list[BatchSpec]:
    """The batches without a (valid) shard yet: a resumed campaign runs only these."""
    return [s for s in specs if not shard_written(store, s)]


def shard_written(store: PlanStore, spec: BatchSpec) -> bool:
    """Whether the batch's shard is in the store (checked against its spec)."""
    return read_shard(store, spec) is not None


def submit(store: PlanStore, spec: BatchSpec) -> str:
    """Write the batch's spec where a worker reads it; returns its key."""
    return write_spec(store, spec)
