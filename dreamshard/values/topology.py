"""The topology a plan is for: devices, hosts, memory, batch, the job's world (its interconnect) and the training
job's optimizer (docs/architecture/data-model.md, "Data model")."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from dreamshard.values.base import GB, Number, StrictModel
from dreamshard.values.world import World, named_world

DeviceType = Literal["cpu", "cuda"]

#: Upper bounds of a topology (1 PiB devices, 16M-sample batches); table bounds are in dreamshard.values.tables.
MAX_DEVICE_GB = float(2**20)
MAX_BATCH = 2**24


#: The former `interconnect` field, read as the world it named: "measured" = no world declared (the host's fits),
#: "fast" = the `fast` profile (dreamshard.values.world). Plans and params written before the world load unchanged.
Interconnect = Literal["measured", "fast"]
#: What an exchange costs per MB leaving each device when nothing was measured: the fallback profile (loopback-like,
#: ~2 GB/s); dreamshard.profiling.comm labels it as not a benchmark.
DEFAULT_BETA_MS_PER_MB = 0.5


#: The optimizer a training job fuses into its embedding kernels: what optimizer state each table carries
#: (dreamshard.placement.device_memory: sgd none, row-wise Adagrad one float per row, Adam two per weight).
Optimizer = Literal["sgd", "rowwise_adagrad", "adam"]
#: How a device's memory is counted: "weights" = table weights and optimizer state only (the default);
#: "torchrec" = as TorchRec's storage estimator counts it: weights, optimizer state, the input/output buffers of
#: the batch (dreamshard.placement.device_memory). Either way `memory_reserve` of the device is kept free.
MemoryModel = Literal["weights", "torchrec"]
#: Bandwidth between hosts when nothing measured it (one machine cannot): a 100 Gb/s network, a topology
#: parameter and labelled so wherever it is used (dreamshard.profiling.comm).
DEFAULT_INTER_HOST_GBPS = 12.5
#: Host memory per device when the topology does not say (TorchRec's planner constant DDR_CAP, 128 GB).
DEFAULT_HOST_MEMORY_GB = 128.0


class Topology(StrictModel):
    num_devices: Annotated[int, Number, Field(ge=1, le=4096)]
    device_type: DeviceType = "cpu"
    memory_per_device_gb: Annotated[float, Number, Field(gt=0, le=MAX_DEVICE_GB)]
    batch_size: Annotated[int, Number, Field(ge=1, le=MAX_BATCH)] = 2048
    # the interconnect the job's collectives run on (dreamshard.values.world); None: none declared, the host's fits
    world: World | None = None
    # hosts x local devices (TorchRec's local_world_size); None: one flat host of all devices (the default)
    devices_per_host: Annotated[int, Number, Field(ge=1, le=4096)] | None = None
    inter_host_gbps: Annotated[float, Number, Field(gt=0, le=1e6)] = DEFAULT_INTER_HOST_GBPS
    optimizer: Optimizer = "sgd"
    memory_model: MemoryModel = "weights"
    memory_reserve: Annotated[float, Number, Field(ge=0.0, lt=1.0)] = 0.0  # fraction of each device kept free
    # host memory (DDR) each device may use: where `fused_uvm` / `fused_uvm_caching` tables keep their weights on a
    # cuda device (TorchRec's DDR_CAP default); on a cpu device every table lives in `memory_per_device_gb`
    host_memory_per_device_gb: Annotated[float, Number, Field(gt=0, le=MAX_DEVICE_GB)] = DEFAULT_HOST_MEMORY_GB

    @model_validator(mode="before")
    @classmethod
    def _interconnect(cls, data: Any) -> Any:
        """A topology written with the former `interconnect` field: "fast" is the `fast` world."""
        if isinstance(data, dict) and "interconnect" in data:
            data = dict(data)
            said = data.pop("interconnect")
            if said == "fast" and data.get("world") is None:
                data["world"] = named_world("fast")
            elif said not in ("measured", "fast"):
                raise ValueError(f"interconnect '{said}' is neither measured nor fast (name a world instead: world)")
        return data

    @model_validator(mode="after")
    def _hosts_divide(self) -> Topology:
        L = self.devices_per_host
        if L is not None and self.num_devices % L:
            raise ValueError(
                f"{self.num_devices} devices do not make whole hosts of {L} devices each "
                f"(devices_per_host must divide num_devices)"
            )
        return self

    def in_world(self, world: World | None) -> Topology:
        """This topology in `world`: the world recorded, its inter-host bandwidth taken when it declares one, and
        its hosts of `devices_per_host` when it declares them and this topology has no hosts (a topology of no more
        devices than one host is one host). ValueError naming both when the world's hosts are not this topology's
        or do not divide its devices."""
        update: dict[str, Any] = {"world": world}
        if world is not None and world.inter_host_gbps is not None:
            update["inter_host_gbps"] = world.inter_host_gbps
        per_host = world.devices_per_host if world is not None else None
        if per_host is not None and self.devices_per_host not in (None, per_host):
            raise ValueError(
                f"world '{world.name if world else ''}' has {per_host} devices per host, the topology "
                f"{self.devices_per_host}: say one (world.devices_per_host or topology.devices_per_host)"
            )
        if per_host is not None and self.devices_per_host is None and self.num_devices > per_host:
            update["devices_per_host"] = per_host
        return Topology.model_validate({**self.model_dump(), **update})

    @property
    def hosts(self) -> int:
        return 1 if self.devices_per_host is None else self.num_devices // self.devices_per_host

    @property
    def local_world_size(self) -> int:
        """Devices per host (all of them on a flat topology)."""
        return self.devices_per_host or self.num_devices

    def host_of(self, device: int) -> int:
        return device // self.local_world_size

    @property
    def memory_per_device_bytes(self) -> int:
        return int(self.memory_per_device_gb * GB)

    @property
    def usable_memory_bytes(self) -> int:
        """What plans may fill: the device's memory less the reserve."""
        return int(self.memory_per_device_gb * (1.0 - self.memory_reserve) * GB)
