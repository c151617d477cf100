"""Where the profile stage's batches run when they do not run in its own process: the batch dispatchers
registered under the `dreamshard.dispatchers` entry point group (docs/architecture/pipeline.md, "Profiling fan-out").

The Prefect flows register `workers` (one run of the profile-batch deployment per batch, `dreamshard_flows.fanout`),
so the library never imports Prefect. A dispatcher is called as

    dispatcher(batches, store_uri, endpoint_url, settings, parent_task_run_id=..., log=...)

with the stage's batches (`usecases.profile_batches.Batches`: which are pending, `submit` writes a batch's spec
where a worker reads it, `written` says whether its shard came back), the store's URI a worker reaches and the
`pipeline` settings, and returns {batch id: [the runs it started]}.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import entry_points

from dreamshard.errors import ConfigError

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
