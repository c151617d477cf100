"""The training job an inventory is planned for: its world size, hosts, memory per device, optimizer, batch and the
interconnect it runs on (docs/architecture/data-model.md, "The job's topology" and "The job's world").
`dreamshard inventory from-torchrec` records it beside the tables; plan, replan, the pipeline and the gate plan for it
unless told otherwise."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from dreamshard.values.base import Number, StrictModel
from dreamshard.values.topology import MAX_BATCH, MAX_DEVICE_GB, DeviceType, Optimizer, Topology
from dreamshard.values.world import World


class JobTopology(StrictModel):
    """What the training job runs on. `memory_per_device_gb` and `batch_size` are optional: a planning run's
    template (params `topology`) fills what the job does not say."""

    world_size: Annotated[int, Number, Field(ge=1, le=4096)]
    devices_per_host: Annotated[int, Number, Field(ge=1, le=4096)] | None = None
    device_type: DeviceType = "cpu"
    memory_per_device_gb: Annotated[float, Number, Field(gt=0, le=MAX_DEVICE_GB)] | None = None
    optimizer: Optimizer | None = None
    batch_size: Annotated[int, Number, Field(ge=1, le=MAX_BATCH)] | None = None
    # the interconnect the job runs on (`from-torchrec` records it when TorchRec's topology states it); None: the
    # params' world, if any
    world: World | None = None

    @model_validator(mode="after")
    def _hosts_divide(self) -> JobTopology:
        if self.devices_per_host is not None and self.world_size % self.devices_per_host:
            raise ValueError(
                f"world_size {self.world_size} does not make whole hosts of {self.devices_per_host} devices "
                f"(devices_per_host must divide world_size)"
            )
        said = self.world.devices_per_host if self.world is not None else None
        if said is not None and self.devices_per_host is not None and said != self.devices_per_host:
            raise ValueError(
                f"world.devices_per_host {said} is not the job's devices_per_host {self.devices_per_host}: say one"
            )
        return self

    def topology(self, template: Topology) -> Topology:
        """The job's topology: `template` (params `topology`, the CLI's options) with what the job fixes."""
        update: dict[str, object] = {
            "num_devices": self.world_size,
            "devices_per_host": self.devices_per_host,
            "device_type": self.device_type,
        }
        for field in ("memory_per_device_gb", "optimizer", "batch_size"):
            value = getattr(self, field)
            if value is not None:
                update[field] = value
        topology = Topology.model_validate({**template.model_dump(), **update})
        return topology.in_world(self.world) if self.world is not None else topology

    def given(self) -> dict[str, object]:
        return self.model_dump(exclude_none=True)
