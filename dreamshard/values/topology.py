"""The topology a plan is for: devices, hosts, memory, batch, interconnect and the training job's optimizer
(docs/architecture/data-model.md, "Data model")."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from dreamshard.values.base import GB, Number, StrictModel

DeviceType = Literal["cpu", "cuda"]

#: Upper bounds of a topology (1 PiB devices, 16M-sample batches); table bounds are in dreamshard.values.tables.
MAX_DEVICE_GB = float(2**20)
MAX_BATCH = 2**24


#: How the all-to-all is costed: "measured" = the alpha-beta fit of a real benchmark on this machine (gloo on
#: CPU, NCCL on GPUs); "fast" = a fixed fast-interconnect profile (about 10 GB/s per device, NVLink-class
#: latency), for planning a cluster whose network is much faster than the machine that profiles.
Interconnect = Literal["measured", "fast"]
#: What an exchange costs per MB leaving each device when nothing was measured: the fallback profile (loopback-like,
#: ~2 GB/s) and the `fast` interconnect profile (10 GB/s); dreamshard.profiling.comm labels either as not a benchmark.
DEFAULT_BETA_MS_PER_MB = 0.5
FAST_BETA_MS_PER_MB = 0.1


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
    interconnect: Interconnect = "measured"
    # hosts x local devices (TorchRec's local_world_size); None: one flat host of all devices (the default)
    devices_per_host: Annotated[int, Number, Field(ge=1, le=4096)] | None = None
    inter_host_gbps: Annotated[float, Number, Field(gt=0, le=1e6)] = DEFAULT_INTER_HOST_GBPS
    optimizer: Optimizer = "sgd"
    memory_model: MemoryModel = "weights"
    memory_reserve: Annotated[float, Number, Field(ge=0.0, lt=1.0)] = 0.0  # fraction of each device kept free
    # host memory (DDR) each device may use: where `fused_uvm` / `fused_uvm_caching` tables keep their weights on a
    # cuda device (TorchRec's DDR_CAP default); on a cpu device every table lives in `memory_per_device_gb`
    host_memory_per_device_gb: Annotated[float, Number, Field(gt=0, le=MAX_DEVICE_GB)] = DEFAULT_HOST_MEMORY_GB

    @model_validator(mode="after")
    def _hosts_divide(self) -> Topology:
        L = self.devices_per_host
        if L is not None and self.num_devices % L:
            raise ValueError(
                f"{self.num_devices} devices do not make whole hosts of {L} devices each "
                f"(devices_per_host must divide num_devices)"
            )
        return self

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
