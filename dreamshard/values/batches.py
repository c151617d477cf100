"""Which profiling batch a dispatcher hands out (`BatchRef`): a value the profile stage gives the batch dispatcher
(dreamshard.usecases.profile_batches), which needs no more of a batch than its campaign and id to watch its run."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class BatchRef(BaseModel):
    """One batch of a profiling campaign, by name."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    campaign: str
    batch_id: str
    inventory: str = ""  # the name of the inventory whose tables it measures (its run is named after it)
