"""The training job an inventory records (`Inventory.job`), from `inventory from-torchrec`'s options and TorchRec's
own `Topology` when one is given (docs/torchrec.md, "Sequence tables, constraints and the job";
docs/architecture/data-model.md, "The job's world").

A TorchRec `Topology` states the job's world size, ranks per host (`local_world_size`), compute device and its
interconnect (`intra_host_bw`, `inter_host_bw`, bytes per ms): the job's world (dreamshard.values.world) is recorded
from those bandwidths, named `nvlink-ib` when they are TorchRec's planner defaults. A cpu topology that keeps those
defaults states nothing about its network (the constants describe GPUs), so no world is recorded for it. No torch or
torchrec import is needed: the topology's attributes are read as they are.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import ValidationError

from dreamshard.errors import ConfigError, InventoryError, first_line
from dreamshard.integrations.user_code import import_user_module
from dreamshard.values import JobTopology, Topology, World, named_world
from dreamshard.values.world import NVLINK_IB, WORLD_NAMES


def _gbps(bytes_per_ms: Any, what: str) -> float:
    """TorchRec's bandwidth (bytes per ms) in GB/s; InventoryError naming the attribute when it is no bandwidth."""
    try:
        value = float(bytes_per_ms) * 1000 / 1e9
    except (TypeError, ValueError):
        raise InventoryError(f"the TorchRec topology's {what} is {bytes_per_ms!r}, not bytes per ms") from None
    if not math.isfinite(value) or value <= 0:
        raise InventoryError(f"the TorchRec topology's {what} is {bytes_per_ms!r}: a bandwidth is positive")
    return value


def world_of(topology: Any) -> World | None:
    """The job's world as TorchRec's `topology` states it (the module docstring): its bandwidths in GB/s and its
    hosts; None for a cpu topology on TorchRec's default bandwidths."""
    intra = _gbps(getattr(topology, "intra_host_bw", None), "intra_host_bw")
    inter = _gbps(getattr(topology, "inter_host_bw", None), "inter_host_bw")
    assert NVLINK_IB.intra_host_gbps is not None and NVLINK_IB.inter_host_gbps is not None
    defaults = math.isclose(intra, NVLINK_IB.intra_host_gbps, rel_tol=1e-6) and math.isclose(
        inter, NVLINK_IB.inter_host_gbps, rel_tol=1e-6
    )
    device = str(getattr(topology, "compute_device", "cpu"))
    if defaults and device != "cuda":
        return None
    per_host = _per_host(topology)
    if defaults:
        return named_world(NVLINK_IB.name, devices_per_host=per_host)
    return World(
        name="torchrec-topology",
        alpha_ms=NVLINK_IB.alpha_ms,
        intra_host_gbps=intra,
        inter_host_gbps=inter,
        devices_per_host=per_host,
        source=f"the TorchRec Topology given to from-torchrec: intra_host_bw {intra:.4g} GB/s, inter_host_bw "
        f"{inter:.4g} GB/s; alpha 20 us assumed (TorchRec charges no latency)",
    )


def _per_host(topology: Any) -> int | None:
    """Ranks per host when the topology has several hosts (None: one host of every rank)."""
    local, world = getattr(topology, "local_world_size", None), getattr(topology, "world_size", None)
    return int(local) if local is not None and world is not None and int(local) != int(world) else None


def job_of(topology: Any) -> dict[str, Any]:
    """What TorchRec's `topology` states of the job: world size, ranks per host, device type and world."""
    device = str(getattr(topology, "compute_device", "cpu"))
    if device not in ("cpu", "cuda"):
        raise InventoryError(f"the TorchRec topology's compute_device is '{device}'; dreamshard plans cpu or cuda")
    stated: dict[str, Any] = {"world_size": int(topology.world_size), "device_type": device}
    if (per_host := _per_host(topology)) is not None:
        stated["devices_per_host"] = per_host
    if (world := world_of(topology)) is not None:
        stated["world"] = world
    return stated


def _merged(option: str, said: Any, key: str, stated: dict[str, Any]) -> Any:
    """An option's value, else the topology's; InventoryError naming both when they disagree."""
    theirs = stated.get(key)
    if said is not None and theirs is not None and said != theirs:
        raise InventoryError(f"{option} {said} is not the TorchRec topology's {key} {theirs}: give one")
    return said if said is not None else theirs


def job_topology(
    world_size: int | None = None,
    devices_per_host: int | None = None,
    memory_gb: float | None = None,
    optimizer: str | None = None,
    device_type: str | None = None,
    batch_size: int | None = None,
    *,
    topology: Any = None,
    world: str | None = None,
) -> JobTopology | None:
    """The training job the inventory is planned for (`Inventory.job`), None when neither a `world_size` nor a
    TorchRec `topology` is given; the other options need one. `topology` (TorchRec's `Topology`) fills what the
    options do not say (`job_of`); `world` names the job's world (a profile or a measured world, as `--world`).
    One-line InventoryError naming the bad option."""
    stated = job_of(topology) if topology is not None else {}
    world_size = _merged("--world-size", world_size, "world_size", stated)
    devices_per_host = _merged("--devices-per-host", devices_per_host, "devices_per_host", stated)
    device_type = _merged("--device-type", device_type, "device_type", stated)
    given = {
        "devices_per_host": devices_per_host,
        "memory_per_device_gb": memory_gb,
        "optimizer": optimizer,
        "device_type": device_type,
        "batch_size": batch_size,
        "world": _world(world, stated.get("world")),
    }
    if world_size is None:
        named = [k for k, v in given.items() if v is not None and k != "batch_size"]
        if named:
            raise InventoryError(f"the job's {named[0]} needs its world size (--world-size / world_size=)")
        return None
    try:
        return JobTopology.model_validate(
            {"world_size": world_size, **{k: v for k, v in given.items() if v is not None}}
        )
    except ValidationError as e:
        err = e.errors()[0]
        field = ".".join(str(x) for x in err.get("loc", ()))
        raise InventoryError(f"the job: {field + ': ' if field else ''}{err['msg']}") from None


def _world(name: str | None, stated: World | None) -> World | None:
    """The world `--world NAME` names, else the one the topology states; InventoryError when both say one."""
    if name is None:
        return stated
    if stated is not None:
        raise InventoryError(
            f"--world {name} and the TorchRec topology's bandwidths ({stated.name}) both name the job's world: give one"
        )
    try:
        return named_world(name)
    except ValueError:
        raise InventoryError(f"--world '{name}': choose {', '.join(WORLD_NAMES)}") from None


def load_topology(spec: str) -> Any:
    """The TorchRec `Topology` `spec` names: ``pkg.mod:name`` or ``path/to/file.py:name``, the object itself or a
    callable returning it (called without arguments). ConfigError, one line, otherwise."""
    target, sep, attr = spec.rpartition(":")
    what = f"--torchrec-topology {spec!r}"
    if not sep or not target or not attr.isidentifier():
        raise ConfigError(f"{what}: expected MODULE:NAME (pkg.mod:topology or path/to/file.py:make_topology)")
    found = getattr(import_user_module(target, what), attr, None)
    if found is None:
        raise ConfigError(f"{what}: {target} has no '{attr}'")
    if callable(found) and not hasattr(found, "intra_host_bw"):
        try:
            found = found()
        except SystemExit as e:  # the user's code ended the process: never our exit status, never silent
            raise ConfigError(f"{what}: {attr}() called sys.exit({e.code!r})") from None
        except Exception as e:  # the user's code
            raise ConfigError(f"{what}: {attr}() failed ({type(e).__name__}: {first_line(e)})") from None
    missing = [a for a in ("world_size", "intra_host_bw", "inter_host_bw") if not hasattr(found, a)]
    if missing:
        raise ConfigError(f"{what}: {type(found).__name__} is no TorchRec Topology (it has no {missing[0]})")
    return found


def torchrec_topology(topology: Topology, capacity_bytes: int) -> Any:
    """TorchRec's `Topology` of ours (the planner baseline plans on it): world size, ranks per host, `capacity_bytes`
    of HBM per cuda device (DDR per cpu device), and, when the world declares its bandwidths, those bandwidths (in
    TorchRec's bytes per ms; the inter-host one the topology's), so TorchRec's planner plans in the job's world too.
    Without a declared world TorchRec keeps its own defaults."""
    # optional dependency: torchrec
    from torchrec.distributed.planner.types import HardwareConfig, KernelConfig, TopologyFactory, TrainerConfig

    on_cuda = topology.device_type == "cuda"
    trainer = TrainerConfig(
        world_size=topology.num_devices,
        local_world_size=topology.local_world_size,
        hbm_cap_bytes=capacity_bytes if on_cuda else 0,
        ddr_cap_bytes=None if on_cuda else capacity_bytes,
    )
    world = topology.world
    if world is None or world.intra_host_gbps is None:
        return TopologyFactory.create_topology(
            trainer_config=trainer, kernel_config=KernelConfig(compute_device=topology.device_type)
        )
    hardware = HardwareConfig(
        intra_host_bw=world.intra_host_gbps * 1e9 / 1000,  # GB/s -> bytes per ms
        inter_host_bw=topology.inter_host_gbps * 1e9 / 1000,
    )
    kernel = KernelConfig(compute_device=topology.device_type, use_hardware_based_bandwidth=True)
    return TopologyFactory.create_topology(trainer_config=trainer, hardware_config=hardware, kernel_config=kernel)
