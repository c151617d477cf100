"""The topology a run plans for (docs/architecture/pipeline.md, "The production loop"): the training job's, as the
inventory records it (`Inventory.job`, `values/job.py`), over the params `topology` template and `world`, except where
the caller said otherwise (a CLI option, a flow request's field: an override of `resolve`).

`plan`, `replan`, `compare`, the pipeline's plan stage and the gate all take it from here, so a 2-rank job's
inventory is planned, gated and published for 2 ranks without anyone repeating `--devices 2`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pydantic import ValidationError

from dreamshard.config.learning import TopologyConfig
from dreamshard.documents import describe_validation_error
from dreamshard.errors import ConfigError, TopologyError
from dreamshard.values import JobTopology, Topology, World

#: The overrides (dotted params keys) that set a field a job records, and that field of `Topology`.
JOB_KEYS: Mapping[str, str] = {
    "plan.num_devices": "num_devices",
    "topology.devices_per_host": "devices_per_host",
    "topology.device_type": "device_type",
    "topology.memory_per_device_gb": "memory_per_device_gb",
    "topology.optimizer": "optimizer",
    "topology.batch_size": "batch_size",
}


def told_topology(told: Iterable[str]) -> bool:
    """Whether the override keys `told` say otherwise than the job an inventory records: a field of its topology
    (`JOB_KEYS`) or its world (`world.*`)."""
    return any(k in JOB_KEYS or k.startswith("world.") for k in told)


#: The most devices a topology may have (as `Topology.num_devices`).
MAX_DEVICES = 4096


def job_topology(
    section: TopologyConfig, devices: int, job: JobTopology | None, told: Iterable[str], world: World | None = None
) -> Topology:
    """The topology to plan for: `section` (params `topology`) on `devices` (params `plan.num_devices`) in `world`
    (params `world`) without a job; with one, the job's world size, hosts, device type, interconnect and what else
    it records, then every field the caller was `told` (override keys, `JOB_KEYS`; `world.*`: the params' world)
    from the params again. A device count told without a host layout takes the params' layout (`devices_per_host`)
    rather than the job's. ConfigError when the result is no topology (hosts that do not divide the devices, a
    world whose hosts are not the topology's), naming why."""
    told = set(told)
    said = {JOB_KEYS[k] for k in told if k in JOB_KEYS}
    try:
        if job is None:
            return section.topology(devices).in_world(world)
        n = devices if "num_devices" in said else job.world_size
        template = section.topology(n)  # the params' host rule applied to the device count planned for
        if "num_devices" in said:
            said.add("devices_per_host")
        update = {f: getattr(template, f) for f in said}
        ours = job.model_copy(update={"world": None})  # the world is chosen below, once
        topology = Topology.model_validate({**ours.topology(template).model_dump(), **update})
        told_world = any(k.startswith("world.") for k in told)  # the caller's world over the job's
        return topology.in_world(world if told_world or job.world is None else job.world)
    except ValidationError as e:
        raise ConfigError(f"topology: {describe_validation_error(e).removeprefix('input: ')}") from None
    except ValueError as e:  # the world's hosts are not the topology's
        raise ConfigError(f"world: {e}") from None


def describe_topology(topology: Topology) -> str:
    """A topology in a few words: "2 x cpu (1 GB, batch 2048, sgd)", with hosts when there are several."""
    t = topology
    devices = f"{t.hosts} hosts x {t.local_world_size}" if t.hosts > 1 else f"{t.num_devices}"
    world = f", world {t.world.name}" if t.world is not None else ""
    return f"{devices} x {t.device_type} ({t.memory_per_device_gb:g} GB, batch {t.batch_size}, {t.optimizer}{world})"


def host_overrides(devices: int | None, hosts: int | None, devices_per_host: int | None) -> dict[str, object]:
    """The params keys --devices/--hosts/--devices-per-host set: the device count is hosts x devices-per-host when
    --hosts is given (and must agree with --devices when both are). TopologyError otherwise."""
    if hosts is not None and devices_per_host is None:
        raise TopologyError("--hosts needs --devices-per-host (the devices on each host)")
    if hosts is not None and devices_per_host is not None:
        n = hosts * devices_per_host
        if n > MAX_DEVICES:
            raise TopologyError(
                f"--hosts {hosts} x --devices-per-host {devices_per_host} = {n} devices; at most {MAX_DEVICES}"
            )
        if devices is not None and devices != n:
            raise TopologyError(
                f"--devices {devices} is not --hosts {hosts} x --devices-per-host {devices_per_host} = {n}"
            )
        devices = n
    return {"plan.num_devices": devices, "topology.devices_per_host": devices_per_host}
